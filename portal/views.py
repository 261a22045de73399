"""Portal pages that belong to no single app: home and health."""

from __future__ import annotations

import logging

from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from jobs.selectors import job_list_for_user
from teams.selectors import team_overview_for_user

logger = logging.getLogger(__name__)


@login_required
@require_GET
def home(request: HttpRequest) -> HttpResponse:
    return render(
        request,
        "portal/home.html",
        {
            "teams": team_overview_for_user(user=request.user),
            "jobs": job_list_for_user(user=request.user)[:20],
        },
    )


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
