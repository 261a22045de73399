"""The embedded SQLite's settings, the 503 "busy, try again" contract, and a token's last use that never fails a
read. The whole of it under real load: tests/portal/test_sqlite_under_load.py."""

from __future__ import annotations

import logging
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.db import IntegrityError, InterfaceError, OperationalError, ProgrammingError, connection
from django.http import HttpRequest, HttpResponse
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import path
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api_tokens import LAST_USED_RESOLUTION, api_token_last_used, api_token_touch
from portal.busy import RETRY_AFTER_S, database_busy
from portal.models import ApiTokenUse

ROOT = Path(__file__).resolve().parents[2]
_RAISED: dict[str, BaseException] = {}


def _sqlite_error(tmp_path: Path, *, locked: bool) -> OperationalError:
    """A real SQLite error wrapped as Django wraps it (django.db.utils, DatabaseErrorWrapper.__exit__): a
    lock held by another connection past a zero timeout, or a query of a table that does not exist."""
    holder = sqlite3.connect(tmp_path / "other.sqlite3", isolation_level=None)
    holder.execute("CREATE TABLE IF NOT EXISTS t (x)")
    if locked:
        holder.execute("BEGIN EXCLUSIVE")
    waiter = sqlite3.connect(tmp_path / "other.sqlite3", timeout=0)
    try:
        waiter.execute("SELECT * FROM t" if locked else "SELECT * FROM no_such_table")
    except sqlite3.OperationalError as exc:
        wrapped = OperationalError(*exc.args)
        wrapped.__cause__ = exc
        return wrapped
    finally:
        waiter.close()
        holder.close()
    raise AssertionError("SQLite raised nothing")


def _raising(request: HttpRequest) -> HttpResponse:
    raise _RAISED["error"]


class _RaisingApi(APIView):
    authentication_classes: list[type] = []
    permission_classes: list[type] = []

    def get(self, request: Request) -> Response:
        raise _RAISED["error"]


urlpatterns = [
    path("busy/", _raising),
    path("api/busy/", _raising),
    path("api/drf-busy/", _RaisingApi.as_view()),
]


@pytest.fixture
def raising(settings) -> Iterator[dict[str, BaseException]]:
    settings.ROOT_URLCONF = __name__
    settings.DEBUG = True  # as make demo: without this module, a 500 here is Django's debug page
    yield _RAISED
    _RAISED.clear()


# --- settings ---------------------------------------------------------------------------------------------------


def test_a_sqlite_file_runs_in_wal_with_a_busy_timeout_and_immediate_transactions(tmp_path: Path) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"},
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
    }
    probe = (
        "from django.db import connection; c = connection.cursor(); "
        "print(c.execute('PRAGMA journal_mode').fetchone()[0], c.execute('PRAGMA busy_timeout').fetchone()[0], "
        "c.execute('PRAGMA synchronous').fetchone()[0], connection.transaction_mode)"
    )
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    # synchronous 1 is NORMAL (https://sqlite.org/pragma.html#pragma_synchronous).
    timeout_ms = str(int(django_settings.SQLITE_TIMEOUT_S * 1000))
    assert done.stdout.strip().splitlines()[-1].split() == ["wal", timeout_ms, "1", "IMMEDIATE"]


@pytest.mark.django_db
def test_the_in_memory_test_database_takes_the_same_options() -> None:
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's options: run without DATABASE_URL")
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA journal_mode")
        assert cursor.fetchone()[0] == "memory"  # WAL does not apply to memory; the PRAGMA leaves it be
    assert connection.transaction_mode == "IMMEDIATE"


# --- what counts as busy ---------------------------------------------------------------------------------------


def test_busy_is_a_lock_or_a_lost_server_never_a_mistake(tmp_path: Path) -> None:
    assert database_busy(_sqlite_error(tmp_path, locked=True))
    assert not database_busy(_sqlite_error(tmp_path, locked=False))  # "no such table": SQLITE_ERROR
    assert database_busy(OperationalError("server closed the connection unexpectedly"))  # psycopg's
    assert database_busy(InterfaceError("connection already closed"))
    assert not database_busy(ProgrammingError('relation "nope" does not exist'))
    assert not database_busy(IntegrityError("UNIQUE constraint failed"))
    assert not database_busy(ValueError("database is locked"))


# --- the 503 -----------------------------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("url", ["/api/busy/", "/api/drf-busy/"])
def test_a_busy_database_answers_503_json_with_retry_after_under_the_api(raising, tmp_path, url, caplog) -> None:
    raising["error"] = _sqlite_error(tmp_path, locked=True)
    with caplog.at_level(logging.WARNING, logger="portal.busy"):
        response = Client().get(url)
    assert response.status_code == 503
    assert response["Content-Type"] == "application/json"
    assert response["Retry-After"] == str(RETRY_AFTER_S)
    assert "busy" in response.json()["detail"] and "try again" in response.json()["detail"]
    assert [r.message for r in caplog.records if r.name == "portal.busy"] == [
        f"database busy: GET {url} answered 503: database is locked"
    ]


@pytest.mark.django_db
def test_a_busy_database_answers_a_small_503_page_elsewhere_even_with_debug_on(raising, tmp_path) -> None:
    raising["error"] = OperationalError("server closed the connection unexpectedly")
    response = Client().get("/busy/")
    assert response.status_code == 503 and response["Retry-After"] == str(RETRY_AFTER_S)
    page = response.content.decode()
    assert "Busy, try again" in page and "Traceback" not in page and "server closed" not in page


@pytest.mark.django_db
def test_a_programming_error_is_a_500_as_before(raising, tmp_path) -> None:
    raising["error"] = ProgrammingError("syntax error at or near SELEC")
    with pytest.raises(ProgrammingError):
        Client().get("/api/busy/")  # the test client re-raises what Django answered with a 500
    raising["error"] = _sqlite_error(tmp_path, locked=False)
    response = Client(raise_request_exception=False).get("/busy/")
    assert response.status_code == 500 and "Retry-After" not in response


@contextmanager
def _exclusive_lock() -> Iterator[sqlite3.Connection]:
    """A second connection to the test database holding SQLite's exclusive lock: every other connection's
    statement fails with "database … is locked" (for the in-memory test database at once: shared-cache locks
    do not wait, https://sqlite.org/sharedcache.html)."""
    name = connection.settings_dict["NAME"]
    other = sqlite3.connect(name, uri=name.startswith("file:"), isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    other.execute("DELETE FROM django_session WHERE 0")  # shared cache: a statement takes the lock
    try:
        yield other
    finally:
        other.execute("ROLLBACK")
        other.close()


@pytest.mark.django_db(transaction=True)
def test_a_locked_database_answers_503_to_a_token_read_and_to_a_page(member, lead) -> None:
    if connection.vendor != "sqlite":
        pytest.skip("holds SQLite's own lock: run without DATABASE_URL")
    token = Token.objects.create(user=member)
    page_client = Client(raise_request_exception=False)
    page_client.force_login(lead)
    with _exclusive_lock():
        api = Client().get("/api/v1/queue/", HTTP_AUTHORIZATION=f"Token {token.key}")
        page = page_client.get("/queue/")
    assert api.status_code == 503 and api.json()["detail"].startswith("The database is busy")
    assert api["Retry-After"] == str(RETRY_AFTER_S)
    # The session is read by a middleware, before any view: answered the same.
    assert page.status_code == 503 and "Busy, try again" in page.content.decode()
    # Once the lock is gone the same requests succeed.
    assert Client().get("/api/v1/queue/", HTTP_AUTHORIZATION=f"Token {token.key}").status_code == 200


# --- a token's last use ------------------------------------------------------------------------------------------


def _last_use_writes(queries: CaptureQueriesContext) -> list[str]:
    return [
        q["sql"]
        for q in queries.captured_queries
        if "portal_apitokenuse" in q["sql"] and q["sql"].lstrip().upper().startswith(("INSERT", "UPDATE"))
    ]


@pytest.mark.django_db
def test_a_token_read_writes_its_last_use_at_most_once_a_minute(member) -> None:
    token = Token.objects.create(user=member)
    client = Client()
    with CaptureQueriesContext(connection) as queries:
        for _ in range(5):
            assert client.get("/api/v1/queue/", HTTP_AUTHORIZATION=f"Token {token.key}").status_code == 200
    assert len(_last_use_writes(queries)) == 1
    first = api_token_last_used(token)
    assert first is not None
    assert api_token_touch(token=token, now=first + LAST_USED_RESOLUTION - timedelta(seconds=1)) is False
    assert api_token_touch(token=token, now=first + LAST_USED_RESOLUTION) is True
    assert api_token_last_used(token) == first + LAST_USED_RESOLUTION


@pytest.mark.django_db
@pytest.mark.parametrize("recorded", [False, True], ids=["first use", "a use an hour ago"])
def test_a_failed_last_use_write_does_not_fail_the_read(member, recorded, caplog) -> None:
    token = Token.objects.create(user=member)
    if recorded:
        ApiTokenUse.objects.create(token=token, last_used_at=timezone.now() - timedelta(hours=1))

    def locked(execute: Any, sql: str, params: Any, many: bool, context: dict[str, Any]) -> Any:
        # Fails the last-use write as SQLite does once its busy timeout has passed; everything else runs.
        if "portal_apitokenuse" in sql and sql.lstrip().upper().startswith(("INSERT", "UPDATE")):
            raise OperationalError("database is locked")
        return execute(sql, params, many, context)

    with caplog.at_level(logging.WARNING, logger="portal.api_tokens"), connection.execute_wrapper(locked):
        response = Client().get("/api/v1/queue/", HTTP_AUTHORIZATION=f"Token {token.key}")
    assert response.status_code == 200
    assert any("last use not recorded (database is locked)" in r.message for r in caplog.records)
