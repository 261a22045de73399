"""Per-user throttles on the pages that cost the most to render: past ``PAGE_THROTTLE_RATES[scope]`` a signed-in
user gets 429 with ``Retry-After`` and a short message instead of the page.

The submit form's live previews cost seconds of CPU each with thousands of jobs pending and are sent as a
person types; the queue, the job list and the reports are dearer the more there is. With no limit, one member's
scripted loops held every web worker and slowed other teams' pages twenty-fold (the second audit). Counted per user
with ``portal.rate_counter`` in the shared cache (every worker and replica sees one budget); like the API
throttles, a cache that cannot be reached lets the request through.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from portal.rate_counter import rate_admit, rate_parse

log = logging.getLogger(__name__)

# The throttled pages by URL name (the portal composes the apps, which do not import it): the submit form's
# live previews share one budget, the other expensive pages another.
SCOPES = {
    "jobs:suggest": "preview",
    "jobs:checkpoint_interval": "preview",
    "jobs:submit": "page",
    "jobs:queue": "page",
    "jobs:list": "page",
    "jobs:dashboard": "page",
    "cluster": "page",
    "billing:reports": "page",
    "billing:team": "page",
    "billing:download": "page",
    "billing:advisor": "page",
}

MESSAGE = "Too many requests: you asked for this faster than the portal serves one person. Try again in {wait} s."


class PageThrottleMiddleware:
    """Counts each signed-in request to a page of ``SCOPES`` against its scope's rate, once its URL is resolved
    and before the view runs; anonymous requests go on to the view, which sends them to sign in."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_view(
        self, request: HttpRequest, view: Callable[..., Any], args: Any, kwargs: Any
    ) -> HttpResponse | None:
        match = request.resolver_match
        scope = SCOPES.get(match.view_name) if match is not None else None
        if scope is None:
            return None
        wait = _refused_for(request, scope)
        return None if wait is None else too_many(request, wait_s=wait)


def _refused_for(request: HttpRequest, scope: str) -> int | None:
    """Seconds to wait when this request is over the rate, None when it may go on."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return None
    limit, period_s = rate_parse(settings.PAGE_THROTTLE_RATES[scope])
    try:
        admission = rate_admit(
            cache=cache, key=f"page_throttle_{scope}_{user.pk}", limit=limit, period_s=period_s, now=time.time()
        )
    except Exception as error:  # the cache's client raises its own types (redis.ConnectionError, OSError, …)
        log.warning("page throttle %s cannot reach the cache (%s); the request is let through", scope, error)
        return None
    return None if admission.admitted else int(admission.wait_s)


def too_many(request: HttpRequest, *, wait_s: int) -> HttpResponse:
    """429 with ``Retry-After``: the message alone for htmx (swapped into the spot the page asked to fill:
    static/js/portal.js lets htmx swap a 429), the full page around it otherwise."""
    template = "portal/partials/too_many.html" if request.headers.get("HX-Request") else "portal/too_many.html"
    response = render(request, template, {"message": MESSAGE.format(wait=wait_s)}, status=429)
    response["Retry-After"] = str(wait_s)
    if request.headers.get("HX-Request"):
        # Into the element, not over it: a polling table (hx-swap="outerHTML") keeps polling and comes back.
        response["HX-Reswap"] = "innerHTML"
    return response
