"""Single flight: exactly one scheduling cycle at a time, however many workers, beats and commands run.

Production uses **Redis** (``SCHEDULER_LOCK=redis``, the default; the server of ``REDIS_URL``): the lock is a
key set with ``SET NX PX`` (it expires after ``lock_ttl_s``, so a crashed holder cannot block the loop
forever) holding a **fencing token** from ``INCR`` on a counter key. Release and extension are Lua scripts
that act only while the key still holds the caller's token. The token travels with the cycle: the record
step refuses to write when a newer token has already recorded (:func:`scheduler.record.fence_check`), so a
holder that stalled past its expiry cannot write stale decisions over a newer cycle's.

The embedded demo has no Redis: ``SCHEDULER_LOCK=file`` takes an exclusive ``flock`` on
``settings.SCHEDULER_LOCK_FILE`` (released by the kernel when the holder dies, so it needs no expiry) and
keeps the fencing counter in the same file. It works only between processes of one machine.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

import redis
from django.conf import settings

CYCLE_LOCK = "microcosm:lock:cycle"

_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end
"""
_EXTEND = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end
"""


class SingleFlightLock(Protocol):
    def acquire(self) -> int | None:
        """Take the lock and return a fencing token larger than every earlier one, or None if it is held."""
        ...

    def release(self, token: int) -> bool:
        """Give the lock back if ``token`` still holds it; True when it did."""
        ...

    def extend(self, token: int) -> bool:
        """Push the expiry out again while ``token`` still holds the lock; False when it does not any more."""
        ...


class RedisLock:
    """The Redis lock (module doc). ``name`` is the key; the fencing counter is ``name + ":fence"``."""

    def __init__(self, client: redis.Redis, *, name: str = CYCLE_LOCK, ttl_s: float = 120.0) -> None:
        self.client = client
        self.name = name
        self.fence_key = f"{name}:fence"
        self.ttl_ms = int(ttl_s * 1000)

    def acquire(self) -> int | None:
        # Take a token first: a token wasted on a failed attempt is harmless, tokens need only increase.
        token = int(self.client.incr(self.fence_key))
        if self.client.set(self.name, str(token), nx=True, px=self.ttl_ms):
            return token
        return None

    def release(self, token: int) -> bool:
        return bool(self.client.eval(_RELEASE, 1, self.name, str(token)))

    def extend(self, token: int) -> bool:
        return bool(self.client.eval(_EXTEND, 1, self.name, str(token), str(self.ttl_ms)))


class FileLock:
    """The one-machine lock (module doc). Not re-entrant: one instance per attempt."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> int | None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        raw = os.pread(fd, 32, 0).decode().strip()
        token = (int(raw) if raw.isdigit() else 0) + 1
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(token).encode(), 0)
        os.fsync(fd)
        self._fd = fd
        return token

    def release(self, token: int) -> bool:
        if self._fd is None:
            return False
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None
        return True

    def extend(self, token: int) -> bool:
        return self._fd is not None  # flock has no expiry: held until released or the process dies


def lock_get() -> SingleFlightLock:
    """The lock ``settings.SCHEDULER["lock_backend"]`` names."""
    loop = settings.SCHEDULER
    if loop.get("lock_backend", "redis") == "file":
        return FileLock(Path(settings.SCHEDULER_LOCK_FILE))
    client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=5, socket_connect_timeout=5)
    return RedisLock(client, name=str(loop.get("lock_name", CYCLE_LOCK)), ttl_s=float(loop.get("lock_ttl_s", 120)))


@contextmanager
def single_flight(lock: SingleFlightLock | None = None) -> Iterator[int | None]:
    """Hold the cycle lock for the ``with`` body; yields the fencing token, or None when another holds it
    (then the body should do nothing)."""
    lock = lock or lock_get()
    token = lock.acquire()
    try:
        yield token
    finally:
        if token is not None:
            lock.release(token)
