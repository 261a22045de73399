"""Single flight: exactly one scheduling cycle at a time, however many workers, beats and commands run.

Production uses **Redis** (``SCHEDULER_LOCK=redis``, the default; the server of ``REDIS_URL``): the lock is a
key set with ``SET NX PX`` holding a **fencing token** from ``INCR`` on a counter key. Release and extension are
Lua scripts that act only while the key still holds the caller's token. The token travels with the cycle: the
record step refuses to write when a newer token has already recorded (:func:`scheduler.loop.record.fence_check`),
so a holder that stalled past its expiry cannot write stale decisions over a newer cycle's.

**A short lease, renewed while the cycle runs** (:class:`Lease`). The key expires ``lock_ttl_s`` after it was
last extended (default: one cycle period), so a holder that dies mid-cycle frees the loop within that time
and the next beat runs a cycle: a dead worker costs at most two cycles (RELIABILITY.md). A live holder keeps
it with a heartbeat thread that extends it every third of the TTL (Redisson's lock watchdog renews at
``lockWatchdogTimeout / 3`` the same way), only while the key still holds its token: redis-py's
``Lock.reacquire`` script (``redis.lock.Lock``, ``LUA_REACQUIRE_SCRIPT``), which is :data:`_EXTEND`. A renewal
refused (the key expired or another holder's token is in it) marks the lease lost, and the cycle confirms its
lease (:meth:`Lease.confirm`, one more extension) before each write: a lost lease raises
:class:`~scheduler.errors.FencingError` and nothing is written. The fencing token check stays behind it for a
holder that cannot know (a process paused between the confirmation and its commit). A transient Redis error in
a renewal is retried at the next beat; the lease is lost only when Redis says so. A holder that renews for more
than ``lock_hold_max_s`` is taken for hung (a gateway call that never returns): renewal stops, the key lapses
within one TTL and the loop goes on without it.

The embedded demo has no Redis: ``SCHEDULER_LOCK=file`` takes an exclusive ``flock`` on
``settings.SCHEDULER_LOCK_FILE`` and keeps the fencing counter in the same file. It works only between processes
of one machine and needs no expiry and so no renewal: the kernel drops a ``flock`` when the last descriptor of
its open file closes, which a process's death does at once (flock(2)). The descriptor is opened per attempt, after
a worker's pool processes were forked, and is not inheritable (PEP 446), so no program the holder starts keeps the
lock alive after it. Its lease is still confirmed before writes (it holds while the descriptor is open); having no
expiry, it has no hold limit either.

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
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

import redis
from django.conf import settings

from scheduler.errors import FencingError
from scheduler.loop.record import fence_floor

log = logging.getLogger(__name__)

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
# redis-py's Lock.reacquire (redis.lock.Lock, LUA_REACQUIRE_SCRIPT): the lease back to a full TTL, for its owner only.
_EXTEND = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end
"""


class SingleFlightLock(Protocol):
    # Seconds the lock outlives its holder's last extension; None: it never expires (freed when the holder dies).
    ttl_s: float | None

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
        self.ttl_s: float | None = ttl_s
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

    ttl_s: float | None = None  # flock has no expiry (module doc)

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


class Lease:
    """A held lock and its fencing token, renewed in the background until :meth:`stop` (module doc).

    ``renew_every_s``: time between extensions (default a third of the lock's TTL; a lock without a TTL gets no
    heartbeat). ``hold_max_s``: how long renewal goes on before the holder is taken for hung.
    """

    def __init__(
        self,
        lock: SingleFlightLock,
        token: int,
        *,
        hold_max_s: float = 600.0,
        renew_every_s: float | None = None,
    ) -> None:
        self.lock = lock
        self.token = token
        self.hold_max_s = hold_max_s
        self.renew_every_s = renew_every_s if renew_every_s is not None else (lock.ttl_s or 0.0) / 3
        self.renewals = 0
        self._lost: str | None = None
        self._started = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if lock.ttl_s is not None:
            self._thread = threading.Thread(target=self._beat, name=f"lock-renewal-{token}", daemon=True)
            self._thread.start()

    @property
    def lost(self) -> str | None:
        """Why the lease is lost, or None while it holds (as far as the heartbeat knows)."""
        return self._lost

    def confirm(self) -> None:
        """Extend the lease once more before a write; :class:`~scheduler.errors.FencingError` if it is lost.
        A Redis error propagates (an outage: the caller writes nothing)."""
        if self._lost is None and not self.lock.extend(self.token):
            self._lose("the lock expired or another holder took it")
        if self._lost is not None:
            raise FencingError(f"cycle {self.token} lost its lock: {self._lost}")

    def stop(self) -> None:
        """End the heartbeat (before the lock is released, so no extension follows the release)."""
        self._stop.set()
        if self._thread is not None:
            # An extension in flight ends within the client's socket timeout (lock_get).
            self._thread.join(timeout=30)

    def _lose(self, why: str) -> None:
        if self._lost is None:
            self._lost = why
            log.warning("cycle %d lost its lock: %s", self.token, why, extra={"cycle": self.token})

    def _beat(self) -> None:
        while not self._stop.wait(self.renew_every_s):
            if time.monotonic() - self._started > self.hold_max_s:
                self._lose(f"held for more than {self.hold_max_s:.0f} s (lock_hold_max_s), taken for hung")
                return
            try:
                held = self.lock.extend(self.token)
            except (redis.RedisError, OSError) as exc:  # transient: the next beat tries again within the TTL
                log.warning("cycle %d: lock renewal failed, retrying: %s", self.token, exc, extra={"cycle": self.token})
                continue
            if not held:
                self._lose("the lock expired or another holder took it")
                return
            self.renewals += 1


def lock_get() -> SingleFlightLock:
    """The lock ``settings.SCHEDULER["lock_backend"]`` names, its floor the database's fence."""
    loop = settings.SCHEDULER
    if loop.get("lock_backend", "redis") == "file":
        return FileLock(Path(settings.SCHEDULER_LOCK_FILE), floor=fence_floor)
    ttl_s = float(loop.get("lock_ttl_s", 10))
    # A Redis call slower than a third of the TTL would let the lease lapse between two renewals: give up on it
    # and try again at the next beat instead (5 s at most, the loop's usual Redis timeout).
    timeout_s = min(5.0, max(ttl_s / 3, 0.5))
    client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
    return RedisLock(client, name=str(loop.get("lock_name", CYCLE_LOCK)), ttl_s=ttl_s, floor=fence_floor)


@contextmanager
def single_flight(lock: SingleFlightLock | None = None) -> Iterator[Lease | None]:
    """Hold the cycle lock for the ``with`` body, renewed while it runs; yields the :class:`Lease` (its
    ``token`` is the fencing token), or None when another holds the lock (then the body should do nothing)."""
    lock = lock or lock_get()
    token = lock.acquire()
    if token is None:
        yield None
        return
    lease = Lease(lock, token, hold_max_s=float(settings.SCHEDULER.get("lock_hold_max_s", 600.0)))
    try:
        yield lease
    finally:
        lease.stop()
        lock.release(token)
