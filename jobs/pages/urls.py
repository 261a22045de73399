"""The team lead's pages (namespace ``jobs``)."""

from django.urls import path

from jobs.pages import job_list, views

app_name = "jobs"

urlpatterns = [
    path("dashboard/", views.dashboard_home, name="dashboard_home"),
    path("teams/<slug:slug>/", views.dashboard, name="dashboard"),
    path("teams/<slug:slug>/manage/", views.manage, name="manage"),
    path("jobs/", job_list.job_list, name="list"),
    path("jobs/submit/", views.submit, name="submit"),
    path("jobs/suggest/", views.suggest_partial, name="suggest"),
    path("jobs/checkpoint-interval/", views.checkpoint_interval_partial, name="checkpoint_interval"),
    path("jobs/<int:job_id>/", views.detail, name="detail"),
    path("jobs/<int:job_id>/logs/", views.job_logs, name="logs"),
    path("jobs/<int:job_id>/logs/download/", views.job_logs_download, name="logs_download"),
    path("jobs/<int:job_id>/cancel/", views.cancel, name="cancel"),
    path("jobs/<int:job_id>/priority/", views.set_priority, name="priority"),
    path("queue/", views.queue, name="queue"),
]
