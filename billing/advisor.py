"""Procurement advisor: which capacity to buy, and when owning GPUs beats renting them (pure functions).

**Tier mix** (:func:`advise_mix`), over an hourly demand series ``d_h`` (average GPUs held in hour ``h``) of
which ``s_h ≤ d_h`` could run on spot (checkpointed, preemptible training), with per-GPU-hour prices
``p_r`` (reserved), ``p_o`` (on-demand), ``p_s`` (spot):

- **Reserved baseline** ``R`` = the ``q``-th percentile of ``d`` (linear interpolation between ranks),
  rounded up to the purchase unit. Default ``q = 100 × (1 − p_r / p_o)``: a reserved GPU costs ``p_r`` every
  hour and saves ``p_o`` in each hour it is busy, so it pays off when busy more than ``p_r / p_o`` of the
  time, i.e. for the demand level exceeded in at least that share of hours (the newsvendor critical ratio).
- **Above the baseline**, each hour's excess ``e_h = max(0, d_h − R)`` goes to spot as far as it is
  spot-eligible, ``spot_h = min(e_h, s_h)`` (reserved capacity, already paid, takes the other work first),
  and the rest to on-demand, ``od_h = e_h − spot_h``; the on-demand peak is ``max od_h``.
- **Costs**: reserved ``R × H × p_r`` (paid whether used or not); spot ``Σ spot_h × (1 + ℓ) × p_s`` where
  ``ℓ`` is the share of spot work lost to interruptions and redone (from the ledger's lost work); on-demand
  ``Σ od_h × p_o``. Compared with all on-demand, ``Σ d_h × p_o``.

**Colocation break-even** (:func:`breakeven`), one server of ``g`` GPUs bought for ``capex``:

- own opex / month = ``kW_max × colo $/kW-month`` (space and power are sold by the provisioned kW)
  ``+ kW_avg × hours × PUE × energy $/kWh + support``;
- cloud / month = ``cloud $/h × hours × u`` on demand (paid only while used, at utilization ``u``), or
  ``cloud $/h × hours`` for a commitment (paid regardless);
- **break-even months** = ``capex ÷ (cloud / month − own opex / month)``; none when the cloud is cheaper
  than running the server at all;
- own cost per used GPU-hour = ``(opex + capex / amortization months) ÷ (g × hours × u)``.
Not included (as in ``docs/gpu-facts.md``, Ownership inputs and break-even): staff, spares and failures, financing,
resale value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace

from billing.errors import AdvisorInputError


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0–100) with linear interpolation between closest ranks (numpy's default)."""
    if not values:
        raise AdvisorInputError("the demand series is empty: give at least one hour of demand")
    if not 0 <= q <= 100:
        raise AdvisorInputError(f"percentile {q} is outside 0–100")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class TierPrices:
    reserved: float
    on_demand: float
    spot: float

    def check(self) -> None:
        for name, value in (("reserved", self.reserved), ("on-demand", self.on_demand), ("spot", self.spot)):
            if not math.isfinite(value) or value < 0:
                raise AdvisorInputError(f"the {name} price must be a number ≥ 0 USD per GPU-hour, got {value}")
        if self.on_demand <= 0:
            raise AdvisorInputError("the on-demand price must be above 0: every other tier is compared with it")


def critical_percentile(prices: TierPrices) -> float:
    """``100 × (1 − p_r / p_o)``, clamped to 0–100: the demand level worth reserving (module docstring)."""
    return min(100.0, max(0.0, 100.0 * (1 - prices.reserved / prices.on_demand)))


@dataclass(frozen=True)
class MixAdvice:
    hours: int
    percentile: float
    baseline_gpus: float
    reserved_gpu_hours: float  # paid
    reserved_used_gpu_hours: float
    spot_gpu_hours: float  # work placed on spot (before rework)
    spot_rework_gpu_hours: float
    on_demand_gpu_hours: float
    on_demand_peak_gpus: float
    demand_gpu_hours: float
    reserved_cost: float
    spot_cost: float
    on_demand_cost: float
    mix_cost: float
    all_on_demand_cost: float
    savings: float
    savings_pct: float | None
    reserved_utilization: float | None
    spot_share: float | None  # of demand GPU-hours
    hourly_reserved: tuple[float, ...]
    hourly_spot: tuple[float, ...]
    hourly_on_demand: tuple[float, ...]

    def as_dict(self, *, hourly: bool = False) -> dict[str, object]:
        data = asdict(self)
        if not hourly:
            for key in ("hourly_reserved", "hourly_spot", "hourly_on_demand"):
                data.pop(key)
        return data


def advise_mix(
    *,
    demand_gpus: Sequence[float],
    spot_eligible_gpus: Sequence[float] | None,
    prices: TierPrices,
    percentile_q: float | None = None,
    purchase_unit_gpus: int = 1,
    spot_lost_fraction: float = 0.0,
) -> MixAdvice:
    """The reserved / spot / on-demand mix for ``demand_gpus`` and its cost against all on-demand."""
    prices.check()
    if purchase_unit_gpus < 1:
        raise AdvisorInputError(f"the purchase unit must be at least 1 GPU, got {purchase_unit_gpus}")
    if not 0 <= spot_lost_fraction < 1:
        raise AdvisorInputError(f"the share of spot work lost must be in [0, 1), got {spot_lost_fraction}")
    demand = [float(d) for d in demand_gpus]
    if any(not math.isfinite(d) or d < 0 for d in demand):
        raise AdvisorInputError("demand must be finite numbers of GPUs ≥ 0 for every hour")
    eligible = [0.0] * len(demand) if spot_eligible_gpus is None else [float(s) for s in spot_eligible_gpus]
    if len(eligible) != len(demand):
        raise AdvisorInputError(
            f"the spot-eligible series has {len(eligible)} hours but demand has {len(demand)}: give both per hour"
        )
    q = critical_percentile(prices) if percentile_q is None else float(percentile_q)
    level = percentile(demand, q)
    baseline = math.ceil(level / purchase_unit_gpus - 1e-9) * purchase_unit_gpus if level > 0 else 0
    reserved_h, spot_h, od_h = [], [], []
    for d, s in zip(demand, eligible, strict=True):
        excess = max(0.0, d - baseline)
        spot = min(excess, max(0.0, min(s, d)))
        reserved_h.append(min(d, baseline))
        spot_h.append(spot)
        od_h.append(excess - spot)
    hours = len(demand)
    spot_work = sum(spot_h)
    rework = spot_work * spot_lost_fraction / (1 - spot_lost_fraction)
    reserved_cost = baseline * hours * prices.reserved
    spot_cost = (spot_work + rework) * prices.spot
    on_demand_cost = sum(od_h) * prices.on_demand
    mix = reserved_cost + spot_cost + on_demand_cost
    total_demand = sum(demand)
    all_od = total_demand * prices.on_demand
    return MixAdvice(
        hours=hours,
        percentile=q,
        baseline_gpus=float(baseline),
        reserved_gpu_hours=float(baseline * hours),
        reserved_used_gpu_hours=sum(reserved_h),
        spot_gpu_hours=spot_work,
        spot_rework_gpu_hours=rework,
        on_demand_gpu_hours=sum(od_h),
        on_demand_peak_gpus=max(od_h, default=0.0),
        demand_gpu_hours=total_demand,
        reserved_cost=reserved_cost,
        spot_cost=spot_cost,
        on_demand_cost=on_demand_cost,
        mix_cost=mix,
        all_on_demand_cost=all_od,
        savings=all_od - mix,
        savings_pct=(all_od - mix) / all_od * 100 if all_od else None,
        reserved_utilization=sum(reserved_h) / (baseline * hours) if baseline and hours else None,
        spot_share=spot_work / total_demand if total_demand else None,
        hourly_reserved=tuple(reserved_h),
        hourly_spot=tuple(spot_h),
        hourly_on_demand=tuple(od_h),
    )


@dataclass(frozen=True)
class BreakevenInputs:
    """One server and the cloud it is compared with. Defaults: ``docs/gpu-facts.md``, Ownership inputs and break-even
    (DGX/HGX H100 against AWS p5 on-demand now, from its Prices) — $300K, 10.2 kW max / 7.5 kW average, PUE 1.3,
    $0.08/kWh, $184.06/kW-month (CBRE H2 2024, published 2025-02-26), ≈$2,500/month support ⚠, 36 months, 730 h/month,
    $55.04/h."""

    capex_usd: float = 300_000.0
    gpus: int = 8
    power_max_kw: float = 10.2
    power_avg_kw: float = 7.5
    pue: float = 1.3
    energy_usd_per_kwh: float = 0.08
    colo_usd_per_kw_month: float = 184.06
    support_usd_per_month: float = 2_500.0
    amortization_months: int = 36
    hours_per_month: float = 730.0
    cloud_usd_per_hour: float = 55.04
    cloud_committed: bool = False  # a commitment is paid whether used or not
    utilization: float = 1.0

    def check(self) -> None:
        positive = {
            "capex_usd": self.capex_usd,
            "gpus": self.gpus,
            "power_max_kw": self.power_max_kw,
            "hours_per_month": self.hours_per_month,
            "amortization_months": self.amortization_months,
            "cloud_usd_per_hour": self.cloud_usd_per_hour,
        }
        for name, value in positive.items():
            if not math.isfinite(value) or value <= 0:
                raise AdvisorInputError(f"{name} must be above 0, got {value}")
        for name, value in (
            ("power_avg_kw", self.power_avg_kw),
            ("energy_usd_per_kwh", self.energy_usd_per_kwh),
            ("colo_usd_per_kw_month", self.colo_usd_per_kw_month),
            ("support_usd_per_month", self.support_usd_per_month),
        ):
            if not math.isfinite(value) or value < 0:
                raise AdvisorInputError(f"{name} must be 0 or more, got {value}")
        if self.power_avg_kw > self.power_max_kw:
            raise AdvisorInputError(
                f"average power {self.power_avg_kw} kW is above the maximum {self.power_max_kw} kW: swap them"
            )
        if not 1 <= self.pue <= 5:
            raise AdvisorInputError(f"PUE must be between 1 and 5 (1.3 is typical), got {self.pue}")
        if not 0 < self.utilization <= 1:
            raise AdvisorInputError(f"utilization must be above 0 and at most 1 (100 %), got {self.utilization}")


@dataclass(frozen=True)
class Breakeven:
    utilization: float
    colo_usd_per_month: float
    energy_usd_per_month: float
    support_usd_per_month: float
    opex_usd_per_month: float
    capex_usd_per_month: float
    own_usd_per_month: float
    cloud_usd_per_month: float
    months: float | None  # None: never (the cloud costs less than running the server)
    own_usd_per_used_gpu_hour: float
    cloud_usd_per_used_gpu_hour: float


def breakeven(inputs: BreakevenInputs) -> Breakeven:
    """Break-even of owning ``inputs``' server at ``inputs.utilization`` (formulas in the module docstring)."""
    inputs.check()
    colo = inputs.power_max_kw * inputs.colo_usd_per_kw_month
    energy = inputs.power_avg_kw * inputs.hours_per_month * inputs.pue * inputs.energy_usd_per_kwh
    opex = colo + energy + inputs.support_usd_per_month
    capex_monthly = inputs.capex_usd / inputs.amortization_months
    busy = 1.0 if inputs.cloud_committed else inputs.utilization
    cloud = inputs.cloud_usd_per_hour * inputs.hours_per_month * busy
    margin = cloud - opex
    used_gpu_hours = inputs.gpus * inputs.hours_per_month * inputs.utilization
    return Breakeven(
        utilization=inputs.utilization,
        colo_usd_per_month=colo,
        energy_usd_per_month=energy,
        support_usd_per_month=inputs.support_usd_per_month,
        opex_usd_per_month=opex,
        capex_usd_per_month=capex_monthly,
        own_usd_per_month=opex + capex_monthly,
        cloud_usd_per_month=cloud,
        months=inputs.capex_usd / margin if margin > 0 else None,
        own_usd_per_used_gpu_hour=(opex + capex_monthly) / used_gpu_hours,
        cloud_usd_per_used_gpu_hour=cloud / used_gpu_hours,
    )


def breakeven_curve(inputs: BreakevenInputs, *, steps: int = 20) -> list[Breakeven]:
    """:func:`breakeven` at utilizations 1/steps, 2/steps, …, 100 %."""
    return [breakeven(replace(inputs, utilization=i / steps)) for i in range(1, steps + 1)]
