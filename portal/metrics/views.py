"""``GET /metrics``: the collector's text for Prometheus, closed unless an admin opens it (docs/metrics.md).

- ``METRICS_TOKEN`` set: a scrape must send it as a bearer token, else 401 with ``WWW-Authenticate``.
- ``METRICS_PUBLIC`` on (no token): open to whoever reaches the portal (team names, queue sizes, the fleet's
  shape), for a portal only the cluster can reach, or the demo.
- Neither: 404. No credential could open it, so not 401 (which asks for one) nor 403 (which refuses a caller
  the endpoint knows): the endpoint is off, as if absent, and the body says which setting turns it on.

Not behind sign-in (Prometheus has no session) nor CSRF (it only reads).
"""

from __future__ import annotations

import hmac

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from portal.metrics.collector import REGISTRY


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    token: str = settings.METRICS_TOKEN
    if not token and not settings.METRICS_PUBLIC:
        return HttpResponse(
            "/metrics is off: set METRICS_TOKEN (scrapes send it as a bearer token) or METRICS_PUBLIC=1.\n",
            status=404,
            content_type="text/plain",
        )
    if token and not _bearer_matches(request.headers.get("Authorization", ""), token):
        response = HttpResponse(
            "Send the metrics token: Authorization: Bearer <METRICS_TOKEN>.\n", status=401, content_type="text/plain"
        )
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)


def _bearer_matches(header: str, token: str) -> bool:
    scheme, _, given = header.partition(" ")
    # Compared in constant time: how long a wrong guess took must not say how much of it was right.
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())
