"""The sign-in's two legs (to the provider, back from it) and the page of a user whose groups give no team.

Both legs are mozilla-django-oidc's views with the endpoints from ``portal.sso.discovery``; the callback is
rewritten around the library's (``OIDCAuthenticationCallbackView.get``, same state and nonce handling) so that
every refusal is a page that says why instead of a redirect to the start, and the user is signed in with
Django's ModelBackend: the session then holds a backend the password chain also knows, and django-axes never
sees an SSO sign-in.
"""

from __future__ import annotations

import logging

import requests
from django.conf import settings
from django.contrib import auth
from django.contrib.auth.decorators import login_required
from django.core.exceptions import SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from portal.models import SsoIdentity
from portal.sso.backend import SsoBackend
from portal.sso.discovery import provider_endpoints
from portal.sso.errors import SsoRefused, SsoUnavailable
from teams.http import SignedInRequest

logger = logging.getLogger(__name__)

SESSION_BACKEND = "django.contrib.auth.backends.ModelBackend"


def _refused(request: HttpRequest, message: str, *, status: int) -> HttpResponse:
    return render(
        request,
        "portal/sso_refused.html",
        {"message": message, "provider_name": settings.SSO_PROVIDER_NAME},
        status=status,
    )


class SsoStartView(OIDCAuthenticationRequestView):
    """``/oidc/authenticate/``: a new state, nonce and PKCE verifier in the session, then off to the provider."""

    def __init__(self, **kwargs: object) -> None:
        if not settings.SSO_ENABLED:
            raise Http404("Single sign-on is not configured.")
        super().__init__(**kwargs)

    def get(self, request: HttpRequest) -> HttpResponseBase:
        try:
            self.OIDC_OP_AUTH_ENDPOINT = provider_endpoints().authorization
        except SsoUnavailable as exc:
            logger.warning("sso: %s", exc)
            return _refused(request, "The identity provider cannot be reached; try again shortly.", status=503)
        response: HttpResponseBase = super().get(request)
        return response


class SsoCallbackView(OIDCAuthenticationCallbackView):
    """``/oidc/callback/``: the provider sends the browser back with a code and the state it was given."""

    def get(self, request: HttpRequest) -> HttpResponseBase:
        if not settings.SSO_ENABLED:
            raise Http404("Single sign-on is not configured.")
        states: dict[str, dict[str, str]] = request.session.get("oidc_states", {})
        state = request.GET.get("state", "")
        # Used once, whatever happens next: a replayed callback finds no state (the library does the same).
        entry = states.pop(state, None) if state else None
        request.session["oidc_states"] = states
        if request.GET.get("error"):
            shown = request.GET.get("error_description") or request.GET["error"]
            return _refused(request, f"The identity provider did not sign you in: {shown}", status=403)
        if entry is None or not request.GET.get("code"):
            return _refused(
                request, "This sign-in was not started here, or was finished already; sign in again.", status=400
            )
        try:
            backend = SsoBackend()
            user = backend.authenticate(request, nonce=entry["nonce"], code_verifier=entry.get("code_verifier"))
        except SsoRefused as exc:
            return _refused(request, str(exc), status=403)
        except (SsoUnavailable, requests.RequestException) as exc:
            logger.warning("sso: the provider failed the sign-in: %s", exc)
            return _refused(request, "The identity provider cannot be reached; try again shortly.", status=503)
        except SuspiciousOperation as exc:  # bad signature, nonce, issuer or audience
            logger.warning("sso: refused a token: %s", exc)
            return _refused(request, "The identity provider's answer did not check out; sign in again.", status=400)
        if user is None or not user.is_active or backend.access is None:
            return _refused(request, "Single sign-on did not sign you in; ask a platform admin.", status=403)
        next_url = self.success_url  # read before the login cycles the session
        auth.login(request, user, backend=SESSION_BACKEND)
        if not backend.access.has_access:
            return redirect("sso_no_team")
        return redirect(next_url)


@login_required
@require_GET
def no_team(request: SignedInRequest) -> HttpResponse:
    """Signed in through the provider, but none of the user's groups gives a team or a role here."""
    identity = SsoIdentity.objects.filter(user=request.user).first()
    return render(
        request,
        "portal/sso_no_team.html",
        {"groups": identity.groups if identity else [], "provider_name": settings.SSO_PROVIDER_NAME},
    )
