"""Portal pages that belong to no single app: home, the API token page, health, the sign-in lockout page, and
the API schema and docs (public or behind sign-in by ``API_SCHEMA_PUBLIC``)."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import redirect_to_login
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.templatetags.static import static
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.authtoken.models import Token
from rest_framework.permissions import AllowAny, BasePermission, IsAuthenticated
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from jobs.selectors.jobs import job_list_for_user
from jobs.selectors.team_usage import quota_use_for_user
from portal.api_tokens import api_token_create, api_token_last_used, api_token_prefix, api_token_revoke
from portal.lockout import account_failures, account_unlock
from portal.signin import SignInForm
from teams.http import SignedInRequest
from teams.roles import is_finance
from teams.selectors import team_overview_for_user

logger = logging.getLogger(__name__)


@login_required
@require_GET
def home(request: SignedInRequest) -> HttpResponse:
    """A member of exactly one team lands on its dashboard; finance without a team on the billing reports;
    everyone else sees their teams side by side."""
    teams = team_overview_for_user(user=request.user)
    if not teams and is_finance(request.user):
        return redirect("billing:reports")  # finance's work is the cost reports, not a team's jobs
    if len(teams) == 1 and teams[0].role != "admin":
        return redirect("jobs:dashboard", slug=teams[0].team.slug)
    use = quota_use_for_user(user=request.user)
    return render(
        request,
        "portal/home.html",
        {
            "teams": teams,
            # Each team's quota rows with what lies above its guarantee now, for the notes under its quotas.
            "cards": [(t, use.get(t.team.pk, [])) for t in teams],
            "jobs": job_list_for_user(user=request.user)[:20],
        },
    )


@login_required
@require_http_methods(["GET", "POST"])
def api_token(request: SignedInRequest) -> HttpResponse:
    """The user's API token: its prefix, when it was made and last used. POST makes a new one (the old one stops
    working at once), whose key this one answer shows; no later page shows it again."""
    if request.method == "POST":
        made = api_token_create(user=request.user)
        response = render(request, "portal/api_token.html", _token_context(made, new_key=made.key))
        add_never_cache_headers(response)  # the key must not sit in a cache or come back with the back button
        return response
    token = Token.objects.filter(user=request.user).first()
    return render(request, "portal/api_token.html", _token_context(token, new_key=None))


@login_required
@require_POST
def api_token_revoke_view(request: SignedInRequest) -> HttpResponse:
    """Revoke the signed-in user's own token; there is no way to name anyone else's."""
    if api_token_revoke(user=request.user):
        messages.success(request, "Token revoked: requests with it are refused from now on.")
    else:
        messages.info(request, "You had no token to revoke.")
    return redirect("api_token")


@login_required
@require_http_methods(["GET", "POST"])
def sign_ins(request: SignedInRequest) -> HttpResponse:
    """The signed-in user's recent failed sign-ins; POST unlocks their own account (portal.lockout): the owner,
    still signed in on another device, need not wait for the lock to lapse or find an admin. Only their own
    username can be named, so no one unlocks, or learns about, another account here."""
    if request.method == "POST":
        removed = account_unlock(username=request.user.get_username())
        if removed:
            messages.success(request, "Unlocked: your account's failed sign-ins are forgotten.")
        else:
            messages.info(request, "There was nothing to unlock.")
        return redirect("sign_ins")
    failures = account_failures(username=request.user.get_username())
    return render(request, "portal/sign_ins.html", {**failures, "lockout_minutes": settings.LOGIN_LOCKOUT_MINUTES})


def _token_context(token: Token | None, *, new_key: str | None) -> dict[str, object]:
    return {
        "token": token,
        "new_key": new_key,
        "prefix": api_token_prefix(token) if token is not None else "",
        "last_used_at": api_token_last_used(token) if token is not None else None,
    }


@require_GET
def favicon(request: HttpRequest) -> HttpResponse:
    """``/favicon.ico``, which browsers and bots ask for whatever the page links: the static icon."""
    return redirect(static("favicon.svg"), permanent=True)


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


def client_address(request: HttpRequest) -> str:
    """The caller's address as the sign-in lockout counts it: REMOTE_ADDR, or with ``TRUSTED_PROXY_COUNT`` = n
    proxies in front, the n-th entry of X-Forwarded-For from the right (the one our outermost proxy wrote).

    The same rule as DRF's ``NUM_PROXIES`` for the anonymous throttle, so both see one address. Entries left of
    it are the caller's own words and never trusted."""
    remote = request.META.get("REMOTE_ADDR", "")
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
    proxies = settings.TRUSTED_PROXY_COUNT
    if proxies == 0 or not forwarded:
        return remote
    hops = [hop.strip() for hop in forwarded.split(",")]
    return hops[-min(proxies, len(hops))] or remote


def login_locked_out(
    request: HttpRequest, original_response: HttpResponse | None = None, credentials: dict[str, Any] | None = None
) -> HttpResponse:
    """What django-axes shows a locked-out username and address instead of signing them in: the sign-in page
    saying why and for how long, with status 429 (the admin's sign-in ends here too)."""
    return render(
        request,
        "registration/login.html",
        {
            "form": SignInForm(request),
            "next": request.POST.get("next", "") if request.method == "POST" else "",
            "locked_out": True,
            "lockout_minutes": settings.LOGIN_LOCKOUT_MINUTES,
        },
        status=settings.AXES_HTTP_RESPONSE_CODE,
    )


def _schema_permissions() -> list[BasePermission]:
    return [AllowAny()] if settings.API_SCHEMA_PUBLIC else [IsAuthenticated()]


class _JsonErrors(APIView):
    """Errors (401, 403, 429) as JSON like the rest of the API, not in the page's own format (the schema's
    default renderer is YAML, the docs' an HTML template)."""

    def handle_exception(self, exc: Exception) -> Response:
        response = super().handle_exception(exc)
        self.request.accepted_renderer = JSONRenderer()
        self.request.accepted_media_type = JSONRenderer.media_type
        return response


class ApiSchemaView(_JsonErrors, SpectacularAPIView):
    """The OpenAPI schema; without ``API_SCHEMA_PUBLIC`` an anonymous caller gets the API's 401/403 JSON."""

    def get_permissions(self) -> list[BasePermission]:
        return _schema_permissions()


class ApiDocsView(_JsonErrors, SpectacularSwaggerSplitView):
    """Swagger UI with its start-up script served as a file of its own (the split view), so the page runs
    under a script-src without 'unsafe-inline'. Without ``API_SCHEMA_PUBLIC`` an anonymous visitor is sent to
    sign in, as on every other page, and comes back here after."""

    # The page decides in get() (a redirect to sign in, not DRF's 401/403), so DRF lets every caller reach it.
    permission_classes = [AllowAny]

    @extend_schema(exclude=True)  # the page is not an endpoint of the API it documents
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response | HttpResponse:
        if not settings.API_SCHEMA_PUBLIC and not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        return super().get(request, *args, **kwargs)
