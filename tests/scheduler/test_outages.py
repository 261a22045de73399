"""scheduler.bridge.outage without services: the backoff, which errors are outages, one log line per outage and one
per recovery, and the task guard (services for real: test_outages_services.py)."""

from __future__ import annotations

import logging

import pytest
import redis
from django.conf import settings as django_settings
from django.db import DatabaseError, IntegrityError, InterfaceError, OperationalError

from portal import demo_settings
from portal.celery import app
from scheduler.bridge import outage
from scheduler.bridge.outage import Backoff, Outage, Outages, outage_guarded, outage_of, service_of
from scheduler.errors import FencingError, GatewayConflict, GatewayError, GatewayNotConfigured, GatewayRetryable


@pytest.mark.parametrize(
    ("failures", "delay_s"),
    [(0, 0.0), (1, 1.0), (2, 2.0), (3, 4.0), (5, 16.0), (6, 30.0), (7, 30.0), (10_000, 30.0)],
)
def test_backoff_doubles_from_one_second_up_to_thirty(failures, delay_s):
    assert Backoff().delay_s(failures) == delay_s


def test_backoff_takes_its_own_first_delay_and_cap():
    assert [Backoff(first_s=0.5, cap_s=3.0).delay_s(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]


@pytest.mark.parametrize(
    ("error", "service"),
    [
        (redis.exceptions.ConnectionError("refused"), "redis"),
        (redis.exceptions.TimeoutError("timed out"), "redis"),
        (redis.exceptions.BusyLoadingError("loading the dataset"), "redis"),
        (OperationalError("server closed the connection unexpectedly"), "database"),
        (InterfaceError("connection already closed"), "database"),
        (GatewayRetryable("list nodes failed 3 times"), "cluster"),
        (GatewayError("list nodes was refused (403)"), "cluster"),
        (GatewayNotConfigured("CLUSTER_BACKEND=kubernetes needs ..."), "cluster"),
        (GatewayConflict("node n1 is not in the cluster"), None),  # retrying fails the same way
        (IntegrityError("duplicate key"), None),
        (DatabaseError("?"), None),
        (FencingError("token 1 is older than 3"), None),
        (redis.exceptions.ResponseError("WRONGTYPE"), None),
        (ValueError("a bug"), None),
    ],
)
def test_which_errors_are_outages(error, service):
    assert service_of(error) == service


def test_an_outage_is_named_for_the_configured_service_without_credentials(settings):
    settings.REDIS_URL = "redis://:s3cret@redis.internal:6380/2"
    named = outage_of(redis.exceptions.ConnectionError("refused"))
    assert named == Outage("redis", "redis", "redis://:***@redis.internal:6380/2")
    assert named.describe("refused") == "redis unreachable at redis://:***@redis.internal:6380/2: refused"
    settings.CLUSTER_BACKEND = "kubernetes"
    assert outage_of(GatewayRetryable("x")) == Outage("cluster", "kubernetes", None)
    assert outage_of(GatewayRetryable("x")).describe("x") == "kubernetes unreachable: x"
    assert outage_of(OperationalError("gone")).service == "database"
    assert outage_of(GatewayConflict("no")) is None


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


REDIS = Outage("redis", "redis", "redis://127.0.0.1:6379/0")
DATABASE = Outage("database", "postgresql", "127.0.0.1:5432/microcosm")


def _lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "scheduler.bridge.outage"]


def test_one_line_when_an_outage_starts_and_one_when_it_ends(caplog):
    caplog.set_level(logging.WARNING, logger="scheduler.bridge.outage")
    clock = _Clock()
    outages = Outages(clock=clock)
    delays = []
    for _ in range(4):
        delays.append(outages.failed(REDIS, "Connection refused"))
        clock.now += delays[-1]
    assert delays == [1.0, 2.0, 4.0, 8.0]
    assert outages.open == ("redis",)
    outages.succeeded()
    outages.succeeded()  # nothing open any more: nothing to say
    assert _lines(caplog) == [
        "redis unreachable at redis://127.0.0.1:6379/0: Connection refused; retrying with backoff",
        "redis back after 15.0 s (4 failed attempts)",
    ]
    assert outages.open == ()
    assert outages.failed(REDIS, "again") == 1.0  # a new outage starts its backoff afresh


def test_a_success_ends_only_the_outages_of_the_services_it_used(caplog):
    caplog.set_level(logging.WARNING, logger="scheduler.bridge.outage")
    outages = Outages(clock=_Clock())
    outages.failed(REDIS, "refused")
    outages.failed(DATABASE, "gone")
    outages.succeeded(["database"])  # a task that never talks to Redis cannot say Redis is back
    assert outages.open == ("redis",)
    assert _lines(caplog)[-1] == "postgresql back after 0.0 s (1 failed attempt)"


@pytest.fixture
def task_outages(monkeypatch) -> Outages:
    fresh = Outages()
    monkeypatch.setattr(outage, "TASK_OUTAGES", fresh)
    return fresh


def test_a_guarded_task_returns_the_outage_instead_of_raising(caplog, task_outages, settings):
    caplog.set_level(logging.WARNING, logger="scheduler.bridge.outage")
    settings.CLUSTER_BACKEND = "kubernetes"
    failing = [True, True, False]

    @outage_guarded(uses=("cluster",))
    def body() -> dict[str, object]:
        if failing.pop(0):
            raise GatewayRetryable("list nodes failed 3 times, last: connection refused")
        return {"nodes": 3}

    assert body() == {"outage": "kubernetes", "error": "list nodes failed 3 times, last: connection refused"}
    assert body()["outage"] == "kubernetes"
    assert body() == {"nodes": 3}
    lines = _lines(caplog)
    assert len(lines) == 2
    assert lines[0].startswith("kubernetes unreachable: list nodes failed 3 times")
    assert lines[1].startswith("kubernetes back after ")


def test_a_guarded_task_still_raises_what_is_no_outage(task_outages):
    @outage_guarded(uses=("cluster",))
    def body() -> dict[str, object]:
        raise GatewayConflict("node n1 is not in the cluster")

    with pytest.raises(GatewayConflict):
        body()
    assert task_outages.open == ()


@pytest.mark.parametrize(
    "schedule",
    [django_settings.CELERY_BEAT_SCHEDULE, demo_settings.CELERY_BEAT_SCHEDULE],
    ids=["settings", "demo_settings"],
)
def test_every_periodic_task_rides_out_outages(schedule):
    app.loader.import_default_modules()
    unguarded = sorted({e["task"] for e in schedule.values() if not hasattr(app.tasks[e["task"]].run, "outage_uses")})
    assert unguarded == []
