"""Finance pages under /billing/ and the chargeback API (included at the root by portal/urls.py)."""

from django.urls import path

from billing import api, views

app_name = "billing"

urlpatterns = [
    path("billing/", views.reports, name="reports"),
    path("billing/teams/<slug:slug>/", views.reports, name="team"),
    path("billing/download/", views.download, name="download"),
    path("billing/advisor/", views.advisor, name="advisor"),
    path("api/v1/chargeback/", api.ChargebackAPIView.as_view(), name="api-chargeback"),
]
