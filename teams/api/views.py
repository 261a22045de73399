"""The teams API: the reader's teams (every team for platform admins), each with its dashboard and utilization.

A team the reader may not see is a 404, as a job is (``jobs.api.permissions.team_for``).
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from jobs import access
from jobs.api.permissions import team_for
from jobs.selectors.team_usage import DEFAULT_WINDOW, WINDOWS_S, team_dashboard, team_utilization_series
from teams.api.serializers import ClassSeriesSerializer, DashboardSerializer, TeamSerializer
from teams.models import Team
from teams.roles import is_platform_admin
from teams.selectors import team_list_for_user


class TeamViewSet(viewsets.ViewSet):
    """Your teams (every team for platform admins), each with its dashboard and utilization series."""

    lookup_field = "slug"
    serializer_class = TeamSerializer
    queryset = Team.objects.none()  # for the schema only: reads go through team_list_for_user

    def _row(self, team: Any, role: str) -> dict[str, Any]:
        return {"slug": team.slug, "name": team.name, "namespace": team.namespace, "weight": team.weight, "role": role}

    @extend_schema(responses={200: TeamSerializer(many=True)})
    def list(self, request: Request) -> Response:
        roles = access.roles_by_team(user=request.user)
        admin = is_platform_admin(request.user)
        teams = team_list_for_user(user=request.user).order_by("slug")
        return Response([self._row(t, "admin" if admin else roles.get(t.pk, "")) for t in teams])

    @extend_schema(responses={200: TeamSerializer})
    def retrieve(self, request: Request, slug: str | None = None) -> Response:
        team, role = team_for(request, slug or "")
        return Response(self._row(team, role))

    @extend_schema(responses={200: DashboardSerializer})
    @action(detail=True, methods=["get"])
    def dashboard(self, request: Request, slug: str | None = None) -> Response:
        team, _ = team_for(request, slug or "")
        return Response(DashboardSerializer(team_dashboard(team=team)).data)

    @extend_schema(
        parameters=[OpenApiParameter("window", OpenApiTypes.STR, enum=[*WINDOWS_S], default=DEFAULT_WINDOW)],
        responses={200: ClassSeriesSerializer(many=True)},
    )
    @action(detail=True, methods=["get"])
    def utilization(self, request: Request, slug: str | None = None) -> Response:
        team, _ = team_for(request, slug or "")
        window = request.query_params.get("window", DEFAULT_WINDOW)
        if window not in WINDOWS_S:
            raise ValidationError({"window": [f"must be one of {', '.join(WINDOWS_S)}"]})
        return Response(ClassSeriesSerializer(team_utilization_series(team=team, window=window), many=True).data)
