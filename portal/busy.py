"""A database that stays busy answers 503 "busy, try again", never a traceback.

On the embedded default (SQLite) the web, the loop's worker and beat write one file; a statement that waited the
busy timeout (``SQLITE_TIMEOUT_S`` in ``portal/settings.py``) for another process's write lock fails with
"database is locked". On PostgreSQL a server that went away fails the same way (``OperationalError`` /
``InterfaceError``). Neither is the request's fault and both pass: the answer is 503 with ``Retry-After``
(RFC 9110 §15.6.4), ``{"detail": …}`` under ``/api/`` and a small page elsewhere, even with DEBUG on, and one
warning line in the log instead of a traceback.

Anything else is left alone and stays a 500 as before: an ``IntegrityError`` or ``ProgrammingError``, and on
SQLite an ``OperationalError`` that is a mistake rather than contention ("no such table", a syntax error:
SQLite's primary result code ``SQLITE_ERROR``, https://sqlite.org/rescode.html).

:class:`DatabaseBusyMiddleware` sees what views raise (``process_exception``), DRF's included: DRF's exception
handler (``jobs.api.errors``, then DRF's own) answers only API exceptions and re-raises the rest
(``rest_framework.views``, ``APIView.handle_exception``), so a busy database in token authentication or an
API view reaches it too. What a middleware further in raises never reaches ``process_exception`` (Django turns
it into a response where it is raised, ``django.core.handlers.exception``): :func:`note_busy` listens to
``got_request_exception`` for those, and the middleware, placed outside them, swaps that 500 for the 503.
"""

from __future__ import annotations

import logging
import sqlite3
import sys
from collections.abc import Callable
from typing import Any

from django.core.signals import got_request_exception
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string

from portal.request_guard import API_PREFIX

log = logging.getLogger(__name__)

RETRY_AFTER_S = 5  # a cycle's write holds SQLite's lock well under a second; a restarted server is back in seconds
DETAIL = "The database is busy; try again in a few seconds."

# SQLite's primary result codes that mean "not now" rather than "wrong" (https://sqlite.org/rescode.html):
# another connection holds the lock, the file cannot be opened, the disk failed or filled.
_SQLITE_BUSY_CODES = frozenset(
    {sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL}
)
_NOTED = "_microcosm_database_busy"


def database_busy(exc: BaseException) -> bool:
    """Whether ``exc`` says the database is busy or unreachable (and will likely answer again soon)."""
    if not isinstance(exc, OperationalError | InterfaceError):
        return False
    cause = exc.__cause__
    if isinstance(cause, sqlite3.Error):
        # Python 3.11+ carries SQLite's extended result code; its low byte is the primary one.
        code = getattr(cause, "sqlite_errorcode", None)
        if code is None:
            return "locked" in str(cause)
        return code & 0xFF in _SQLITE_BUSY_CODES
    return True


def busy_response(request: HttpRequest, exc: BaseException) -> HttpResponse:
    """The 503 for ``request``: JSON under ``/api/``, a page elsewhere; logged as one warning line."""
    log.warning("database busy: %s %s answered 503: %s", request.method, request.path, exc)
    response: HttpResponse
    if request.path.startswith(API_PREFIX):
        response = JsonResponse({"detail": DETAIL}, status=503)
    else:
        # No request passed: the context processors query the database, which is what is busy.
        page = render_to_string("503.html", {"detail": DETAIL, "retry_after_s": RETRY_AFTER_S})
        response = HttpResponse(page, status=503)
    response["Retry-After"] = str(RETRY_AFTER_S)
    return response


def note_busy(sender: Any, request: HttpRequest | None = None, **kwargs: Any) -> None:
    """``got_request_exception`` receiver: mark ``request`` when the exception Django is handling is a busy
    database, so that :class:`DatabaseBusyMiddleware` can answer 503 instead of the 500 made of it."""
    exc = sys.exc_info()[1]
    if request is not None and exc is not None and database_busy(exc):
        setattr(request, _NOTED, exc)


got_request_exception.connect(note_busy, dispatch_uid="portal.busy.note_busy")


class DatabaseBusyMiddleware:
    """503 with ``Retry-After`` for a busy or unreachable database (module doc)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        noted = getattr(request, _NOTED, None)
        if noted is not None and response.status_code == 500:
            return busy_response(request, noted)
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not database_busy(exception):
            return None  # Django's own handling: a 500 (the debug page with DEBUG on), as before
        return busy_response(request, exception)
