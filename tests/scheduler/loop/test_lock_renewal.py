"""The loop's lock is renewed while a cycle runs and lapses soon after its holder dies (scheduler/loop/locks.py).

Redis is the server of settings.REDIS_URL (skipped with the reason when it is not reachable). The in-process
tests run on any database; the one that SIGKILLs a real worker process mid-cycle needs the workers to share
the test database, so PostgreSQL (CI), like the single-flight proof in test_tasks_celery.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from datetime import UTC

import pytest
import redis
from django.db import connection

from jobs.models import Job
from jobs.services import job_submit
from scheduler.errors import FencingError
from scheduler.gateways import gateway_override
from scheduler.loop.locks import FileLock, Lease, RedisLock, single_flight
from scheduler.models import SchedulerFence, SimulatedPod
from scheduler.tasks import cycle_run_task
from tests.scheduler.loop_helpers import SlowFleet, fleet_seed, team_seed
from tests.scheduler.redis_helpers import redis_client, redis_prefix  # noqa: F401 (fixtures)
from tests.scheduler.test_tasks_celery import _forget, _wait_until_consuming, _worker_process, celery_app  # noqa: F401 (fixture)

TTL_S = 1.5  # short, so that a cycle of a few seconds outlives it several times


def _lock_settings(settings, name: str, ttl_s: float = TTL_S) -> None:
    settings.SCHEDULER = {**settings.SCHEDULER, "lock_backend": "redis", "lock_name": name, "lock_ttl_s": ttl_s}


def _fence() -> int:
    return SchedulerFence.objects.filter(name="cycle").values_list("token", flat=True).first() or 0


@pytest.mark.django_db(transaction=True)
def test_a_cycle_longer_than_the_ttl_keeps_its_lock_and_records(settings, redis_client, redis_prefix):  # noqa: F811
    """Observing takes three TTLs; a contender trying all along never gets the lock, whose expiry stays short
    (renewed, not lengthened), and the cycle records as usual."""
    name = f"{redis_prefix}:lock"
    _lock_settings(settings, name)
    fleet_seed()
    job = job_submit(team=team_seed(), spec={"kind": "training", "gpus": 1, "duration_s": 6000}, actor=None)
    taken: list[int] = []
    expiries_ms: list[int] = []
    done = threading.Event()

    def contend() -> None:
        contender = RedisLock(redis_client, name=name, ttl_s=TTL_S)
        while redis_client.get(name) is None and not done.is_set():  # from the moment the cycle holds it
            time.sleep(0.01)
        until = time.monotonic() + 2.5 * TTL_S  # and while it surely still observes (3 TTLs)
        while not done.is_set() and time.monotonic() < until:
            expiries_ms.append(int(redis_client.pttl(name)))
            token = contender.acquire()
            if token is not None:
                taken.append(token)
                contender.release(token)
            time.sleep(0.05)

    thread = threading.Thread(target=contend)
    with gateway_override(SlowFleet(delay_s=3 * TTL_S)):
        thread.start()
        try:
            report = cycle_run_task.run()
        finally:
            done.set()
            thread.join(timeout=30)
    assert taken == [], f"the lock was taken from a live cycle: {taken}"
    held = [ms for ms in expiries_ms if ms > 0]
    assert len(held) > 20 and max(held) <= TTL_S * 1000  # held all along, never for longer than one TTL ahead
    assert "decisions" in report, report
    assert [b["job"] for b in report["decisions"]["binds"]] == [str(job.pk)]
    assert _fence() == report["fence_token"]
    assert redis_client.get(name) is None  # released at the end


@pytest.mark.django_db(transaction=True)
def test_a_cycle_whose_lock_is_taken_mid_cycle_records_nothing(settings, redis_client, redis_prefix):  # noqa: F811
    """The lock expires under a cycle (here: deleted) and another holder takes it but has not recorded yet, so the
    database fence alone would let the old cycle write; its renewal or its confirmation before the write finds
    the key holds another token, and the cycle is abandoned with nothing written."""
    name = f"{redis_prefix}:lock"
    _lock_settings(settings, name)
    fleet_seed()
    job = job_submit(team=team_seed(), spec={"kind": "training", "gpus": 1, "duration_s": 6000}, actor=None)
    fence_before = _fence()
    thief = RedisLock(redis_client, name=name, ttl_s=60)
    stolen: list[int] = []

    def steal() -> None:
        deadline = time.monotonic() + 10
        while redis_client.get(name) is None and time.monotonic() < deadline:
            time.sleep(0.02)
        redis_client.delete(name)  # as if the lease had lapsed
        token = thief.acquire()
        assert token is not None
        stolen.append(token)

    thread = threading.Thread(target=steal)
    with gateway_override(SlowFleet(delay_s=2.0)):
        thread.start()
        report = cycle_run_task.run()
        thread.join(timeout=30)
    assert "abandoned" in report and "lost its lock" in report["abandoned"], report
    assert stolen and stolen[0] > report["fence_token"]
    assert _fence() == fence_before  # nothing recorded, the fence untouched
    assert Job.objects.get(pk=job.pk).state == "pending" and not SimulatedPod.objects.filter(job=job).exists()
    assert redis_client.get(name) == str(stolen[0]).encode()  # the old holder did not release the thief's lock
    thief.release(stolen[0])


def test_renewal_stops_after_the_hold_limit_and_the_lock_lapses(redis_client, redis_prefix):  # noqa: F811
    """A holder renewing past lock_hold_max_s is taken for hung: renewal stops and the key expires one TTL later."""
    name = f"{redis_prefix}:lock"
    lock = RedisLock(redis_client, name=name, ttl_s=0.6)
    token = lock.acquire()
    assert token is not None
    lease = Lease(lock, token, hold_max_s=1.0)
    try:
        time.sleep(0.9)
        assert lease.lost is None and redis_client.get(name) == str(token).encode()  # renewed past one TTL
        deadline = time.monotonic() + 5
        while redis_client.get(name) is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert redis_client.get(name) is None
        assert lease.lost is not None and "hung" in lease.lost
        with pytest.raises(FencingError, match="lost its lock"):
            lease.confirm()
    finally:
        lease.stop()


class _FlakyLock:
    """A lock whose extension fails with a Redis error a few times, then answers again."""

    ttl_s = 0.3

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    def acquire(self) -> int | None:
        return 1

    def release(self, token: int) -> bool:
        return True

    def extend(self, token: int) -> bool:
        self.calls += 1
        if self.calls <= self.failures:
            raise redis.exceptions.ConnectionError("Connection reset by peer")
        return True


def test_a_transient_redis_error_in_a_renewal_does_not_lose_the_lease():
    lock = _FlakyLock(failures=2)
    lease = Lease(lock, 1)
    try:
        deadline = time.monotonic() + 5
        while lease.renewals < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert lease.renewals >= 2 and lease.lost is None
        lease.confirm()
    finally:
        lease.stop()


def test_the_file_lock_needs_no_renewal_and_is_confirmed_while_held(tmp_path):
    lock = FileLock(tmp_path / "scheduler.lock")
    with single_flight(lock) as lease:
        assert lease is not None and lease.token == 1
        assert lease._thread is None  # flock has no expiry: no heartbeat
        lease.confirm()
    with pytest.raises(FencingError):  # released: the descriptor is closed
        lease.confirm()


# --- A worker killed mid-cycle -----------------------------------------------------------------------------------

PERIOD_S = 3.0  # the beat period of this test; the lock's TTL is the same, as by default (one period)
# What the bound allows beyond two periods: the next cycle's own run (observe, plan, record on a loaded CI box)
# and the broker's hand-over.
TOLERANCE_S = 2.5


@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_mid_cycle_costs_at_most_two_cycles(celery_app, redis_client, redis_prefix):  # noqa: F811
    """Two real worker processes on one queue, a beat of PERIOD_S sent from here (as Celery beat sends it, with
    its expiry). The victim observes for a minute; once it is mid-cycle and has held its lock past two TTLs, it is
    SIGKILLed, and the survivor's first cycle that records must end within two periods (plus TOLERANCE_S)."""
    if connection.vendor != "postgresql":
        pytest.skip(
            "the worker processes must share the test database: run with DATABASE_URL=postgres://... "
            "(SQLite's test database lives in this process's memory)"
        )
    fleet_seed()
    team = team_seed()
    queue, lock_name = celery_app.conf.task_default_queue, f"{redis_prefix}:lock"
    victim_name, survivor_name = f"victim-{redis_prefix}@test", f"survivor-{redis_prefix}@test"
    # The victim alone first, so that it surely takes the first cycle (two workers on one queue share the
    # messages as the broker pleases: the fast one may take every tick); the survivor joins while it observes.
    victim = _worker_process(victim_name, queue, lock_name, delay_s=60.0, lock_ttl_s=PERIOD_S)
    survivor: subprocess.Popen[bytes] | None = None
    ticks: list = []
    stop = threading.Event()

    def beat() -> None:
        while not stop.is_set():
            ticks.append(cycle_run_task.apply_async(expires=PERIOD_S))
            stop.wait(PERIOD_S)

    beat_thread = threading.Thread(target=beat)
    try:
        _wait_until_consuming(celery_app, [victim_name])
        ticks.append(cycle_run_task.apply_async(expires=60))
        deadline = time.monotonic() + 60
        while redis_client.get(f"{lock_name}:observing") != victim_name.encode():
            assert time.monotonic() < deadline, "the victim took no cycle within 60 s"
            time.sleep(0.05)
        survivor = _worker_process(survivor_name, queue, lock_name, delay_s=0.0, lock_ttl_s=PERIOD_S)
        _wait_until_consuming(celery_app, [survivor_name])
        beat_thread.start()
        token = redis_client.get(lock_name)
        assert token is not None
        # A job the victim's cycle will never place: the survivor's first cycle after the kill places it.
        job = job_submit(team=team, spec={"kind": "training", "gpus": 1, "duration_s": 6000}, actor=None)
        time.sleep(2 * PERIOD_S)
        assert redis_client.get(lock_name) == token, "the victim's lock lapsed while it was alive"
        assert 0 < redis_client.pttl(lock_name) <= PERIOD_S * 1000
        os.killpg(victim.pid, signal.SIGKILL)
        killed_at = time.time()
        victim.wait(timeout=30)
        recorded_at = None
        deadline = time.monotonic() + 10 * PERIOD_S
        while recorded_at is None and time.monotonic() < deadline:
            for tick in list(ticks):
                if tick.ready() and "decisions" in (tick.result or {}) and tick.result["worker"] == survivor_name:
                    done_at = tick.date_done.replace(tzinfo=tick.date_done.tzinfo or UTC).timestamp()
                    if done_at > killed_at:
                        recorded_at = done_at if recorded_at is None else min(recorded_at, done_at)
            time.sleep(0.05)
    finally:
        stop.set()
        if beat_thread.is_alive():
            beat_thread.join(timeout=30)
        processes = [p for p in (victim, survivor) if p is not None]
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        _forget(*ticks)
    assert recorded_at is not None, f"no cycle recorded within {10 * PERIOD_S:.0f} s of the kill"
    gap_s = recorded_at - killed_at
    allowed_s = 2 * PERIOD_S + TOLERANCE_S
    print(f"\na worker SIGKILLed mid-cycle: the next cycle recorded {gap_s:.1f} s later ({allowed_s:.1f} s allowed)")
    assert gap_s <= allowed_s
    assert Job.objects.get(pk=job.pk).state == "running"
    assert SimulatedPod.objects.filter(job=job).count() == 1
