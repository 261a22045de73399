"""Single-flight locks: Redis (expiry + fencing token) and the one-machine file lock; tokens that stay above
the database's fence when the counter is lost (Redis restarted empty or from an old snapshot, the lock file
deleted)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from jobs.services import job_submit
from scheduler.errors import FencingError
from scheduler.gateways import gateway_override
from scheduler.loop.cycle import cycle_run
from scheduler.loop.locks import RESET_GAP, FileLock, RedisLock, lock_get, single_flight
from scheduler.loop.record import fence_floor
from scheduler.models import SchedulerFence
from scheduler.tasks import cycle_run_task
from tests.scheduler.loop_helpers import Clock, fleet, fleet_seed, team_seed
from tests.scheduler.redis_helpers import redis_client, redis_prefix, redis_server  # noqa: F401 (fixtures)


def test_redis_lock_is_exclusive_and_tokens_only_grow(redis_client, redis_prefix):  # noqa: F811
    first, second = (RedisLock(redis_client, name=f"{redis_prefix}:lock", ttl_s=30) for _ in range(2))
    token = first.acquire()
    assert token is not None
    assert second.acquire() is None
    assert first.release(token)
    again = second.acquire()
    assert again is not None and again > token
    second.release(again)


def test_an_expired_holder_cannot_release_or_extend_the_next_holders_lock(redis_client, redis_prefix):  # noqa: F811
    lock = RedisLock(redis_client, name=f"{redis_prefix}:lock", ttl_s=0.2)
    stale = lock.acquire()
    assert stale is not None
    time.sleep(0.3)  # the holder stalled past its lease
    fresh = lock.acquire()
    assert fresh is not None and fresh > stale
    assert not lock.release(stale) and not lock.extend(stale)
    assert redis_client.get(f"{redis_prefix}:lock") == str(fresh).encode()
    assert lock.extend(fresh) and lock.release(fresh)
    assert redis_client.get(f"{redis_prefix}:lock") is None


def test_single_flight_yields_none_while_held(redis_client, redis_prefix):  # noqa: F811
    name = f"{redis_prefix}:lock"
    with single_flight(RedisLock(redis_client, name=name)) as outer:
        assert outer is not None
        with single_flight(RedisLock(redis_client, name=name)) as inner:
            assert inner is None
    assert redis_client.get(name) is None  # released on the way out


def test_file_lock_is_exclusive_and_keeps_its_fencing_counter(tmp_path):
    path = tmp_path / "scheduler.lock"
    first, second = FileLock(path), FileLock(path)
    token = first.acquire()
    assert token == 1 and second.acquire() is None
    assert first.extend(token)
    first.release(token)
    assert not first.extend(token)
    assert second.acquire() == 2
    second.release(2)


def test_file_lock_is_released_when_its_holder_dies(tmp_path):
    path = tmp_path / "scheduler.lock"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import fcntl, os, time; fd = os.open({str(path)!r}, os.O_RDWR | os.O_CREAT); "
            "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"held"
        assert FileLock(path).acquire() is None
    finally:
        holder.kill()
        holder.wait()
    lock = FileLock(path)
    token = lock.acquire()
    assert token is not None
    lock.release(token)


@pytest.mark.parametrize("backend", ["redis", "file"])
def test_lock_get_follows_the_setting(settings, tmp_path, backend):
    settings.SCHEDULER = {**settings.SCHEDULER, "lock_backend": backend}
    settings.SCHEDULER_LOCK_FILE = tmp_path / "x.lock"
    lock = lock_get()
    assert isinstance(lock, RedisLock if backend == "redis" else FileLock)
    assert lock.floor is fence_floor  # the database's fence is the floor of every token


def test_a_redis_counter_lost_or_rolled_back_restarts_above_the_floor(redis_client, redis_prefix):  # noqa: F811
    recorded = [21]  # the database's fence: the last token that recorded
    lock = RedisLock(redis_client, name=f"{redis_prefix}:lock", ttl_s=30, floor=lambda: recorded[0])
    fence_key = f"{redis_prefix}:lock:fence"
    first = lock.acquire()  # no counter at all (Redis restarted empty): it jumps past the floor
    assert first == 21 + RESET_GAP + 1
    assert lock.acquire() is None  # held: refused, and no token is taken
    assert redis_client.get(fence_key) == str(first).encode()
    lock.release(first)
    recorded[0] = first
    assert lock.acquire() == first + 1  # a healthy counter above the floor: plain increments
    lock.release(first + 1)
    recorded[0] = first + 1
    redis_client.set(fence_key, 5)  # restored from an old snapshot
    assert lock.acquire() == first + 1 + RESET_GAP + 1


def test_a_cycle_in_flight_across_the_loss_keeps_a_token_below_the_next_one(redis_client, redis_prefix):  # noqa: F811
    """Holder A takes its token, Redis loses everything (counter and lock), B acquires before A records:
    B's token must be above A's, or fencing could not order their writes."""
    recorded = [40]
    name = f"{redis_prefix}:lock"
    redis_client.set(f"{name}:fence", 44)  # a few tokens taken since the last record (failed cycles)
    a = RedisLock(redis_client, name=name, floor=lambda: recorded[0]).acquire()
    assert a == 45
    redis_client.delete(name, f"{name}:fence")
    b = RedisLock(redis_client, name=name, floor=lambda: recorded[0]).acquire()
    assert b is not None and b > a > recorded[0]


def test_the_floor_holds_with_concurrent_acquirers_while_the_counter_is_lost(redis_client, redis_prefix):  # noqa: F811
    """Two threads take, "record" and give back the lock while the counter key is deleted under them; every
    recorded token is above the one before it (the fence would refuse none of them)."""
    name = f"{redis_prefix}:lock"
    guard = threading.Lock()
    recorded: list[int] = []
    refused: list[tuple[int, int]] = []
    stop = threading.Event()

    def floor() -> int:
        with guard:
            return recorded[-1] if recorded else 0

    def acquirer() -> None:
        lock = RedisLock(redis_client, name=name, ttl_s=30, floor=floor)
        while not stop.is_set():
            token = lock.acquire()
            if token is None:
                continue
            with guard:  # fence_check: refuse a token below the last one recorded, then record it
                if recorded and token <= recorded[-1]:
                    refused.append((token, recorded[-1]))
                recorded.append(token)
            lock.release(token)

    threads = [threading.Thread(target=acquirer) for _ in range(2)]
    for thread in threads:
        thread.start()
    try:
        for _ in range(5):
            time.sleep(0.05)
            redis_client.delete(f"{name}:fence")
        time.sleep(0.05)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
    assert len(recorded) > 10 and refused == []
    assert recorded == sorted(set(recorded))


def test_a_deleted_lock_file_restarts_its_counter_above_the_floor(tmp_path):
    path = tmp_path / "scheduler.lock"
    lock = FileLock(path, floor=lambda: 0)
    assert lock.acquire() == 1
    lock.release(1)
    path.unlink()
    lock = FileLock(path, floor=lambda: 1)
    assert lock.acquire() == 1 + RESET_GAP + 1
    lock.release(1 + RESET_GAP + 1)


@pytest.mark.django_db
def test_the_first_cycle_after_redis_lost_its_data_records(settings, redis_server):  # noqa: F811
    """Real Redis (a private server, so that FLUSHDB touches nobody else), real cycles on the simulated fleet:
    FLUSHDB between two cycles, and the very next one records rather than being abandoned."""
    settings.REDIS_URL = redis_server.url
    settings.SCHEDULER = {**settings.SCHEDULER, "lock_backend": "redis", "lock_name": "microcosm:lock:cycle"}
    fleet_seed()
    team = team_seed()
    clock = Clock()
    with gateway_override(fleet(clock)):
        for _ in range(3):
            report = cycle_run_task.run()
            assert "decisions" in report, report
            clock.advance(10)
        before = SchedulerFence.objects.get(name="cycle").token
        assert before == report["fence_token"] == 3
        client = redis_server.client()
        client.flushdb()
        # Without the floor the counter would restart at 1, and the cycle would be abandoned:
        stale = RedisLock(client, name="microcosm:lock:cycle").acquire()
        assert stale == 1
        with pytest.raises(FencingError, match="fencing token 1 is older than 3"):
            cycle_run(fence_token=stale)
        client.flushdb()
        job = job_submit(team=team, spec={"kind": "training", "gpus": 1, "duration_s": 600}, actor=None)
        report = cycle_run_task.run()
        client.close()
    assert "decisions" in report, report
    assert report["fence_token"] == before + RESET_GAP + 1
    assert [b["job"] for b in report["decisions"]["binds"]] == [str(job.pk)]
    assert SchedulerFence.objects.get(name="cycle").token == report["fence_token"]
