"""``/api/v1/jobs/{id}/checkpoints/``: a job reports its checkpoints (POST), its team reads them (GET).

The two methods have different callers, so they authenticate differently:

- **POST** takes the job's own report credential and nothing else (:mod:`jobs.api.authentication`): a user's
  session or token is refused (401), reports come from the job. The credential of job A posting to job B:
  403. A job that has ended has its credential revoked: 401, also when it ends between the check of the
  credential and the write (the service's "ended" refusal is answered the same way, never 409). 201 when the
  step is recorded, 200 when that step already was (a retried report). Throttled per job: the classes of
  ``settings.JOB_REPORT_THROTTLE_CLASSES`` (the ``job_report`` rate, failing open like the others).
- **GET** is the user API's (token or session), scoped like the job's detail: another team's job, or one
  that does not exist, is a 404.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.utils import timezone
from django.utils.module_loading import import_string
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.authentication import BaseAuthentication
from rest_framework.exceptions import AuthenticationFailed, NotFound
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import BaseThrottle
from rest_framework.views import APIView

from jobs.api.authentication import JobCredentialAuthentication, JobPrincipal, revoked_message
from jobs.api.permissions import ReportsForThisJob
from jobs.api.serializers import CheckpointReportSerializer, CheckpointSerializer
from jobs.api.specs import json_parsers
from jobs.errors import JobNotFound, JobStateError
from jobs.selectors.jobs import checkpoint_row, job_checkpoints, job_get_for_user
from jobs.services import CheckpointReport, checkpoint_record

JOB_ID = OpenApiParameter("id", OpenApiTypes.INT, OpenApiParameter.PATH, description="The job's id")


class CheckpointsView(APIView):
    def _reporting(self) -> bool:
        """Whether this request is a job's report. Asked before DRF wraps the request (Django's ``setup`` has
        set it); the schema's error hook builds the view with no request at all, which reads as a GET."""
        request = getattr(self, "request", None)
        return request is not None and request.method == "POST"

    def get_authenticators(self) -> list[BaseAuthentication]:
        return [JobCredentialAuthentication()] if self._reporting() else super().get_authenticators()

    def get_permissions(self) -> Sequence[Any]:
        return [ReportsForThisJob()] if self._reporting() else super().get_permissions()

    def get_throttles(self) -> list[BaseThrottle]:
        if self._reporting():  # named by the settings, as DRF's own throttles are: the portal composes the apps
            return [import_string(name)() for name in settings.JOB_REPORT_THROTTLE_CLASSES]
        return super().get_throttles()

    def get_parsers(self) -> list[Any]:
        return json_parsers(super().get_parsers()) if self._reporting() else super().get_parsers()

    @extend_schema(parameters=[JOB_ID], responses={200: CheckpointSerializer(many=True)})
    def get(self, request: Request, **kwargs: Any) -> Response:
        """The job's recorded checkpoints, oldest first: its own reports, the ones the gateway read from the
        job's manifest, and the simulated fleet's."""
        try:
            job = job_get_for_user(user=request.user, job_id=kwargs["id"])
        except JobNotFound:
            raise NotFound() from None
        return Response(CheckpointSerializer(job_checkpoints(job=job), many=True).data)

    @extend_schema(
        parameters=[JOB_ID],
        request=CheckpointReportSerializer,
        responses={
            201: OpenApiResponse(CheckpointSerializer, description="Recorded"),
            200: OpenApiResponse(CheckpointSerializer, description="This step was already recorded: nothing changed"),
        },
    )
    def post(self, request: Request, **kwargs: Any) -> Response:
        """Report one complete checkpoint of the job, with the job's own credential (``Authorization: Bearer
        mcj.<job id>.<hmac>``, mounted into its pods). Idempotent per step."""
        principal = request.user
        assert isinstance(principal, JobPrincipal)  # ReportsForThisJob let nothing else through
        body = CheckpointReportSerializer(data=request.data, context={"job": principal.job})
        body.is_valid(raise_exception=True)
        report = CheckpointReport(**body.validated_data, source="job")
        try:
            event, created = checkpoint_record(job=principal.job, report=report, now=timezone.now())
        except JobStateError:
            raise AuthenticationFailed(revoked_message(principal.job_id)) from None
        code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
        return Response(CheckpointSerializer(checkpoint_row(event)).data, status=code)
