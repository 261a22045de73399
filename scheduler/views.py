"""The cluster view: every node and GPU, MIG slices drawn as a map by team, tiers and free capacity; for platform
admins, what production waited for this week and what would end it (the procurement advisor's advice)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from billing.procurement import production_wait_advise
from jobs.access import roles_by_team
from scheduler.cluster_map import cluster_map
from teams.http import SignedInRequest
from teams.roles import is_platform_admin


@login_required
@require_GET
def cluster(request: SignedInRequest) -> HttpResponse:
    """Every signed-in user sees the fleet and which team holds what; job names only of their own teams. Platform
    admins also see the production wait advice, which names every team's burst limit (the full page only: the map's
    refresh does not read it again)."""
    admin = is_platform_admin(request.user)
    visible = None if admin else set(roles_by_team(user=request.user))
    data = cluster_map(visible_team_ids=visible)
    if request.htmx:
        return render(request, "scheduler/partials/cluster_map.html", {"map": data})
    context: dict[str, object] = {"map": data}
    if admin:
        context["production_wait"] = production_wait_advise(now=timezone.now())
    return render(request, "scheduler/cluster.html", context)
