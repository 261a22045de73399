"""The cluster API: every node and GPU with its MIG instances, scoped to the teams its reader may see."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from jobs import access
from scheduler.api.serializers import ClusterSerializer
from scheduler.cluster_map import cluster_map
from teams.roles import is_platform_admin


class ClusterView(APIView):
    @extend_schema(responses={200: ClusterSerializer})
    def get(self, request: Request) -> Response:
        """Every node and GPU with its MIG instances, who holds each (by team), tiers and free capacity."""
        visible = None if is_platform_admin(request.user) else set(access.roles_by_team(user=request.user))
        return Response(ClusterSerializer(cluster_map(visible_team_ids=visible)).data)
