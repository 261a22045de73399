"""A rate limit counted atomically in the cache: at most ``limit`` admissions per key in any ``period_s`` seconds,
however many web workers and replicas count at once.

DRF's ``SimpleRateThrottle`` reads a key's history list, appends to it and writes it back: two workers that read
the same list both admit, so parallel clients got 668–700 a minute through a 600 limit (the second audit). Here every
step is one atomic cache operation, the same in Redis (``SET NX EX``, ``INCR``) and in Django's local memory
cache (which holds a lock around each):

- a ticket counter per key (``incr``) hands each attempt the next of ``limit`` slots, round robin;
- the attempt is admitted if it claims that slot with ``add`` (set-if-absent) for ``period_s`` seconds.

Each admission holds a slot for ``period_s`` seconds and there are ``limit`` slots, so no ``period_s`` window
ever holds more than ``limit`` admissions: a sliding window, without a boundary where two fixed windows
would let twice the limit through. A slot is found held only when ``limit`` attempts (admitted or not) came
in less than ``period_s`` seconds, so a caller below the limit is never refused. The cost is one key per
admission in the last period (as DRF's list held one timestamp per request) and two or three round trips.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

# The ticket counter outlives any period; when it expires it starts again at 1, which at worst refuses a caller
# who was near the limit once a day (slots are still held for their period, so never admits too many).
COUNTER_TTL_S = 24 * 60 * 60


@dataclass(frozen=True)
class Admission:
    admitted: bool
    wait_s: float  # 0 when admitted; else seconds until the slot this attempt found held is free again


_PERIOD_S = {"s": 1, "m": 60, "h": 60 * 60, "d": 24 * 60 * 60}


def rate_parse(rate: str) -> tuple[int, int]:
    """``600/min`` → (600, 60), as DRF reads a rate (``SimpleRateThrottle.parse_rate``: the period's first
    letter); ``scheduler.env.env_rate`` has checked it at start-up."""
    count, _, period = rate.partition("/")
    return int(count), _PERIOD_S[period[:1]]


def rate_admit(*, cache: Any, key: str, limit: int, period_s: int, now: float) -> Admission:
    """Count one attempt under ``key`` against ``limit`` per ``period_s`` (whole seconds: Redis expiry is in
    seconds) at time ``now`` (seconds since the epoch). Raises what the cache client raises when it cannot be
    reached; the caller chooses to fail open or closed."""
    counter = f"{key}:n"
    try:
        ticket = cache.incr(counter)
    except ValueError:  # no counter yet (or it just expired): start it; add loses harmlessly to a parallel add
        cache.add(counter, 0, timeout=COUNTER_TTL_S)
        ticket = cache.incr(counter)
    slot = f"{key}:{ticket % limit}"
    if cache.add(slot, now, timeout=period_s):
        return Admission(admitted=True, wait_s=0.0)
    claimed = cache.get(slot)
    wait = 1.0 if claimed is None else max(1.0, float(claimed) + period_s - now)
    return Admission(admitted=False, wait_s=float(math.ceil(wait)))
