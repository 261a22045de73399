"""Single flight: exactly one scheduling cycle at a time, however many workers, beats and commands run.

Production uses **Redis** (``SCHEDULER_LOCK=redis``, the default; the server of ``REDIS_URL``): the lock is a
key set with ``SET NX PX`` (it expires after ``lock_ttl_s``, so a crashed holder cannot block the loop
forever) holding a **fencing token** from ``INCR`` on a counter key. Release and extension are Lua scripts
that act only while the key still holds the caller's token. The token travels with the cycle: the record
step refuses to write when a newer token has already recorded (:func:`scheduler.loop.record.fence_check`), so a
holder that stalled past its expiry cannot write stale decisions over a newer cycle's.

The embedded demo has no Redis: ``SCHEDULER_LOCK=file`` takes an exclusive ``flock`` on
``settings.SCHEDULER_LOCK_FILE`` (released by the kernel when the holder dies, so it needs no expiry) and
keeps the fencing counter in the same file. It works only between processes of one machine.

**Tokens survive the counter's loss.** The database keeps the last token that recorded
(:func:`scheduler.loop.record.fence_floor`); both locks take it as a ``floor`` before each attempt, and a counter
found below it (Redis restarted empty or from an old snapshot, the lock file deleted) is first raised to it
plus :data:`RESET_GAP`: without that, every cycle would be abandoned until the counter caught up, and a cycle
still in flight from before the loss (its token above the floor, not recorded yet) would share its token
with the next one. The Redis check, raise, ``INCR`` and ``SET PX`` are one Lua script, so a concurrent
acquirer sees all of it or none. A floor read a moment ago is safe: the fence only grows, and the counter is
never lowered. The locks take the floor as a callable and import no models; :func:`lock_get` wires it.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

import redis
from django.conf import settings

from scheduler.loop.record import fence_floor

CYCLE_LOCK = "microcosm:lock:cycle"
# How far a counter found below the floor jumps past it (module doc): more tokens than cycles can take
# without recording in between (about 115 days of failed cycles at 10 s), far fewer than a BIGINT holds.
RESET_GAP = 1_000_000

# KEYS: the lock, its fencing counter. ARGV: the lease (ms), the floor, RESET_GAP. Returns the token, or 0
# while the lock is held (then no token is taken). The floor is stored as the caller's string: Lua numbers are
# doubles and print large ones with an exponent.
_ACQUIRE = """
if redis.call('exists', KEYS[1]) == 1 then return 0 end
local counter = tonumber(redis.call('get', KEYS[2]) or '0')
if counter < tonumber(ARGV[2]) then
  redis.call('set', KEYS[2], ARGV[2])
  redis.call('incrby', KEYS[2], ARGV[3])
end
local token = redis.call('incr', KEYS[2])
redis.call('set', KEYS[1], token, 'PX', ARGV[1])
return token
"""

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


def _no_floor() -> int:
    return 0


def _floor_read(floor: Callable[[], int]) -> int:
    value = int(floor())
    if value < 0:
        raise ValueError(f"a fencing floor is never negative, got {value}")
    return value


class RedisLock:
    """The Redis lock (module doc). ``name`` is the key; the fencing counter is ``name + ":fence"``; ``floor``
    returns the last token that recorded (default: none, 0)."""

    def __init__(
        self,
        client: redis.Redis,
        *,
        name: str = CYCLE_LOCK,
        ttl_s: float = 120.0,
        floor: Callable[[], int] = _no_floor,
    ) -> None:
        self.client = client
        self.name = name
        self.fence_key = f"{name}:fence"
        self.ttl_ms = int(ttl_s * 1000)
        self.floor = floor

    def acquire(self) -> int | None:
        floor = _floor_read(self.floor)
        token = int(self.client.eval(_ACQUIRE, 2, self.name, self.fence_key, self.ttl_ms, floor, RESET_GAP))
        return token or None

    def release(self, token: int) -> bool:
        return bool(self.client.eval(_RELEASE, 1, self.name, str(token)))

    def extend(self, token: int) -> bool:
        return bool(self.client.eval(_EXTEND, 1, self.name, str(token), str(self.ttl_ms)))


class FileLock:
    """The one-machine lock (module doc). Not re-entrant: one instance per attempt. ``floor`` as for
    :class:`RedisLock`."""

    def __init__(self, path: Path, *, floor: Callable[[], int] = _no_floor) -> None:
        self.path = path
        self.floor = floor
        self._fd: int | None = None

    def acquire(self) -> int | None:
        floor = _floor_read(self.floor)  # before the file is opened: nothing to undo when the database fails
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        raw = os.pread(fd, 32, 0).decode().strip()
        counter = int(raw) if raw.isdigit() else 0
        if counter < floor:  # the file was deleted or replaced by an older copy (module doc)
            counter = floor + RESET_GAP
        token = counter + 1
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
    """The lock ``settings.SCHEDULER["lock_backend"]`` names, its floor the database's fence."""
    loop = settings.SCHEDULER
    if loop.get("lock_backend", "redis") == "file":
        return FileLock(Path(settings.SCHEDULER_LOCK_FILE), floor=fence_floor)
    client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=5, socket_connect_timeout=5)
    return RedisLock(
        client,
        name=str(loop.get("lock_name", CYCLE_LOCK)),
        ttl_s=float(loop.get("lock_ttl_s", 120)),
        floor=fence_floor,
    )


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
