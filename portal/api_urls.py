"""Routes of the REST API, mounted at /api/v1/ (namespace ``api``): the portal composes each app's API.

The jobs' (``jobs/api/``: jobs, queue, right-sizing, a job's own checkpoint reports), the teams'
(``teams/api/``) and the cluster's (``scheduler/api/``), under one router so the API root lists them together.
"""

from django.urls import include, path, re_path
from rest_framework.routers import DefaultRouter

from jobs.api import views as jobs_api
from jobs.api.checkpoints import CheckpointsView
from scheduler.api.views import ClusterView
from teams.api.views import TeamViewSet

app_name = "api"

router = DefaultRouter()
router.register("jobs", jobs_api.JobViewSet, basename="job")
router.register("teams", TeamViewSet, basename="team")

urlpatterns = [
    path("queue/", jobs_api.QueueView.as_view(), name="queue"),
    path("queue/reorder/", jobs_api.QueueReorderView.as_view(), name="queue-reorder"),
    path("cluster/", ClusterView.as_view(), name="cluster"),
    path("rightsize/", jobs_api.RightsizeView.as_view(), name="rightsize"),
    # The router's own pattern for a job id (any text but / and .): an id that is no number is the view's 404
    # as JSON, not the URL resolver's HTML page.
    re_path(r"^jobs/(?P<id>[^/.]+)/checkpoints/$", CheckpointsView.as_view(), name="job-checkpoints"),
    path("", include(router.urls)),
]
