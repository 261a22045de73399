"""The answer to an exception no view or middleware answered (``handler500`` in ``portal/urls.py``).

Under ``/api/`` it is the API's error JSON, ``{"detail": "…"}`` (``jobs.api.errors``): an API client parses
every answer, and an HTML page in a JSON client's log says nothing. Elsewhere it is Django's own 500 page
(``templates/500.html``). With DEBUG on Django shows its debug page instead, everywhere. The other error
answers under ``/api/`` are JSON already: a 4xx Django answered with a page is converted by
``portal.request_guard``, and a database that is busy or unreachable answers 503 in ``portal.busy``.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults

from portal.request_guard import API_PREFIX

SERVER_ERROR = "Internal server error: it is logged; try again, and tell a platform admin if it lasts."


def server_error(request: HttpRequest) -> HttpResponse:
    """``handler500``: JSON under ``/api/``, Django's page elsewhere (module doc)."""
    if request.path.startswith(API_PREFIX):
        return JsonResponse({"detail": SERVER_ERROR}, status=500)
    return defaults.server_error(request)
