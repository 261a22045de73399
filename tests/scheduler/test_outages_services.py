"""The loop outlives its services, for real: a private redis-server stopped and started again (empty) under a
running ``scheduler run``, its PostgreSQL connection terminated by the server, and the Celery tasks' bodies
meeting the same. transaction=True: rows are committed, so the loop's own process sees them.

The ``scheduler run`` tests start the command in a process of its own, which shares the test database only
on PostgreSQL; on SQLite they are skipped with the reason. Every wait is bounded.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import IO, Any

import psycopg
import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import connection

from billing.tasks import ledger_close_task
from jobs.models import Job
from jobs.services import job_submit
from scheduler.bridge import outage
from scheduler.bridge.outage import Outages
from scheduler.gateways import gateway_override
from scheduler.loop.locks import RESET_GAP
from scheduler.models import SchedulerFence
from scheduler.tasks import cycle_run_task
from tests.scheduler.loop_helpers import Clock, fleet, fleet_seed, team_seed
from tests.scheduler.redis_helpers import RedisServer, redis_server  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db(transaction=True)

WAIT_S = 20.0  # generous: the suite shares two cores; the waits end as soon as the condition holds


def _needs_postgresql() -> None:
    if connection.vendor != "postgresql":
        pytest.skip(
            "the loop runs in a process of its own and must share the test database: run with "
            "DATABASE_URL=postgres://... (SQLite's test database lives in this process's memory)"
        )


def _database_url() -> str:
    db = connection.settings_dict
    password = f":{db['PASSWORD']}" if db["PASSWORD"] else ""
    return f"postgres://{db['USER']}{password}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


class LoopProcess:
    """``scheduler run --json`` in a process of its own; its stdout (one JSON object per cycle) and stderr (the
    log) are collected line by line as they come."""

    def __init__(self, command: list[str], *, redis_url: str, app_name: str) -> None:
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "DATABASE_URL": _database_url(),
            "REDIS_URL": redis_url,
            "SCHEDULER_LOCK": "redis",
            "SIMULATED_SPOT_INTERRUPTIONS_PER_HOUR": "0",
            "LOG_LEVEL": "WARNING",  # the outage lines, not every cycle's summary
            "LOG_FORMAT": "json",  # the production shape; ``log`` reads each record's message
            "PGAPPNAME": app_name,  # libpq names the loop's connections, so the test kills only those
            "PYTHONUNBUFFERED": "1",
        }
        self.process = subprocess.Popen(
            command, cwd=settings.BASE_DIR, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.out: list[str] = []
        self.err: list[str] = []
        self._readers = [
            threading.Thread(target=self._read, args=(stream, lines), daemon=True)
            for stream, lines in ((self.process.stdout, self.out), (self.process.stderr, self.err))
        ]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _read(stream: IO[str] | None, lines: list[str]) -> None:
        assert stream is not None
        for line in stream:
            lines.append(line.rstrip("\n"))

    def alive(self) -> bool:
        return self.process.poll() is None

    def reports(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in list(self.out) if line.startswith("{")]

    def log(self, needle: str) -> list[str]:
        """The messages of the log records containing ``needle`` (a line that is not a record, such as a
        traceback's, counts as its own text)."""
        messages = [json.loads(line)["message"] if line.startswith("{") else line for line in list(self.err)]
        return [message for message in messages if needle in message]

    def wait_for(self, what: str, condition: Callable[[], object], timeout_s: float = WAIT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            if not self.alive():
                pytest.fail(f"the loop exited ({self.process.returncode}) before {what}; stderr: {self.err[-20:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"no {what} within {timeout_s:.0f} s; stderr: {self.err[-20:]}")
            time.sleep(0.05)

    def stop(self) -> int:
        """SIGTERM (the command stops after its current step); killed if it does not within 15 s."""
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        for reader in self._readers:
            reader.join(timeout=5)
        return code


@pytest.fixture
def loop_process(redis_server: RedisServer) -> Iterator[Callable[..., LoopProcess]]:  # noqa: F811
    """Start ``scheduler run --json --interval-s 0.2`` (through the launcher when ``health_checks`` is given);
    always stopped at teardown."""
    started: list[LoopProcess] = []

    def start(*, health_checks: str | None = None, app_name: str = "") -> LoopProcess:
        command = [sys.executable, "manage.py"]
        if health_checks is not None:
            command = [sys.executable, "-m", "tests.scheduler.loop_launcher", health_checks]
        command += ["scheduler", "run", "--json", "--interval-s", "0.2"]
        loop = LoopProcess(command, redis_url=redis_server.url, app_name=app_name or f"loop-{uuid.uuid4().hex[:8]}")
        started.append(loop)
        return loop

    yield start
    for loop in started:
        loop.stop()


def _fence() -> int:
    return SchedulerFence.objects.get(name="cycle").token


def _running(job: Job) -> bool:
    return Job.objects.get(pk=job.pk).state == "running"


def test_scheduler_run_rides_out_redis_going_away_and_coming_back_empty(loop_process, redis_server):  # noqa: F811
    _needs_postgresql()
    fleet_seed()
    team = team_seed()
    loop = loop_process()
    loop.wait_for("two cycles", lambda: len(loop.reports()) >= 2)
    before = _fence()
    redis_server.stop()
    loop.wait_for("outage line", lambda: loop.log("redis unreachable"))
    time.sleep(1.5)  # past the first backoff (1 s): a second try fails too, and says nothing
    assert loop.alive()
    job = job_submit(team=team, spec={"kind": "training", "gpus": 1, "duration_s": 600}, actor=None)
    redis_server.start()  # empty: the lock and the fencing counter are gone
    loop.wait_for("recovery line", lambda: loop.log("redis back after"))
    loop.wait_for("bind of the job submitted during the outage", lambda: _running(job))
    assert loop.alive()
    assert loop.stop() == 0
    assert [line.split(": ")[0] for line in loop.log("unreachable")] == [f"redis unreachable at {redis_server.url}"]
    assert loop.log("unreachable")[0].endswith("; retrying with backoff")
    (back,) = loop.log(" back after ")
    assert back.startswith("redis back after ") and "failed attempts" in back  # two tries or more, one line
    # Cycles after the restart recorded (none abandoned), with tokens above what the database had seen:
    assert [r for r in loop.reports() if "error" in r] == []
    assert _fence() > before + RESET_GAP


@pytest.mark.parametrize("health_checks", ["off", "on"], ids=["health-checks-off", "health-checks-on"])
def test_scheduler_run_rides_out_its_database_connection_being_terminated(loop_process, health_checks):
    """With CONN_HEALTH_CHECKS off the next query meets the dead connection: one outage line, the connection
    closed, the next try reconnects. With them on, the check before a step's first query usually replaces it
    silently (a step that was running when the connection died still meets it)."""
    _needs_postgresql()
    fleet_seed()
    team = team_seed()
    app_name = f"loop-{uuid.uuid4().hex[:8]}"
    loop = loop_process(health_checks=health_checks, app_name=app_name)
    loop.wait_for("two cycles", lambda: len(loop.reports()) >= 2)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name = %s",
            [app_name],
        )
        terminated = cursor.fetchall()
    assert terminated and all(ok for (ok,) in terminated)
    job = job_submit(team=team, spec={"kind": "training", "gpus": 1, "duration_s": 600}, actor=None)
    loop.wait_for("bind of the job submitted after the termination", lambda: _running(job))
    if health_checks == "off":
        loop.wait_for("recovery line", lambda: loop.log("postgresql back after"))
    assert loop.alive()
    assert loop.stop() == 0
    down, back = loop.log("postgresql unreachable"), loop.log("postgresql back after")
    db = connection.settings_dict
    if health_checks == "off":
        assert len(down) == 1 and len(back) == 1, loop.err
        assert down[0].startswith(f"postgresql unreachable at {db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/")
    else:
        assert len(down) == len(back) <= 1, loop.err
    assert [r for r in loop.reports() if "error" in r] == []


@pytest.fixture
def task_outages(monkeypatch) -> Outages:
    """The tasks' outage tracker, fresh for the test (it lives as long as a worker process otherwise)."""
    fresh = Outages()
    monkeypatch.setattr(outage, "TASK_OUTAGES", fresh)
    return fresh


def _outage_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "scheduler.bridge.outage"]


def test_the_cycle_task_returns_a_redis_outage_and_runs_once_redis_is_back(
    settings,
    redis_server,  # noqa: F811
    task_outages,
    caplog,
):
    caplog.set_level(logging.WARNING, logger="scheduler.bridge.outage")
    settings.REDIS_URL = redis_server.url
    settings.SCHEDULER = {**settings.SCHEDULER, "lock_backend": "redis", "lock_name": "microcosm:lock:cycle"}
    fleet_seed()
    team_seed()
    with gateway_override(fleet(Clock())):
        assert "decisions" in cycle_run_task.run()
        redis_server.stop()
        first, second = cycle_run_task.run(), cycle_run_task.run()
        redis_server.start()
        after = cycle_run_task.run()
    assert first["outage"] == second["outage"] == "redis" and "Connection refused" in first["error"]
    assert "decisions" in after, after
    lines = _outage_lines(caplog)
    assert len(lines) == 2, lines
    assert lines[0].startswith(f"redis unreachable at {redis_server.url}: ")
    assert lines[1].startswith("redis back after ") and "(2 failed attempts)" in lines[1]


def test_a_task_whose_database_connection_was_terminated_reconnects_on_its_next_run(task_outages, caplog):
    _needs_postgresql()
    caplog.set_level(logging.WARNING, logger="scheduler.bridge.outage")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (pid,) = cursor.fetchone()
    db = connection.settings_dict
    params = {"host": db["HOST"] or "127.0.0.1", "port": db["PORT"] or 5432, "user": db["USER"]}
    with psycopg.connect(dbname=db["NAME"], password=db["PASSWORD"] or None, autocommit=True, **params) as killer:
        assert killer.execute("SELECT pg_terminate_backend(%s)", [pid]).fetchone() == (True,)
    failed = ledger_close_task.run()
    assert failed["outage"] == "postgresql" and "\n" not in failed["error"]
    again = ledger_close_task.run()
    assert again["entries"] == 0 and "outage" not in again
    lines = _outage_lines(caplog)
    assert len(lines) == 2, lines
    assert lines[0].startswith("postgresql unreachable at ") and lines[1].startswith("postgresql back after ")


def test_schedule_once_says_redis_is_unreachable_in_one_line(settings, redis_server):  # noqa: F811
    settings.REDIS_URL = redis_server.url
    settings.SCHEDULER = {**settings.SCHEDULER, "lock_backend": "redis"}
    redis_server.stop()
    with pytest.raises(CommandError, match=rf"^the cycle did not run: redis unreachable at {redis_server.url}: "):
        call_command("schedule", "--once")
