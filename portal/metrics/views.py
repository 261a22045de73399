"""``GET /metrics``: the collector's text for Prometheus, behind a bearer token when ``METRICS_TOKEN`` is set.

Not behind sign-in (Prometheus has no session) nor CSRF (it only reads). Without ``METRICS_TOKEN`` anyone who
can reach the portal can read team names, queue sizes and the fleet's shape: set it wherever the portal is
reachable from outside the cluster (docs/metrics.md).
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
