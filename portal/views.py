"""Portal pages that belong to no single app: home, the API token page, and health."""

from __future__ import annotations

import logging

from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods
from rest_framework.authtoken.models import Token

from jobs.selectors import job_list_for_user
from teams.selectors import team_overview_for_user

logger = logging.getLogger(__name__)


@login_required
@require_GET
def home(request: HttpRequest) -> HttpResponse:
    """A member of exactly one team lands on its dashboard; everyone else sees their teams side by side."""
    teams = team_overview_for_user(user=request.user)
    if len(teams) == 1 and teams[0].role != "admin":
        return redirect("jobs:dashboard", slug=teams[0].team.slug)
    return render(
        request,
        "portal/home.html",
        {
            "teams": teams,
            "jobs": job_list_for_user(user=request.user)[:20],
        },
    )


@login_required
@require_http_methods(["GET", "POST"])
def api_token(request: HttpRequest) -> HttpResponse:
    """Show the user's API token; POST makes a new one (the old one stops working at once)."""
    if request.method == "POST":
        Token.objects.filter(user=request.user).delete()
        Token.objects.create(user=request.user)
        return redirect("api_token")
    token = Token.objects.filter(user=request.user).first()
    return render(request, "portal/api_token.html", {"token": token})


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness and database reachability for load balancers and Kubernetes probes."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return JsonResponse({"status": "ok"})
    except Exception:  # a probe must answer, whatever broke; the detail goes to the log, not to the public
        logger.exception("health check: database unreachable")
        return JsonResponse({"status": "error", "detail": "database unreachable"}, status=503)
