"""The cluster view: every node and GPU, MIG slices drawn as a map by team, tiers and free capacity."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from jobs.access import roles_by_team
from scheduler.cluster_map import cluster_map
from teams.http import SignedInRequest
from teams.roles import is_platform_admin


@login_required
@require_GET
def cluster(request: SignedInRequest) -> HttpResponse:
    """Every signed-in user sees the fleet and which team holds what; job names only of their own teams."""
    visible = None if is_platform_admin(request.user) else set(roles_by_team(user=request.user))
    data = cluster_map(visible_team_ids=visible)
    template = "scheduler/partials/cluster_map.html" if request.htmx else "scheduler/cluster.html"
    return render(request, template, {"map": data})
