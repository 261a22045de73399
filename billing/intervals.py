"""Interval arithmetic of the ledger: where intervals end and how many GPU-hours each holds, exactly.

Pure functions (no database). The rules:

- **Boundaries.** An allocation's intervals end on every whole UTC hour after it starts and at its end, so
  every closer computes the same boundaries and no interval straddles an hour (nor a day, a month, or a price
  change, which take effect at 00:00 UTC).
- **GPU-hours, telescoped.** Let ``G(t) = round₆((t − started_at) in hours × units / 7000)``, the GPU-hours
  accrued from the start to ``t`` rounded half-even to 6 decimals (the ledger's precision). An interval
  ``[a, b)`` holds ``G(b) − G(a)``. Summed over an allocation's contiguous intervals this telescopes to
  ``G(ended_at)``: the sum of an allocation's entries is its allocated time × size, rounded once — rounding
  never adds or drops anything however many intervals there are.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from fractions import Fraction

HOUR = timedelta(hours=1)
_MICROS_PER_HOUR = 3_600_000_000
_SCALE = 10**6  # six decimals: LedgerEntry.gpu_hours and cost
SIX_PLACES = Decimal("0.000001")


def floor_hour(at: datetime) -> datetime:
    """The whole hour at or before ``at`` (same timezone)."""
    return at.replace(minute=0, second=0, microsecond=0)


def next_hour(at: datetime) -> datetime:
    """The first whole hour strictly after ``at``."""
    return floor_hour(at) + HOUR


def _micros(delta: timedelta) -> int:
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def accrued_gpu_hours(*, started_at: datetime, at: datetime, units: int, units_per_gpu: int) -> Decimal:
    """``G(at)``: GPU-hours an allocation of ``units`` accrued from ``started_at`` to ``at``, to 6 decimals."""
    if at < started_at:
        raise ValueError(f"{at.isoformat()} is before the allocation started ({started_at.isoformat()})")
    exact = Fraction(_micros(at - started_at) * units, _MICROS_PER_HOUR * units_per_gpu)
    return Decimal(round(exact * _SCALE)).scaleb(-6)


def boundaries(*, started_at: datetime, closed_until: datetime | None, until: datetime) -> Iterator[datetime]:
    """The interval ends after ``closed_until`` (or ``started_at``) up to ``until`` inclusive.

    ``until`` is either a whole hour (a live allocation closes complete hours only) or the allocation's end;
    every hour strictly between the last end and ``until`` is a boundary, and ``until`` itself is the last.
    """
    cursor = closed_until or started_at
    while cursor < until:
        cursor = min(next_hour(cursor), until)
        yield cursor


def close_horizon(*, started_at: datetime, ended_at: datetime | None, until: datetime) -> datetime | None:
    """How far an allocation may be closed given the closer's ``until``; None when nothing can be closed yet.

    Ended by ``until``: through its end. Otherwise: through the last whole hour at or before ``until``.
    """
    horizon = ended_at if ended_at is not None and ended_at <= until else floor_hour(until)
    return horizon if horizon > started_at else None


def money(gpu_hours: Decimal, price_per_gpu_hour: Decimal) -> Decimal:
    """Cost of ``gpu_hours`` at ``price_per_gpu_hour``, rounded half-even to 6 decimals."""
    return (gpu_hours * price_per_gpu_hour).quantize(SIX_PLACES, rounding=ROUND_HALF_EVEN)
