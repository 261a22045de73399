"""Routes of the REST API, mounted at /api/v1/ (namespace ``api``)."""

from django.urls import include, path, re_path
from rest_framework.routers import DefaultRouter

from jobs.api import views
from jobs.api.checkpoints import CheckpointsView

app_name = "api"

router = DefaultRouter()
router.register("jobs", views.JobViewSet, basename="job")
router.register("teams", views.TeamViewSet, basename="team")

urlpatterns = [
    path("queue/", views.QueueView.as_view(), name="queue"),
    path("queue/reorder/", views.QueueReorderView.as_view(), name="queue-reorder"),
    path("cluster/", views.ClusterView.as_view(), name="cluster"),
    path("rightsize/", views.RightsizeView.as_view(), name="rightsize"),
    # The router's own pattern for a job id (any text but / and .): an id that is no number is the view's 404
    # as JSON, not the URL resolver's HTML page.
    re_path(r"^jobs/(?P<id>[^/.]+)/checkpoints/$", CheckpointsView.as_view(), name="job-checkpoints"),
    path("", include(router.urls)),
]
