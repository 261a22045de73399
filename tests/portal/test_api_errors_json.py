"""Every error under /api/ is JSON: an exception no view answers is a 500 ``{"detail": …}``
(``portal.errors``, the root URLconf's ``handler500``), and PostgreSQL that drops the connection — psycopg's own
errors, wrapped by Django's own wrapper — is a 503 with Retry-After (``portal.busy``), in a plain view and in a
DRF one. Outside /api/ the pages stay pages. A 4xx is covered by tests/jobs/test_api_errors.py."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace

import psycopg
import pytest
from django.db import OperationalError
from django.db.utils import DatabaseErrorWrapper
from django.http import HttpRequest, HttpResponse
from django.test import Client
from django.urls import path
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.busy import RETRY_AFTER_S, database_busy
from portal.errors import SERVER_ERROR
from portal.urls import handler500  # noqa: F401 (the handler this URLconf must answer with, as the portal's)
from portal.urls import urlpatterns as portal_urlpatterns

pytestmark = pytest.mark.django_db

_RAISED: dict[str, BaseException] = {}


def _raising(request: HttpRequest) -> HttpResponse:
    raise _RAISED["error"]


class _RaisingApi(APIView):
    authentication_classes: list[type] = []
    permission_classes: list[type] = []

    def get(self, request: Request) -> Response:
        raise _RAISED["error"]


urlpatterns = [
    path("page-fails/", _raising),
    path("api/v1/fails/", _raising),
    path("api/v1/drf-fails/", _RaisingApi.as_view()),
    *portal_urlpatterns,
]


@pytest.fixture
def raising(settings) -> Iterator[dict[str, BaseException]]:
    settings.ROOT_URLCONF = __name__
    settings.DEBUG = False  # production: Django's debug page is for a developer's laptop only
    yield _RAISED
    _RAISED.clear()


def _wrapped(error: Exception) -> OperationalError:
    """``error`` (psycopg's) as Django raises it from a query: through ``DatabaseErrorWrapper`` (django.db.utils),
    given psycopg as the driver, whatever the test database is."""
    wrapper = DatabaseErrorWrapper(SimpleNamespace(Database=psycopg, errors_occurred=False))
    try:
        with wrapper:
            raise error
    except OperationalError as exc:
        return exc
    raise AssertionError("Django did not wrap the error")


def _refused() -> psycopg.OperationalError:
    """A real psycopg connection error: nothing listens on port 1."""
    try:
        psycopg.connect("host=127.0.0.1 port=1 user=nobody dbname=nothing connect_timeout=2")
    except psycopg.OperationalError as exc:
        return exc
    raise AssertionError("something listens on port 1")


def test_the_portal_names_its_500_handler() -> None:
    from portal import urls

    assert urls.handler500 == "portal.errors.server_error"


@pytest.mark.parametrize("url", ["/api/v1/fails/", "/api/v1/drf-fails/"])
def test_an_unhandled_error_under_the_api_is_a_500_json(raising, url) -> None:
    raising["error"] = RuntimeError("a bug")
    response = Client(raise_request_exception=False).get(url)
    assert response.status_code == 500
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"detail": SERVER_ERROR}


def test_an_unhandled_error_on_a_page_is_still_the_500_page(raising) -> None:
    raising["error"] = RuntimeError("a bug")
    response = Client(raise_request_exception=False).get("/page-fails/")
    assert response.status_code == 500
    assert response["Content-Type"].startswith("text/html")


def test_an_unknown_api_url_is_a_404_json(raising) -> None:
    response = Client().get("/api/v1/no-such-thing/")
    assert response.status_code == 404 and response.json() == {"detail": "Not found."}


@pytest.mark.parametrize(
    "error",
    [
        pytest.param(_refused, id="connection-refused"),
        # What pg_terminate_backend gives the terminated connection (SQLSTATE 57P01, class 57: OperationalError).
        pytest.param(
            lambda: psycopg.errors.AdminShutdown("terminating connection due to administrator command"),
            id="admin-shutdown",
        ),
        pytest.param(lambda: psycopg.OperationalError("server closed the connection unexpectedly"), id="closed"),
    ],
)
@pytest.mark.parametrize("url", ["/api/v1/fails/", "/api/v1/drf-fails/"])
def test_postgresql_unreachable_is_a_503_json_with_retry_after(raising, error, url) -> None:
    raised = _wrapped(error())
    assert isinstance(raised.__cause__, psycopg.OperationalError)
    assert database_busy(raised)
    raising["error"] = raised
    response = Client(raise_request_exception=False).get(url)
    assert response.status_code == 503
    assert response["Content-Type"] == "application/json"
    assert response["Retry-After"] == str(RETRY_AFTER_S)
    assert "try again" in response.json()["detail"]


def test_postgresql_unreachable_on_a_page_is_the_503_page(raising) -> None:
    raising["error"] = _wrapped(_refused())
    response = Client(raise_request_exception=False).get("/page-fails/")
    assert response.status_code == 503 and response["Retry-After"] == str(RETRY_AFTER_S)
    assert response["Content-Type"].startswith("text/html")
