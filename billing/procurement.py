"""Glue between the ledger and the pure advisor: demand history and prices in force, then ``advise_mix``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from billing.advisor import AdvisorInputError, MixAdvice, TierPrices, advise_mix
from billing.intervals import floor_hour
from billing.selectors import DemandSeries, demand_series
from billing.services import price_book_load
from scheduler.core.model.vocabulary import CapacityTier

MAX_HISTORY_DAYS = 366


@dataclass(frozen=True)
class ProcurementAdvice:
    series: DemandSeries
    prices: TierPrices
    spot_lost_fraction: float
    advice: MixAdvice


def catalog_prices(*, gpu_model: str, at: datetime) -> TierPrices:
    """The catalog's reserved / on-demand / spot prices in force at ``at``; :class:`AdvisorInputError` if any
    is missing (say which, and where to add it)."""
    book = price_book_load()
    found = {tier: book.price_at(gpu_model=gpu_model, tier=tier, at=at) for tier in CapacityTier}
    prices = {tier: price for tier, price in found.items() if price is not None}
    missing = [str(tier) for tier in found if tier not in prices]
    if missing:
        raise AdvisorInputError(
            f"the price catalog has no {', '.join(missing)} price for {gpu_model} on {at:%Y-%m-%d}: "
            "add it under Billing › GPU prices, or give the price explicitly"
        )
    return TierPrices(
        reserved=float(prices[CapacityTier.RESERVED]),
        on_demand=float(prices[CapacityTier.ON_DEMAND]),
        spot=float(prices[CapacityTier.SPOT]),
    )


def procurement_advise(
    *,
    gpu_model: str,
    now: datetime,
    history_days: int,
    percentile_q: float | None = None,
    purchase_unit_gpus: int = 1,
    prices: TierPrices | None = None,
    spot_lost_fraction: float | None = None,
) -> ProcurementAdvice:
    """Advise on ``gpu_model`` from the ledger's last ``history_days`` days of closed hours."""
    if not 1 <= history_days <= MAX_HISTORY_DAYS:
        raise AdvisorInputError(
            f"the history must be 1 to {MAX_HISTORY_DAYS} days, got {history_days}: how many days of the ledger "
            "to learn from (30 is the default)"
        )
    end = floor_hour(now)
    start = end - timedelta(days=history_days)
    series = demand_series(gpu_model=gpu_model, start=start, end=end)
    if not any(series.demand_gpus):
        raise AdvisorInputError(
            f"the ledger has no {gpu_model} usage between {start:%Y-%m-%d} and {end:%Y-%m-%d %H:%M}: "
            "pick another GPU model or a longer history"
        )
    prices = prices or catalog_prices(gpu_model=gpu_model, at=end)
    lost = spot_lost_fraction if spot_lost_fraction is not None else (series.lost_fraction or 0.0)
    lost = min(lost, 0.95)
    advice = advise_mix(
        demand_gpus=series.demand_gpus,
        spot_eligible_gpus=series.spot_eligible_gpus,
        prices=prices,
        percentile_q=percentile_q,
        purchase_unit_gpus=purchase_unit_gpus,
        spot_lost_fraction=lost,
    )
    return ProcurementAdvice(series=series, prices=prices, spot_lost_fraction=lost, advice=advice)
