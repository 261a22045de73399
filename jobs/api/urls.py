"""Routes of the REST API, mounted at /api/v1/ (namespace ``api``)."""

from django.urls import include, path
from rest_framework.routers import DefaultRouter

from jobs.api import views

app_name = "api"

router = DefaultRouter()
router.register("jobs", views.JobViewSet, basename="job")
router.register("teams", views.TeamViewSet, basename="team")

urlpatterns = [
    path("queue/", views.QueueView.as_view(), name="queue"),
    path("queue/reorder/", views.QueueReorderView.as_view(), name="queue-reorder"),
    path("cluster/", views.ClusterView.as_view(), name="cluster"),
    path("rightsize/", views.RightsizeView.as_view(), name="rightsize"),
    path("", include(router.urls)),
]
