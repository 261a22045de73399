"""Report periods: a calendar month in UTC, cut at ``now`` for the month still running.

The ledger is closed hour by hour; the hours since its last close are reported as provisional
(billing.provisional), so a running month's figures run to the instant they are read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from billing.errors import PeriodInvalid

_MONTH = re.compile(r"^(\d{4})-(\d{2})$")


@dataclass(frozen=True)
class Period:
    """``[start, as_of)``: the month from its first hour to its end, or to now for the month still running."""

    month: date  # the first day
    start: datetime
    end: datetime  # the month's end (first instant of the next month)
    as_of: datetime  # ≤ end: where the figures stop

    @property
    def label(self) -> str:
        return f"{self.month:%Y-%m}"

    @property
    def complete(self) -> bool:
        return self.as_of == self.end

    @property
    def hours(self) -> Decimal:
        return hours_between(self.start, self.as_of)

    @property
    def month_hours(self) -> Decimal:
        return hours_between(self.start, self.end)


def month_start(day: date) -> datetime:
    return datetime(day.year, day.month, 1, tzinfo=UTC)


def add_months(day: date, months: int) -> date:
    index = day.year * 12 + day.month - 1 + months
    return date(index // 12, index % 12 + 1, 1)


def hours_between(start: datetime, end: datetime) -> Decimal:
    """Exact hours from ``start`` to ``end`` (0 when end ≤ start), as a Decimal of microseconds / 3.6e9."""
    if end <= start:
        return Decimal(0)
    micros = (end - start) // timedelta(microseconds=1)
    return Decimal(micros) / Decimal(3_600_000_000)


def parse_month(text: str) -> date:
    """``YYYY-MM`` → the month's first day; :class:`PeriodInvalid` says what a valid value looks like."""
    match = _MONTH.match(text.strip()) if isinstance(text, str) else None
    if not match or not 1 <= int(match.group(2)) <= 12 or int(match.group(1)) < 2000:
        raise PeriodInvalid(f"month {text!r} is not a month: write it as YYYY-MM, e.g. 2026-11")
    return date(int(match.group(1)), int(match.group(2)), 1)


def period_for(month: date, *, now: datetime) -> Period:
    """The period of ``month`` as of ``now``; a month that has not started yet is :class:`PeriodInvalid`."""
    start = month_start(month)
    now = now.astimezone(UTC)
    # Refuse a future month before working out its end: the end of 9999-12 is in year 10000, which no date holds.
    if now <= start:
        raise PeriodInvalid(
            f"month {month:%Y-%m} has no closed hour yet: pick {now.astimezone(UTC):%Y-%m} or an earlier month"
        )
    end = month_start(add_months(month, 1))
    return Period(month=month, start=start, end=end, as_of=min(end, now))
