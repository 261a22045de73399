"""The REST API (``/api/v1/``): token or session auth, page-number pagination, django-filter filtering.

Reads go through the scoped selectors, so another team's job or team is a 404; writes call the jobs
services with the requesting user as the actor, so every change is a job event with its author.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, inline_serializer
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.generics import ListAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from jobs import access
from jobs.api.filters import JobFilter, QueueFilter
from jobs.api.idempotency import idempotent
from jobs.api.permissions import require_cancel, require_manage, role_for_job, team_for
from jobs.api.serializers import (
    BulkCancelSerializer,
    CancelSerializer,
    JobDetailSerializer,
    JobEventSerializer,
    JobSerializer,
    JobSubmitSerializer,
    PrioritySerializer,
    RankSerializer,
    ReorderSerializer,
    ReplicaLogSerializer,
    RightsizeSerializer,
    SuggestionSerializer,
)
from jobs.api.specs import json_parsers, spec_body
from jobs.errors import JobNotFound, LogRequestInvalid
from jobs.models import Job
from jobs.selectors.jobs import (
    job_allocations,
    job_events,
    job_get_for_user,
    job_list_for_user,
    job_list_queue,
    job_usage,
    jobs_for_user_by_ids,
)
from jobs.selectors.logs import DOWNLOAD_LIMIT_BYTES, MAX_TAIL_LINES, PAGE_TAIL_LINES, job_log_read, log_params
from jobs.selectors.moves import moves_of, with_moving
from jobs.selectors.rightsizing import RIGHTSIZE_KEYS, suggest
from jobs.services import (
    job_cancel,
    job_cancel_bulk,
    job_list_reorder,
    job_set_priority,
    job_set_rank,
    job_submit,
)
from scheduler.core.model.vocabulary import Priority
from scheduler.errors import GatewayError
from teams.http import SignedInApiRequest
from teams.selectors import team_list_for_user


class JobViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Jobs of your teams: list and filter, read one with its timeline and placement, submit, cancel,
    change priority or rank."""

    serializer_class = JobSerializer
    filterset_class = JobFilter

    def get_queryset(self) -> QuerySet[Job]:
        return with_moving(job_list_for_user(user=self.request.user))

    def get_object(self) -> Job:
        try:
            return job_get_for_user(user=self.request.user, job_id=self.kwargs["pk"])
        except JobNotFound:
            raise NotFound() from None

    @extend_schema(responses={200: JobDetailSerializer})
    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return self._detail(self.get_object(), refresh=False)

    def get_parsers(self) -> list[Any]:
        # The schema reads this with the action set, so it offers a submit as JSON only; at run time DRF asks
        # before the action is known, and spec_body refuses a form body with a 400 that says to send JSON.
        parsers = super().get_parsers()
        return json_parsers(parsers) if getattr(self, "action", None) == "create" else parsers

    @extend_schema(request=JobSubmitSerializer, responses={201: JobDetailSerializer})
    @idempotent
    def create(self, request: SignedInApiRequest, *args: Any, **kwargs: Any) -> Response:
        """Submit a job: the body is a job spec (the job keys of spec/scenario.md plus ``team``), checked whole
        by the same reader as the portal form and ``manage.py jobs submit``; unknown keys are refused."""
        spec = spec_body(request)
        slug = spec.pop("team", None)
        if not isinstance(slug, str) or not slug.strip():
            raise ValidationError({"team": ["required: the slug of one of your teams"]})
        team, role = team_for(request, slug)
        priority = spec.get("priority", Priority.NORMAL.value)
        known = isinstance(priority, str) and priority in {p.value for p in Priority}  # else the reader says why
        if known and priority not in access.priorities_allowed(role):
            raise ValidationError(
                {"priority": [f"your role in {team.slug} allows {', '.join(access.priorities_allowed(role))}"]}
            )
        if "rank" in spec and not access.can_manage(role):
            raise ValidationError({"rank": ["only the team's lead sets a rank"]})
        job = job_submit(team=team, spec=spec, actor=request.user, source="spec")
        return self._detail(job, status.HTTP_201_CREATED)

    def _detail(self, job: Job, code: int = status.HTTP_200_OK, *, refresh: bool = True) -> Response:
        if refresh:  # after a write: the state as stored now
            job = job_get_for_user(user=self.request.user, job_id=job.pk)
        data = JobDetailSerializer(
            _Detail(job, list(job_events(job=job)), list(job_allocations(job=job)), job_usage(job=job)),
            context=self.get_serializer_context(),
        ).data
        return Response(data, status=code)

    @extend_schema(request=CancelSerializer, responses={200: JobDetailSerializer})
    @action(detail=True, methods=["post"])
    @idempotent
    def cancel(self, request: SignedInApiRequest, pk: str | None = None) -> Response:
        job = self.get_object()
        require_cancel(request, job, role_for_job(request, job))
        body = CancelSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        job_cancel(job=job, actor=request.user, reason=body.validated_data.get("reason", ""))
        return self._detail(job)

    @extend_schema(request=PrioritySerializer, responses={200: JobDetailSerializer})
    @action(detail=True, methods=["post"])
    @idempotent
    def priority(self, request: SignedInApiRequest, pk: str | None = None) -> Response:
        job = self.get_object()
        role = role_for_job(request, job)
        require_manage(role, "change a job's priority")
        body = PrioritySerializer(data=request.data)
        body.is_valid(raise_exception=True)
        job_set_priority(job=job, priority=body.validated_data["priority"], actor=request.user)
        return self._detail(job)

    @extend_schema(request=RankSerializer, responses={200: JobDetailSerializer})
    @action(detail=True, methods=["post"])
    @idempotent
    def rank(self, request: SignedInApiRequest, pk: str | None = None) -> Response:
        job = self.get_object()
        require_manage(role_for_job(request, job), "change a job's rank")
        body = RankSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        job_set_rank(job=job, rank=body.validated_data["rank"], actor=request.user)
        return self._detail(job)

    @extend_schema(responses={200: JobEventSerializer(many=True)})
    @action(detail=True, methods=["get"], filterset_class=None, pagination_class=None)
    def events(self, request: Request, pk: str | None = None) -> Response:
        job = self.get_object()
        return Response(JobEventSerializer(job_events(job=job), many=True).data)

    @extend_schema(
        parameters=[
            OpenApiParameter("replica", OpenApiTypes.INT, description="The replica (0 to replicas - 1); default 0."),
            OpenApiParameter(
                "tail", OpenApiTypes.INT, description=f"Last lines, 1 to {MAX_TAIL_LINES}; default {PAGE_TAIL_LINES}."
            ),
        ],
        responses={
            200: ReplicaLogSerializer,
            503: OpenApiResponse(
                inline_serializer("LogUnavailable", {"detail": serializers.CharField()}),
                description="The cluster cannot give the log right now (unreachable, overloaded): try again shortly",
            ),
        },
    )
    @action(detail=True, methods=["get"], filterset_class=None, pagination_class=None)
    def logs(self, request: Request, pk: str | None = None) -> Response:
        """The last lines of one replica's log (the job page's, same scoping: another team's job is a 404)."""
        job = self.get_object()
        try:
            replica, tail = log_params(request.query_params, job=job)
        except LogRequestInvalid as exc:
            raise ValidationError(exc.errors) from None
        try:
            log = job_log_read(job=job, replica=replica, tail_lines=tail, limit_bytes=DOWNLOAD_LIMIT_BYTES)
        except GatewayError as exc:
            detail = f"the cluster cannot give the log right now ({exc}); try again in a minute"
            return Response({"detail": detail}, status=status.HTTP_503_SERVICE_UNAVAILABLE)
        body = {
            "job": job.pk,
            "replica": replica,
            "tail": tail,
            "source": str(log.source),
            "truncated": log.truncated,
            "note": log.note,
            "text": log.text,
        }
        return Response(ReplicaLogSerializer(body).data)

    @extend_schema(request=BulkCancelSerializer, responses={200: JobSerializer(many=True)})
    @action(detail=False, methods=["post"], url_path="bulk-cancel", filterset_class=None, pagination_class=None)
    @idempotent
    def bulk_cancel(self, request: SignedInApiRequest) -> Response:
        body = BulkCancelSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        team, role = team_for(request, body.validated_data["team"])
        require_manage(role, "cancel several jobs at once")
        ids = body.validated_data["job_ids"]
        jobs = jobs_for_user_by_ids(user=request.user, job_ids=ids, team=team)
        missing = sorted(set(ids) - {j.pk for j in jobs})
        if missing:
            raise ValidationError({"job_ids": [f"not jobs of team {team.slug}: {', '.join(map(str, missing))}"]})
        cancelled = job_cancel_bulk(jobs=jobs, actor=request.user, reason=body.validated_data.get("reason", ""))
        return Response(JobSerializer(cancelled, many=True, context=self.get_serializer_context()).data)


class _Detail:
    """A job with its timeline, placement and usage, for :class:`JobDetailSerializer`."""

    def __init__(self, job: Job, events: list[Any], allocations: list[Any], usage: Any) -> None:
        self._job = job
        self.events = events
        self.allocations = allocations
        self.moves = moves_of(events)
        self.usage = usage

    def __getattr__(self, name: str) -> Any:
        return getattr(self._job, name)


class QueueView(ListAPIView):
    """Pending jobs of your teams in the scheduler's order, with global and team positions, ETA and why each
    waits (``waiting_reason``)."""

    serializer_class = JobSerializer
    filterset_class = QueueFilter

    def get_queryset(self) -> QuerySet[Job]:
        return job_list_queue(user=self.request.user)


class QueueReorderView(APIView):
    @extend_schema(request=ReorderSerializer, responses={200: JobSerializer(many=True)})
    @idempotent
    def post(self, request: SignedInApiRequest) -> Response:
        """Set the order of a team's pending jobs (within each priority); returns the queue of the team."""
        body = ReorderSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        team, role = team_for(request, body.validated_data["team"])
        require_manage(role, "reorder the team's jobs")
        job_list_reorder(team=team, order=body.validated_data["job_ids"], actor=request.user)
        queue = job_list_queue(user=request.user, team=team)
        return Response(JobSerializer(queue, many=True, context={"request": request}).data)


def _rightsize_team(request: Request, slug: object) -> str | None:
    """The team a right-sizing question is asked for: the named one (among the user's, else 404), or the
    user's only team, or None."""
    if slug is None:
        teams = list(team_list_for_user(user=request.user).values_list("slug", flat=True)[:2])
        return teams[0] if len(teams) == 1 else None
    if not isinstance(slug, str):
        raise ValidationError({"team": [f"must be a team slug (a string), got {type(slug).__name__}"]})
    team, _ = team_for(request, slug)
    return team.slug


class RightsizeView(APIView):
    def get_parsers(self) -> list[Any]:
        return json_parsers(super().get_parsers())

    @extend_schema(request=RightsizeSerializer, responses={200: SuggestionSerializer})
    def post(self, request: Request) -> Response:
        """What the scheduler would do with this job now: the MIG profile or GPUs each replica gets, on which
        GPU model, tier and nodes, at what cost per hour — or why it waits, or why it could never run (a submit
        of it is refused) — and every GPU model and tier it could use, in the order the scheduler tries them,
        with the memory estimate behind a memory or model request. The same answer as the submit page's.
        Nothing is submitted. The body is the request keys of a job spec (read by the same reader as a submit)
        and optionally the team."""
        spec = spec_body(request)
        unknown = sorted(set(spec) - {*RIGHTSIZE_KEYS, "team"})
        if unknown:
            allowed = ", ".join((*RIGHTSIZE_KEYS, "team"))
            raise ValidationError({key: [f"unknown key; allowed here: {allowed}"] for key in unknown})
        result = suggest(spec, team=_rightsize_team(request, spec.pop("team", None)))
        if result.errors:
            raise ValidationError(result.errors)
        return Response(SuggestionSerializer(result).data)
