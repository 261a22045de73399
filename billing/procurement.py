"""Glue between the database and the pure advisor: the ledger's demand history and the prices in force, then
``advise_mix`` (on-demand for peaks priced with the provisioning model, ``scheduler/core/gpus/arrival.py``); the
cycles' record of production wait and the burst limits in force, then
``advise_production_wait``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from billing.advisor import (
    AdvisorInputError,
    ClassWaitAdvice,
    MixAdvice,
    PeakProvisioning,
    TierPrices,
    WaitRecord,
    advise_mix,
    advise_production_wait,
)
from billing.intervals import floor_hour
from billing.models import PRODUCTION_WAIT_KEPT_DAYS, ProductionWait
from billing.selectors import DemandSeries, demand_series
from billing.services import price_book_load
from scheduler.core import Policy, arrival_model
from scheduler.core.gpus.units import UNITS_PER_GPU
from scheduler.core.model.vocabulary import CapacityTier
from teams.models import Quota

MAX_HISTORY_DAYS = PRODUCTION_WAIT_KEPT_DAYS  # a year and a day, for the ledger's demand and production wait alike
WAIT_DAYS = 7  # the advice's default period: the week the sentence speaks of
PURCHASE_UNIT_GPUS = 8  # one server of 8 GPUs (an HGX board, a p5): the advisor page's default too


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


def peak_provisioning(gpu_model: str) -> PeakProvisioning | None:
    """The provisioning model of ``gpu_model`` as the advisor reads it: the documented arrival and stockout of its
    class (``scheduler/core/gpus/arrival.py``, one request of one node), released after the engine policy's idle
    time; None for a model the catalog does not know (on-demand is then priced as instantly there)."""
    try:
        model = arrival_model(gpu_model)
    except KeyError:
        return None
    return PeakProvisioning(
        arrival_s=model.expected_s,
        stockout=model.stockout(1),
        fail_after_s=model.fail_after_s,
        release_idle_s=Policy().release_idle_s,
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
    """Advise on ``gpu_model`` from the ledger's last ``history_days`` days of closed hours, on-demand for peaks
    priced with the model's provisioning (:func:`peak_provisioning`)."""
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
        provisioning=peak_provisioning(gpu_model),
    )
    return ProcurementAdvice(series=series, prices=prices, spot_lost_fraction=lost, advice=advice)


@dataclass(frozen=True)
class ProductionWaitAdvice:
    start: datetime
    end: datetime
    period: str
    purchase_unit_gpus: int
    classes: tuple[ClassWaitAdvice, ...]


def burst_limits_now(teams: set[str]) -> dict[tuple[str, str], float]:
    """(team slug, class or ``any``) → the team's burst limit in force there now (never below its guarantee)."""
    rows = Quota.objects.filter(team__slug__in=teams).values_list(
        "team__slug", "gpu_class", "burst_gpus", "guaranteed_gpus"
    )
    return {(slug, gpu_class): float(max(burst, guaranteed)) for slug, gpu_class, burst, guaranteed in rows}


def production_wait_advise(
    *, now: datetime, days: int = WAIT_DAYS, purchase_unit_gpus: int = PURCHASE_UNIT_GPUS
) -> ProductionWaitAdvice:
    """Advise from the production wait recorded in the last ``days`` days (docs/billing.md, Procurement advisor)."""
    if not 1 <= days <= MAX_HISTORY_DAYS:
        raise AdvisorInputError(
            f"the period must be 1 to {MAX_HISTORY_DAYS} days, got {days}: how many days of production wait to "
            f"read ({WAIT_DAYS} is the default)"
        )
    start = now - timedelta(days=days)
    rows = ProductionWait.objects.filter(at__gte=start, at__lt=now).values_list(
        "at", "gpu_class", "cause", "team__slug", "gpu_units", "short_units", "scope", "need_units", "seconds"
    )
    records = [
        WaitRecord(
            at=at.timestamp(),
            gpu_class=gpu_class,
            cause=cause,
            team=team or "",
            gpus=units / UNITS_PER_GPU,
            seconds=seconds,
            short_gpus=short / UNITS_PER_GPU,
            scope=scope,
            need_gpus=need / UNITS_PER_GPU,
        )
        for at, gpu_class, cause, team, units, short, scope, need, seconds in rows
    ]
    limits = burst_limits_now({r.team for r in records if r.team})
    period = "in the last week" if days == WAIT_DAYS else f"in the last {days} days"
    classes = advise_production_wait(records, purchase_unit_gpus=purchase_unit_gpus, period=period, burst_limits=limits)
    return ProductionWaitAdvice(
        start=start, end=now, period=period, purchase_unit_gpus=purchase_unit_gpus, classes=classes
    )
