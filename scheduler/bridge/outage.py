"""Outages of the loop's services (Redis, the database, the cluster) and how the loop rides them out.

An error of :data:`OUTAGE_ERRORS` is an *outage* of the service :func:`outage_of` names: Redis (connection
refused, reset or timed out), the database (``OperationalError`` / ``InterfaceError``: the server went away or
dropped the connection) or the cluster (any :class:`~scheduler.errors.GatewayError` but a conflict, which
retrying cannot cure). ``manage.py scheduler run`` never exits on one: it waits a capped exponential
:class:`Backoff` (1 s, 2 s, 4 s … 30 s) and tries again. A Celery task wrapped in :func:`outage_guarded`
never raises one: it returns ``{"outage": ...}`` and beat runs it again within its period (its own backoff).
:class:`Outages` logs one line when an outage starts and one when the service answers again, nothing in
between (a Celery worker logs once per worker process: no shared state survives the services going away)::

    redis unreachable at redis://127.0.0.1:6379/0: Error 111 connecting to 127.0.0.1:6379. Connection
    refused.; retrying with backoff
    redis back after 12.3 s (4 failed attempts)

A dropped database connection is closed (:func:`connections_reset`) so that the next try connects afresh.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, ParamSpec
from urllib.parse import urlsplit, urlunsplit

import redis
from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError, connection, connections

from scheduler.errors import GatewayConflict, GatewayError

log = logging.getLogger(__name__)

REDIS = "redis"
DATABASE = "database"
CLUSTER = "cluster"
SERVICES = (REDIS, DATABASE, CLUSTER)

_REDIS_ERRORS = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)
_DATABASE_ERRORS = (OperationalError, InterfaceError)
# What a caller catches; outage_of() then says which service it is, or None (a GatewayConflict: re-raise it).
OUTAGE_ERRORS: tuple[type[Exception], ...] = (*_REDIS_ERRORS, *_DATABASE_ERRORS, GatewayError)


@dataclass(frozen=True)
class Backoff:
    """Capped exponential backoff: ``first_s`` after the first failed try in a row, doubling up to ``cap_s``."""

    first_s: float = 1.0
    cap_s: float = 30.0

    def delay_s(self, failures: int) -> float:
        """Seconds to wait after the ``failures``-th failed try in a row (0 before any failure)."""
        if failures < 1:
            return 0.0
        # The exponent is clamped so that a week-long outage cannot overflow the float.
        return min(self.first_s * 2.0 ** min(failures - 1, 64), self.cap_s)


@dataclass(frozen=True)
class Outage:
    """Which service an error belongs to (a key of :data:`SERVICES`), its name in logs and where it lives."""

    service: str
    name: str
    where: str | None

    def describe(self, error: BaseException | str) -> str:
        """``redis unreachable at redis://host:6379/0: <error>``, on one line (libpq's messages span several)."""
        where = f" at {self.where}" if self.where else ""
        return f"{self.name} unreachable{where}: {' '.join(str(error).split())}"


def service_of(exc: BaseException) -> str | None:
    """The service ``exc`` is an outage of, or None when it is not an outage (pure: the type decides)."""
    if isinstance(exc, _REDIS_ERRORS):
        return REDIS
    if isinstance(exc, _DATABASE_ERRORS):
        return DATABASE
    if isinstance(exc, GatewayError) and not isinstance(exc, GatewayConflict):
        return CLUSTER
    return None


def outage_of(exc: BaseException) -> Outage | None:
    """``exc`` as an :class:`Outage` named for the configured service, or None (see :func:`service_of`)."""
    service = service_of(exc)
    if service == REDIS:
        return Outage(REDIS, "redis", _redacted(settings.REDIS_URL))
    if service == DATABASE:
        db = connection.settings_dict
        where = f"{db.get('HOST') or 'localhost'}:{db.get('PORT') or 5432}/{db.get('NAME')}"
        return Outage(DATABASE, connection.vendor, where if connection.vendor != "sqlite" else str(db.get("NAME")))
    if service == CLUSTER:
        # The gateway's message names the operation and the object; where the API server is, it knows.
        return Outage(CLUSTER, str(settings.CLUSTER_BACKEND), None)
    return None


def _redacted(url: str) -> str:
    """``url`` without its password: log lines end up in places credentials must not."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


@dataclass
class _Open:
    outage: Outage
    since: float
    failures: int = 0


class Outages:
    """The outages open now, by service; logs one line at each start and one at each end (module doc).

    ``clock`` is monotonic seconds (an argument, so that tests need not wait).
    """

    def __init__(
        self,
        *,
        backoff: Backoff | None = None,
        clock: Callable[[], float] = time.monotonic,
        logger: logging.Logger = log,
    ) -> None:
        self.backoff = backoff or Backoff()
        self.clock = clock
        self.log = logger
        self._open: dict[str, _Open] = {}
        self._guard = threading.Lock()  # a worker's thread pool shares one tracker: one line, not one per thread

    @property
    def open(self) -> tuple[str, ...]:
        """The services with an outage open now."""
        return tuple(self._open)

    def failed(self, outage: Outage, error: BaseException | str) -> float:
        """Note a failed try; log the outage on its first; return the seconds to wait before the next try."""
        with self._guard:
            current = self._open.get(outage.service)
            if current is None:
                current = self._open[outage.service] = _Open(outage, self.clock())
                self.log.warning("%s; retrying with backoff", outage.describe(error))
            current.failures += 1
            return self.backoff.delay_s(current.failures)

    def succeeded(self, services: Iterable[str] = SERVICES) -> None:
        """A try that used ``services`` went through: their outages are over (one line each)."""
        for service in services:
            with self._guard:
                current = self._open.pop(service, None)
            if current is not None:
                self.log.warning(
                    "%s back after %.1f s (%d failed attempt%s)",
                    current.outage.name,
                    self.clock() - current.since,
                    current.failures,
                    "" if current.failures == 1 else "s",
                )


def connections_refresh() -> None:
    """Start a unit of work as Django starts a request (``close_old_connections``): close connections past
    ``CONN_MAX_AGE`` or broken by an error, and re-arm ``CONN_HEALTH_CHECKS`` for the next query. A connection
    inside an atomic block is left alone: closing it would end a transaction someone else holds open (a test
    that runs the loop inside its own)."""
    for conn in connections.all(initialized_only=True):
        if not conn.in_atomic_block:
            conn.close_if_unusable_or_obsolete()


def connections_reset() -> None:
    """Close every database connection of this thread, broken ones included, so the next query reconnects.

    Closing a connection the server already dropped may itself fail; that changes nothing, so it is ignored.
    """
    for conn in connections.all(initialized_only=True):
        with contextlib.suppress(DatabaseError):  # close() forgets the connection even when this raises
            conn.close()


def outage_note(outages: Outages, exc: BaseException) -> tuple[Outage, float] | None:
    """Record ``exc`` in ``outages`` if it is an outage (closing the database connections when it is theirs);
    return it with the seconds to wait before the next try, or None when it is none (the caller re-raises)."""
    outage = outage_of(exc)
    if outage is None:
        return None
    if outage.service == DATABASE:
        connections_reset()
    return outage, outages.failed(outage, exc)


# One tracker per worker process for every task: a Redis outage that two tasks run into is one outage.
TASK_OUTAGES = Outages()

P = ParamSpec("P")


def outage_guarded(*, uses: Iterable[str]) -> Callable[[Callable[P, dict[str, Any]]], Callable[P, dict[str, Any]]]:
    """Decorate a Celery task's body (under ``@shared_task``): an outage is logged once (module doc) and the
    task returns ``{"outage": name, "error": message}`` instead of raising; beat runs it again in its period.

    ``uses`` are the services the body needs: only its success ends their outages (a task that never talks
    to Redis must not declare a Redis outage over). Retrying inside the task would only pile a second run
    onto beat's next one.
    """
    used = tuple(uses)

    def decorate(body: Callable[P, dict[str, Any]]) -> Callable[P, dict[str, Any]]:
        @functools.wraps(body)
        def run(*args: P.args, **kwargs: P.kwargs) -> dict[str, Any]:
            outages = TASK_OUTAGES  # read at call time, so that a test can put in its own
            try:
                result = body(*args, **kwargs)
            except OUTAGE_ERRORS as exc:
                noted = outage_note(outages, exc)
                if noted is None:
                    raise
                return {"outage": noted[0].name, "error": " ".join(str(exc).split())}
            outages.succeeded(used)
            return result

        run.outage_uses = used  # type: ignore[attr-defined]  # lets a test find every periodic task guarded
        return run

    return decorate
