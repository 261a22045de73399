"""Single-flight locks: Redis (expiry + fencing token) and the one-machine file lock."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from scheduler.locks import FileLock, RedisLock, lock_get, single_flight
from tests.scheduler.redis_helpers import redis_client, redis_prefix  # noqa: F401 (fixtures)


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
    assert isinstance(lock_get(), RedisLock if backend == "redis" else FileLock)
