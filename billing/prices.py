"""The price catalog's defaults (dated, from ``docs/gpu-facts.md``) and the price in force at an instant.

Defaults: AWS us-east-1 list prices per GPU-hour (instance price ÷ 8, as ``docs/gpu-facts.md``, Prices, prints
them). They match the demo fleet's node prices (``demo/seed.py``).

- **Before the cuts**, AWS Pricing API dated 2025-03-14: p4d $4.10, p4de $5.12 ⚠, p5 $12.29, p5en $84.80/8.
- **Now**: the "On-demand now" column (skypilot catalog, undated, after AWS's June 2025 cut of "up to 45%";
  the announcement itself was not retrieved ⚠), so these take effect on 2025-06-01, the month of the cut.
- **Spot**: the "Spot now" column is a range by availability zone; we take its midpoint (the low end would
  flatter spot), effective with the "now" prices.
- **Reserved**: per-family commitment rates were not retrieved; the Prices section gives the planning assumption
  "1-yr ≈ 30–40% off the current on-demand rate": we take 35% off, effective with the "now" prices.
- A100-PCIE-40GB has no AWS instance; p4d (8×A100 40GB SXM4) is the nearest listed A100 40GB, as in the demo.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal

from scheduler.core.model.vocabulary import CapacityTier

BEFORE_CUTS = date(2025, 3, 14)
AFTER_CUTS = date(2025, 6, 1)
RESERVED_DISCOUNT = Decimal("0.35")
_FOUR_PLACES = Decimal("0.0001")


@dataclass(frozen=True, slots=True)
class DefaultPrice:
    gpu_model: str
    tier: str
    price_per_gpu_hour: Decimal
    effective_from: date
    source: str


def _q(value: Decimal) -> Decimal:
    return value.quantize(_FOUR_PLACES)


# (catalog model, AWS instance, before-cut on-demand, now on-demand, spot low, spot high), per GPU-hour.
_AWS: tuple[tuple[str, str, Decimal, Decimal, Decimal, Decimal], ...] = (
    ("A100-SXM4-40GB", "p4d.24xlarge", Decimal("4.10"), Decimal("2.74"), Decimal("0.31"), Decimal("1.02")),
    (
        "A100-PCIE-40GB",
        "p4d.24xlarge (nearest A100 40GB)",
        Decimal("4.10"),
        Decimal("2.74"),
        Decimal("0.31"),
        Decimal("1.02"),
    ),
    ("A100-SXM4-80GB", "p4de.24xlarge", Decimal("5.12"), Decimal("3.43"), Decimal("1.08"), Decimal("1.25")),
    ("H100-SXM5-80GB", "p5.48xlarge", Decimal("12.29"), Decimal("6.88"), Decimal("2.20"), Decimal("3.22")),
    # p5en's per-instance figures ÷ 8; spot "≈$27.2" is a single figure, not a range.
    (
        "H200-SXM-141GB",
        "p5en.48xlarge",
        Decimal("84.80") / 8,
        Decimal("63.296") / 8,
        Decimal("27.2") / 8,
        Decimal("27.2") / 8,
    ),
)


def default_prices() -> tuple[DefaultPrice, ...]:
    """Every default catalog row (``docs/gpu-facts.md``, Prices), with its source and date."""
    rows: list[DefaultPrice] = []
    for model, instance, before, now, spot_low, spot_high in _AWS:
        facts = f"docs/gpu-facts.md Prices, AWS us-east-1 {instance}"
        rows += [
            DefaultPrice(
                model,
                CapacityTier.ON_DEMAND,
                _q(before),
                BEFORE_CUTS,
                f"{facts}, on-demand before cuts (Pricing API, 2025-03-14)",
            ),
            DefaultPrice(
                model,
                CapacityTier.ON_DEMAND,
                _q(now),
                AFTER_CUTS,
                f"{facts}, on-demand now (after the June 2025 cut ⚠ date = month of the cut)",
            ),
            DefaultPrice(
                model,
                CapacityTier.SPOT,
                _q((spot_low + spot_high) / 2),
                AFTER_CUTS,
                f"{facts}, spot now, midpoint of ${spot_low:.2f}–{spot_high:.2f} by AZ",
            ),
            DefaultPrice(
                model,
                CapacityTier.RESERVED,
                _q(now * (1 - RESERVED_DISCOUNT)),
                AFTER_CUTS,
                f"{facts}, on-demand now − 35% (commitments ⚠: 1-yr ≈ 30–40% off)",
            ),
        ]
    return tuple(rows)


def utc_day(at: datetime) -> date:
    return at.astimezone(UTC).date()


class PriceBook:
    """The catalog in memory: the price in force for (GPU model, tier) on a day. Build one per close or report."""

    def __init__(self, rows: Iterable[tuple[str, str, date, Decimal]]) -> None:
        series: dict[tuple[str, str], list[tuple[date, Decimal]]] = {}
        for model, tier, effective_from, price in rows:
            series.setdefault((model, tier), []).append((effective_from, price))
        self._days: dict[tuple[str, str], list[date]] = {}
        self._prices: dict[tuple[str, str], list[Decimal]] = {}
        for key, points in series.items():
            points.sort()
            self._days[key] = [day for day, _ in points]
            self._prices[key] = [price for _, price in points]

    def price_at(self, *, gpu_model: str, tier: str, at: datetime) -> Decimal | None:
        """The price in force at ``at`` (the latest row effective on or before its UTC day), or None."""
        days = self._days.get((gpu_model, tier))
        if not days:
            return None
        index = bisect.bisect_right(days, utc_day(at)) - 1
        return self._prices[(gpu_model, tier)][index] if index >= 0 else None

    def changes_between(self, *, gpu_model: str, tier: str, start: datetime, end: datetime) -> list[date]:
        """Days in ``(start, end)`` on which the price of (model, tier) changes: where capacity must be split."""
        return [
            day
            for day in self._days.get((gpu_model, tier), [])
            if utc_day(start) < day and datetime(day.year, day.month, day.day, tzinfo=UTC) < end
        ]
