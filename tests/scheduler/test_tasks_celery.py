"""The loop's tasks on REAL Celery workers with Redis as broker and result store (settings.REDIS_URL; skipped
with the reason when Redis is not reachable). transaction=True: rows are committed, so workers see them.

One worker runs in a thread of this process (it shares the test database on any backend); the single-flight
proof starts two worker processes, which share the test database on PostgreSQL (CI)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from celery.contrib.testing.worker import start_worker
from django.conf import settings
from django.db import connection

from jobs.models import Job
from jobs.services import job_submit
from portal.celery import app
from scheduler.gateways import gateway_override
from scheduler.models import SimulatedPod
from scheduler.tasks import cluster_sync_task, cycle_run_task, utilization_sample_task
from tests.scheduler.loop_helpers import SlowFleet, fleet_seed, team_seed
from tests.scheduler.redis_helpers import redis_client, redis_prefix  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def celery_app(settings, monkeypatch, redis_client, redis_prefix) -> Iterator[object]:  # noqa: F811
    """The project's Celery app on Redis, a queue and a lock of this test's own (cleaned by redis_prefix).

    Production ignores task results; the tests keep them (in Redis, forgotten after reading) to assert on.
    """
    for task in (cycle_run_task, cluster_sync_task, utilization_sample_task):
        monkeypatch.setattr(task, "ignore_result", False)
    settings.SCHEDULER = {**settings.SCHEDULER, "lock_backend": "redis", "lock_name": f"{redis_prefix}:lock"}
    saved = {key: app.conf[key] for key in ("broker_url", "result_backend", "task_ignore_result", "task_default_queue")}
    app.conf.update(
        broker_url=settings.REDIS_URL,
        result_backend=settings.REDIS_URL,
        task_ignore_result=False,
        task_default_queue=f"{redis_prefix}-queue",
        result_expires=60,
    )
    yield app
    app.conf.update(saved)


def _worker(celery_app, name: str):
    return start_worker(
        celery_app,
        pool="solo",
        concurrency=1,
        perform_ping_check=False,
        loglevel="WARNING",
        shutdown_timeout=20,
        hostname=f"{name}-{uuid.uuid4().hex[:6]}@test",
        queues=[celery_app.conf.task_default_queue],
        prefetch_multiplier=1,
    )


def _forget(*results) -> None:
    for result in results:
        result.forget()  # removes celery-task-meta-<id> from Redis


def test_a_real_worker_runs_the_cycle_and_places_a_job(celery_app):
    fleet_seed()
    team = team_seed()
    job = job_submit(team=team, spec={"kind": "training", "gpus": 2, "duration_s": 6000}, actor=None)
    with _worker(celery_app, "solo"):
        sync = cluster_sync_task.delay()
        result = cycle_run_task.delay()
        report = result.get(timeout=60)
        synced = sync.get(timeout=60)
        samples = utilization_sample_task.delay()
        stored = samples.get(timeout=60)
    _forget(sync, result, samples)
    assert {n["name"] for n in synced["nodes"]} == {"a100-res-1", "pcie-spot-1", "mig-od-1"}
    assert [b["job"] for b in report["decisions"]["binds"]] == [str(job.pk)]
    assert report["applied"] == [f"bind {job.pk}"] and report["fence_token"] >= 1
    job.refresh_from_db()
    assert job.state == "running" and SimulatedPod.objects.filter(job=job).exists()
    assert stored["samples"] == 3


def _worker_process(
    hostname: str, queue: str, lock_name: str, delay_s: float, lock_ttl_s: float | None = None
) -> subprocess.Popen[bytes]:
    """A real worker of the project in its own process (tests/scheduler/celery_worker_launcher.py) on the test
    database and Redis, its observations taking ``delay_s``, its lock's TTL ``lock_ttl_s`` when given."""
    db = connection.settings_dict
    url = (
        f"postgres://{db['USER']}:{db['PASSWORD'] or ''}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    )
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "REDIS_URL": settings.REDIS_URL,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
    }
    command = [sys.executable, "-m", "tests.scheduler.celery_worker_launcher", hostname, queue, lock_name, str(delay_s)]
    if lock_ttl_s is not None:
        command.append(str(lock_ttl_s))
    return subprocess.Popen(command, cwd=settings.BASE_DIR, env=env, start_new_session=True)


def _wait_until_consuming(celery_app, hostnames: list[str], timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        replies = celery_app.control.inspect(destination=hostnames, timeout=1.0).active_queues() or {}
        if set(replies) == set(hostnames):
            return
    pytest.fail(f"workers {hostnames} did not start consuming within {timeout_s:.0f} s")


def test_two_worker_processes_two_concurrent_cycles_exactly_one_runs(celery_app, redis_prefix):  # noqa: F811
    if connection.vendor != "postgresql":
        pytest.skip(
            "two worker processes must share the test database: run with DATABASE_URL=postgres://... "
            "(SQLite's test database lives in this process's memory)"
        )
    fleet_seed()
    team = team_seed()
    job = job_submit(team=team, spec={"kind": "training", "gpus": 1, "duration_s": 6000}, actor=None)
    queue, lock_name = celery_app.conf.task_default_queue, f"{redis_prefix}:lock"
    hostnames = [f"first-{redis_prefix}@test", f"second-{redis_prefix}@test"]
    workers = [_worker_process(name, queue, lock_name, delay_s=3.0) for name in hostnames]
    try:
        _wait_until_consuming(celery_app, hostnames)
        attempts = [cycle_run_task.delay(), cycle_run_task.delay()]
        reports = [attempt.get(timeout=120) for attempt in attempts]
        _forget(*attempts)
    finally:
        for worker in workers:
            os.killpg(worker.pid, signal.SIGTERM)
        for worker in workers:
            try:
                worker.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait()
    ran = [r for r in reports if "decisions" in r]
    skipped = [r for r in reports if "skipped" in r]
    assert len(ran) == 1 and len(skipped) == 1, reports
    assert {ran[0]["worker"], skipped[0]["worker"]} == set(hostnames)  # one attempt on each worker
    assert Job.objects.get(pk=job.pk).events.filter(type="bound").count() == 1
    assert SimulatedPod.objects.filter(job=job).count() == 1


def test_concurrent_cycle_attempts_in_threads_exactly_one_runs(settings, redis_prefix):  # noqa: F811
    """The same guarantee without Celery (any database): the task body run twice at once."""
    settings.SCHEDULER = {**settings.SCHEDULER, "lock_backend": "redis", "lock_name": f"{redis_prefix}:lock"}
    fleet_seed()
    team = team_seed()
    job = job_submit(team=team, spec={"kind": "training", "gpus": 1, "duration_s": 6000}, actor=None)
    slow = SlowFleet(delay_s=1.0)
    results: list[dict] = []

    def attempt() -> None:
        try:
            results.append(cycle_run_task.run())
        finally:
            connection.close()

    with gateway_override(slow):
        threads = [threading.Thread(target=attempt) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    assert sorted("skipped" in r for r in results) == [False, True], results
    assert len(slow.observers) == 1
    assert SimulatedPod.objects.filter(job=job).count() == 1
