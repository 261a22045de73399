"""Reads of teams, always scoped to the requesting user."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import AnonymousUser
from django.db.models import Prefetch, QuerySet

from teams.models import Membership, Quota, Team
from teams.roles import AnyUser, is_platform_admin


def team_list_for_user(*, user: AnyUser) -> QuerySet[Team]:
    """The teams a user may see: their own; every team for platform admins."""
    if not user.is_authenticated:
        return Team.objects.none()
    if is_platform_admin(user):
        return Team.objects.all()
    return Team.objects.filter(memberships__user=user).distinct()


@dataclass(frozen=True)
class TeamOverview:
    team: Team
    role: str  # "lead", "member", or "admin" for a platform admin who is not a member
    quotas: list[Quota]


def team_overview_for_user(*, user: AnyUser) -> list[TeamOverview]:
    if isinstance(user, AnonymousUser):
        return []  # sees no team (team_list_for_user)
    teams = team_list_for_user(user=user).prefetch_related(
        Prefetch("quotas", queryset=Quota.objects.order_by("gpu_class"))
    )
    roles = dict(Membership.objects.filter(user=user).values_list("team_id", "role"))
    return [TeamOverview(team=t, role=roles.get(t.pk, "admin"), quotas=list(t.quotas.all())) for t in teams]
