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
  and the rest to on-demand, ``od_h = e_h − spot_h``; the on-demand peak is ``max od_h``. Spot is advised
  only while a useful spot GPU-hour, counting the work redone, is cheaper than on-demand
  (``p_s ÷ (1 − ℓ) < p_o``) and at most ``MAX_SPOT_LOST_FRACTION`` (half) of spot work is lost; otherwise
  nothing goes to spot and the advice says why (:func:`spot_declined_reason`).
- **Costs**: reserved ``R × H × p_r`` (paid whether used or not); spot ``Σ spot_h × (1 + ℓ) × p_s`` where
  ``ℓ`` is the share of spot work lost to interruptions and redone (from the ledger's lost work); on-demand
  ``Σ od_h × p_o``. Compared with all on-demand, ``Σ d_h × p_o``.
- **On-demand for peaks, asked for and given back** (with a :class:`PeakProvisioning`: the provisioning model of
  ``scheduler/core/gpus/arrival.py``, the same the engine's ETAs and B4 use): on-demand GPUs are requested when
  the on-demand level rises, ``r_h = max(0, od_h − od_{h−1})``, and released when it falls,
  ``f_h = max(0, od_{h−1} − od_h)`` (``od_{−1} = 0``). They are billed from request to release: each requested
  GPU that arrives also pays its boot, ``(1 − p) × a`` hours (``a`` the expected arrival, ``p`` the stockout
  probability: a request that stocks out is billed nothing), and each released GPU its idle time before release,
  ``i`` hours (the policy's ``release_idle_s``). So on-demand costs ``(Σ od_h + Σ r_h (1 − p) a + Σ f_h i) × p_o``.
  The peak's work waits for its nodes: ``Σ r_h × (a + p × t_f)`` GPU-hours start late (``t_f`` the time after
  which a stocked-out request is known to have failed and is asked again), of which ``Σ r_h × p × t_f`` are the
  share lost to stockouts. Without a model, on-demand is priced as instantly there and given back at once.

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

**Production wait** (:func:`advise_production_wait`), from the cycles at which production waited although no
placement could be found for it even evicting lower-priority work (:class:`WaitRecord`, one per cycle, GPU class,
cause and, for ``burst``, team): per GPU class, the hours production waited (a cycle counts once, whatever waited
in it), and per cause the peak and the time-weighted p95 of the GPUs that waited —

- ``held``: no room for it even evicting lower work; what counts for a purchase is production's demand on the
  class (what it held plus what waited) above the class's capacity, ``short_gpus``: reserve ``M`` more GPUs,
  ``M`` = the time-weighted p95 of the shortfall over the cycles production waited, rounded up to the purchase
  unit (the rare peak above it is not worth a purchase). A wait with no shortfall (a MIG-split GPU not
  reconfigured, free GPUs scattered over nodes) is reported with nothing to reserve: GPUs would not end it;
- ``burst``: the team's burst limit refused it while room existed: raise that limit (the one on the class, or
  the team's overall one: ``scope``, whichever refused it) to the p95 of what the team's production needed under
  it (what it held there plus what waited, ``need_gpus``), rounded up to whole GPUs — unless the limit in force
  now is already that high.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
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


# Ten times the dearest GPU-hour of the price catalog: anything above is a typo (a whole server's price per hour).
MAX_PRICE_PER_GPU_HOUR = 100.0
# Above this share of spot work lost, spot is never advised (docs/billing.md, Procurement advisor): half the
# work redone means the interruptions, not the price, decide the outcome, and the history is too thin a guide.
MAX_SPOT_LOST_FRACTION = 0.5
MAX_PURCHASE_UNIT_GPUS = 64


@dataclass(frozen=True)
class TierPrices:
    reserved: float
    on_demand: float
    spot: float

    def check(self) -> None:
        for name, value in (("reserved", self.reserved), ("on-demand", self.on_demand), ("spot", self.spot)):
            if not math.isfinite(value) or not 0 <= value <= MAX_PRICE_PER_GPU_HOUR:
                raise AdvisorInputError(
                    f"the {name} price must be a number from 0 to {MAX_PRICE_PER_GPU_HOUR:g} USD per GPU-hour, "
                    f"got {value:g}: give the price of one GPU for one hour"
                )
        if self.on_demand <= 0:
            raise AdvisorInputError("the on-demand price must be above 0: every other tier is compared with it")


def critical_percentile(prices: TierPrices) -> float:
    """``100 × (1 − p_r / p_o)``, clamped to 0–100: the demand level worth reserving (module docstring)."""
    return min(100.0, max(0.0, 100.0 * (1 - prices.reserved / prices.on_demand)))


@dataclass(frozen=True)
class PeakProvisioning:
    """How on-demand capacity for peaks arrives and leaves (module docstring), in seconds and a probability."""

    arrival_s: float  # expected seconds from a node request to a ready node
    stockout: float  # the probability that a request fails for want of capacity
    fail_after_s: float  # a failed request is known to have failed this long after it was made
    release_idle_s: float  # an emptied node stands this long before it is released

    def check(self) -> None:
        for name in ("arrival_s", "fail_after_s", "release_idle_s"):
            value = getattr(self, name)
            if not math.isfinite(value) or not 0 <= value <= MAX_PROVISIONING_S:
                raise AdvisorInputError(
                    f"{name.replace('_', ' ')} must be 0 to {MAX_PROVISIONING_S:g} seconds, got {value:g}: "
                    "give the seconds of one node request"
                )
        if not 0 <= self.stockout < 1:
            raise AdvisorInputError(
                f"the stockout probability must be in [0, 1), got {self.stockout:g}: the share of node requests "
                "that fail for want of capacity"
            )


MAX_PROVISIONING_S = 86_400.0  # a day: a node that takes longer is not capacity for a peak


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
    spot_declined: str = ""  # why nothing goes to spot (spot_declined_reason); "" when spot is advised
    # On-demand for peaks through the provisioning model (module docstring); zeros and None without one.
    on_demand_requested_gpu_hours: float = 0.0  # Σ r_h: GPUs asked for at the rises (each for an hour)
    on_demand_boot_gpu_hours: float = 0.0  # billed while booting, request to ready
    on_demand_idle_gpu_hours: float = 0.0  # billed while empty, before release
    on_demand_late_gpu_hours: float = 0.0  # peak work that waits for its nodes
    on_demand_stockout_gpu_hours: float = 0.0  # of which waiting on stocked-out requests
    provisioning: PeakProvisioning | None = None

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
    provisioning: PeakProvisioning | None = None,
) -> MixAdvice:
    """The reserved / spot / on-demand mix for ``demand_gpus`` and its cost against all on-demand; with
    ``provisioning``, on-demand for peaks is billed from request to release (module docstring)."""
    prices.check()
    if provisioning is not None:
        provisioning.check()
    if not 1 <= purchase_unit_gpus <= MAX_PURCHASE_UNIT_GPUS:
        raise AdvisorInputError(
            f"the purchase unit must be 1 to {MAX_PURCHASE_UNIT_GPUS} GPUs, got {purchase_unit_gpus}: "
            "give the GPUs of one reserved instance (8 for a p5)"
        )
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
    declined = spot_declined_reason(prices, spot_lost_fraction)
    if declined:
        eligible = [0.0] * len(demand)
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
    peaks = _peaks(od_h, provisioning)
    on_demand_cost = (sum(od_h) + peaks["boot"] + peaks["idle"]) * prices.on_demand
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
        spot_declined=declined,
        on_demand_requested_gpu_hours=peaks["requested"],
        on_demand_boot_gpu_hours=peaks["boot"],
        on_demand_idle_gpu_hours=peaks["idle"],
        on_demand_late_gpu_hours=peaks["late"],
        on_demand_stockout_gpu_hours=peaks["stockout"],
        provisioning=provisioning,
    )


def _peaks(od_h: Sequence[float], provisioning: PeakProvisioning | None) -> dict[str, float]:
    """GPU-hours of on-demand asked for, booting, idle before release, late and late on stockouts (module doc)."""
    rises = [max(0.0, now - before) for before, now in zip([0.0, *od_h], od_h, strict=False)]
    falls = [max(0.0, before - now) for before, now in zip([0.0, *od_h], od_h, strict=False)]
    requested = sum(rises)
    if provisioning is None:
        return {"requested": requested, "boot": 0.0, "idle": 0.0, "late": 0.0, "stockout": 0.0}
    p = provisioning
    stockout = requested * p.stockout * p.fail_after_s / 3600.0
    return {
        "requested": requested,
        "boot": requested * (1 - p.stockout) * p.arrival_s / 3600.0,
        "idle": sum(falls) * p.release_idle_s / 3600.0,
        "late": requested * p.arrival_s / 3600.0 + stockout,
        "stockout": stockout,
    }


def reserved_use_sentence(advice: MixAdvice) -> str:
    """How busy the reserved baseline is, as a whole sentence, also when nothing is reserved."""
    if advice.reserved_utilization is None:
        return "nothing is reserved: demand at this percentile is 0 GPUs, so no reserved GPU would be busy enough"
    return f"reserved GPUs are busy {advice.reserved_utilization:.0%} of the time"


def spot_declined_reason(prices: TierPrices, lost_fraction: float) -> str:
    """Why no work is advised onto spot ("" when spot is advised).

    Spot is advised only while a useful GPU-hour on it, counting the work redone, costs less than on demand:
    ``p_s ÷ (1 − ℓ) < p_o``; and never when more than ``MAX_SPOT_LOST_FRACTION`` of spot work was lost, however
    cheap spot is, because then the interruptions rather than the price decide what the work costs.
    """
    if lost_fraction > MAX_SPOT_LOST_FRACTION:
        return (
            f"{lost_fraction:.0%} of spot work was lost, above the {MAX_SPOT_LOST_FRACTION:.0%} at which spot is "
            "advised at all: make the spot-eligible jobs checkpoint more often first"
        )
    useful = prices.spot / (1 - lost_fraction)
    if useful >= prices.on_demand:
        return (
            f"with {lost_fraction:.0%} of spot work redone a useful spot GPU-hour costs ${useful:.4f}, "
            f"not less than on-demand's ${prices.on_demand:.4f}"
        )
    return ""


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
        for name, bound in BREAKEVEN_RANGES.items():
            value = getattr(self, name)
            if not math.isfinite(value) or not bound.low <= value <= bound.high or (bound.open_low and value == 0):
                raise AdvisorInputError(bound.message(name, value))
        if self.power_avg_kw > self.power_max_kw:
            raise AdvisorInputError(
                f"average power {self.power_avg_kw} kW is above the maximum {self.power_max_kw} kW: swap them"
            )


@dataclass(frozen=True)
class Bound:
    """The range an input must be in, and the hint of what a sensible value is (the form and the CLI share it).

    The ranges are wide enough for any real server and cloud (ten times today's largest), and narrow enough
    that a typo (1e308 for a server price) is refused instead of producing a break-even of 1e303 months.
    """

    low: float
    high: float
    unit: str
    hint: str
    open_low: bool = False  # the low end itself is refused (above 0, not 0 or more)

    def message(self, name: str, value: float) -> str:
        above = f"above {number_text(self.low)}" if self.open_low else f"at least {number_text(self.low)}"
        return f"{name} must be {above} and at most {number_text(self.high)} {self.unit}, got {value:g}: {self.hint}"


def number_text(value: float) -> str:
    """``10,000,000`` rather than ``1e+07``, ``0.01`` as it is: how a range reads in a message."""
    return f"{value:,.0f}" if value == int(value) else f"{value:g}"


BREAKEVEN_RANGES: dict[str, Bound] = {
    "capex_usd": Bound(1_000, 10_000_000, "USD", "the purchase price of one server (an 8×H100 is about 300,000)"),
    "gpus": Bound(1, 64, "GPUs", "the GPUs in one server (8 for an HGX board)"),
    "power_max_kw": Bound(0.1, 200, "kW", "one server's maximum draw (10.2 kW for an 8×H100)"),
    "power_avg_kw": Bound(0, 200, "kW", "one server's average draw (7.5 kW for an 8×H100)"),
    "pue": Bound(1, 5, "", "power usage effectiveness; 1.3 is typical"),
    "energy_usd_per_kwh": Bound(0, 5, "USD/kWh", "the energy price (0.08 is typical)"),
    "colo_usd_per_kw_month": Bound(0, 5_000, "USD per kW-month", "the colocation rate (about 184)"),
    "support_usd_per_month": Bound(0, 1_000_000, "USD/month", "support and operations for one server"),
    "amortization_months": Bound(1, 120, "months", "months over which the server is written off (36 is typical)"),
    "hours_per_month": Bound(1, 744, "hours", "hours in a month (730 on average)"),
    "cloud_usd_per_hour": Bound(
        0, 10_000, "USD/hour", "the cloud's price for the same GPUs (55.04 for AWS p5)", open_low=True
    ),
    "utilization": Bound(0, 1, "(100 %)", "utilization is the share of hours the GPUs are busy", open_low=True),
}


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


# Production wait (module doc, Production wait).
WAIT_HELD = "held"
WAIT_BURST = "burst"
WAIT_CAUSES = (WAIT_HELD, WAIT_BURST)
WAIT_PERCENTILE = 95.0
OVERALL = "any"  # the quota class that bounds a team over every class


def weighted_percentile(values: Sequence[float], weights: Sequence[float], q: float) -> float:
    """The smallest of ``values`` at or below which lies ``q`` % of the total weight (a weighted nearest rank:
    each value is a level of demand, each weight the time it lasted; a level held for no time never counts)."""
    if len(values) != len(weights):
        raise AdvisorInputError(f"give one weight per value: {len(values)} values, {len(weights)} weights")
    if not values:
        raise AdvisorInputError("there is no production wait to weigh: the period has no waiting cycle")
    if not 0 <= q <= 100:
        raise AdvisorInputError(f"percentile {q} is outside 0–100")
    if any(not math.isfinite(v) for v in values) or any(not math.isfinite(w) or w < 0 for w in weights):
        raise AdvisorInputError("values and weights must be finite, and weights ≥ 0 (seconds)")
    total = sum(weights)
    if total <= 0:
        raise AdvisorInputError("the values were held for no time: give each its seconds")
    pairs = sorted((v, w) for v, w in zip(values, weights, strict=True) if w > 0)
    reached = 0.0
    for value, weight in pairs:
        reached += weight
        if reached >= total * q / 100 - 1e-9:
            return value
    return pairs[-1][0]  # pragma: no cover - the last pair always reaches the total


@dataclass(frozen=True)
class WaitRecord:
    """One cycle's production wait on one GPU class for one cause: ``gpus`` GPU-equivalents waited for
    ``seconds`` (the cycle's length). ``held`` only: ``short_gpus``, how far production's demand exceeded the
    class's capacity. ``burst`` only: ``team``, whose limit refused them, ``scope``, the class that limit is set
    on (or ``any``, the team's overall limit), and ``need_gpus``, the team's production under that limit (what
    it held plus what waited): the limit that would have let it all run."""

    at: float  # the cycle's instant (epoch seconds): records of one cycle share it
    gpu_class: str
    cause: str  # held | burst
    team: str
    gpus: float
    seconds: float
    short_gpus: float = 0.0
    scope: str = ""
    need_gpus: float = 0.0

    def check(self) -> None:
        if self.cause not in WAIT_CAUSES:
            raise AdvisorInputError(f"cause {self.cause!r} is not one of {', '.join(WAIT_CAUSES)}")
        if not self.gpu_class:
            raise AdvisorInputError("a production wait record has no GPU class: name the class that waited")
        if self.cause == WAIT_BURST and not self.team:
            raise AdvisorInputError("a burst wait record names no team: name the team whose burst limit refused it")
        if self.cause == WAIT_BURST and not self.scope:
            raise AdvisorInputError(
                f"a burst wait record of team {self.team} names no scope: the class its limit is set on, or any"
            )
        for value in (self.gpus, self.short_gpus, self.need_gpus):
            if not math.isfinite(value) or value < 0:
                raise AdvisorInputError(f"a wait record must count GPUs ≥ 0, got {value:g}")
        if not math.isfinite(self.seconds) or self.seconds <= 0:
            raise AdvisorInputError(f"a wait record must last seconds above 0, got {self.seconds:g}")


@dataclass(frozen=True)
class HeldAdvice:
    """Production that found no room on a class: what waited, how far its demand exceeded the class's capacity,
    and the GPUs to reserve for that."""

    gpu_hours: float  # of production that waited
    peak_gpus: float  # that waited
    short_peak_gpus: float
    short_p95_gpus: float
    reserve_gpus: int

    def clause(self, gpu_class: str) -> str:
        if self.reserve_gpus == 0:
            return (
                f"reserve no more {gpu_class} GPUs: the class had room for production at the p95 "
                "(MIG-split or scattered GPUs kept it waiting)"
            )
        return f"reserve {self.reserve_gpus} more {gpu_class} GPUs"


@dataclass(frozen=True)
class BurstAdvice:
    """One team's production refused by one of its burst limits, and the limit that would have let it run."""

    team: str
    scope: str  # the class the limit is set on, or ``any`` for the team's overall limit
    gpu_hours: float  # of production that waited
    peak_gpus: float  # that waited
    need_peak_gpus: float
    need_p95_gpus: float
    limit_gpus: float | None  # the limit in force now; None when none is set now (removed since)
    raise_to_gpus: int

    def clause(self) -> str:
        where = "overall burst" if self.scope == OVERALL else f"burst on {self.scope}"
        if self.limit_gpus is None:
            limit = "overall burst limit" if self.scope == OVERALL else f"burst limit on {self.scope}"
            return f"team {self.team} has no {limit} now (removed since): nothing to raise"
        if self.raise_to_gpus <= self.limit_gpus + 1e-9:
            return (
                f"team {self.team}'s {where} is {number_text(self.limit_gpus)} GPUs now, enough for the p95 of "
                f"its production ({self.raise_to_gpus} GPUs)"
            )
        return f"raise team {self.team}'s {where} from {number_text(self.limit_gpus)} to {self.raise_to_gpus} GPUs"


@dataclass(frozen=True)
class ClassWaitAdvice:
    """What a period's unavoidable production wait on one GPU class advises."""

    gpu_class: str
    hours: float
    held: HeldAdvice | None
    bursts: tuple[BurstAdvice, ...]
    sentence: str


def wait_text(seconds: float) -> str:
    """ "40 s", "17 min", "5.2 h": how long production waited, as the advice's sentence says it."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _levels(records: Sequence[WaitRecord], field: str = "gpus") -> tuple[float, float, float]:
    """GPU-hours, peak and p95 of the records' ``field`` (what waited, the shortfall, the need), one level per
    cycle (records of a cycle add up)."""
    by_cycle: dict[float, list[float]] = {}
    for record in records:
        level = by_cycle.setdefault(record.at, [0.0, 0.0])
        level[0] += getattr(record, field)
        level[1] = max(level[1], record.seconds)
    levels = [level for level, _ in by_cycle.values()]
    seconds = [length for _, length in by_cycle.values()]
    gpu_hours = sum(g * s for g, s in zip(levels, seconds, strict=True)) / 3600
    return gpu_hours, max(levels), weighted_percentile(levels, seconds, WAIT_PERCENTILE)


def advise_production_wait(
    records: Sequence[WaitRecord],
    *,
    purchase_unit_gpus: int,
    period: str,
    burst_limits: Mapping[tuple[str, str], float] | None = None,
) -> tuple[ClassWaitAdvice, ...]:
    """Per GPU class, most hours waited first: the advice of ``records`` (module doc, Production wait).
    ``burst_limits``: (team, class or ``any``) → the burst limit in force now (a team's limit absent: none);
    ``period`` words the period in the sentence ("this week")."""
    if not 1 <= purchase_unit_gpus <= MAX_PURCHASE_UNIT_GPUS:
        raise AdvisorInputError(
            f"the purchase unit must be 1 to {MAX_PURCHASE_UNIT_GPUS} GPUs, got {purchase_unit_gpus}: "
            "give the GPUs of one reserved instance (8 for a p5)"
        )
    for record in records:
        record.check()
    limits = burst_limits or {}
    advices = []
    for gpu_class in sorted({record.gpu_class for record in records}):
        mine = [record for record in records if record.gpu_class == gpu_class]
        cycles: dict[float, float] = {}
        for record in mine:
            cycles[record.at] = max(cycles.get(record.at, 0.0), record.seconds)
        held_records = [record for record in mine if record.cause == WAIT_HELD]
        held = None
        if held_records:
            gpu_hours, peak, _ = _levels(held_records)
            _, short_peak, short_p95 = _levels(held_records, "short_gpus")
            reserve = math.ceil(short_p95 / purchase_unit_gpus - 1e-9) * purchase_unit_gpus
            held = HeldAdvice(gpu_hours, peak, short_peak, short_p95, reserve)
        bursts = []
        for team, scope in sorted({(r.team, r.scope) for r in mine if r.cause == WAIT_BURST}):
            refused = [r for r in mine if r.cause == WAIT_BURST and r.team == team and r.scope == scope]
            gpu_hours, peak, _ = _levels(refused)
            _, need_peak, need_p95 = _levels(refused, "need_gpus")
            raise_to = math.ceil(need_p95 - 1e-9)
            limit = limits.get((team, scope))
            bursts.append(BurstAdvice(team, scope, gpu_hours, peak, need_peak, need_p95, limit, raise_to))
        hours = sum(cycles.values()) / 3600
        clauses = ([held.clause(gpu_class)] if held is not None else []) + [burst.clause() for burst in bursts]
        sentence = f"Production waited {wait_text(hours * 3600)} {period} on {gpu_class}: " + ", or ".join(clauses)
        advices.append(ClassWaitAdvice(gpu_class, hours, held, tuple(bursts), sentence))
    return tuple(sorted(advices, key=lambda advice: (-advice.hours, advice.gpu_class)))
