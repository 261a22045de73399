"""B4 ``cost``: what the same work costs on on-demand capacity only, and with Microcosm's capacity tiers.

Protocol (spec/benchmarks.md B4; prices :mod:`scheduler.sim.prices`, facts §7):

1. **Workload.** The B2 generator (:mod:`scheduler.sim.workload.mixed`) for ``mixed-64`` at ``load`` and
   ``seed``: inference services (half of them ``production``) and checkpointed, preemptible training.
2. **Capacity.** Clouds are elastic, so the replay gets a pool of ``pool_factor`` copies of ``mixed-64``'s
   servers (128 GPUs by default for a workload sized for 64) and on-demand and spot GPUs are billed only while
   work holds them (per GPU-equivalent-hour: a MIG slice its compute slices / 7; the same rule in every run, so
   it flatters neither). Reserved GPUs are paid for every hour of the window, used or not.
3. **Run A, on-demand only.** Every server on-demand; every job ``tier: any``. The engine (``microcosm``)
   places the work; the run also measures the demand the tiers are then sized from.
4. **Reserved baseline.** Reserving one more GPU of a model pays off when demand for that model stays at or
   above it for more than (1 − d) of the time, d being the reserved discount (35 %): so the baseline of each
   model is the time-weighted d-quantile of run A's demand for it (GPU-equivalents held), rounded *down* to
   whole servers, and at least run A's peak production-inference demand on that model, rounded *up* (production
   runs only on reserved capacity). The other servers of the pool alternate spot and on-demand.
5. **Run B, tiered.** Same pool, those tiers and their prices: production inference ``reserved-only``;
   checkpointed preemptible training ``spot-ok`` (the engine routes it spot first, then reserved, then
   on-demand); the rest ``any`` (reserved first). Spot servers are interrupted as a Poisson process at
   ``interruptions_per_node_day`` during the arrival window, with AWS's 2-minute notice (facts §6); the
   interrupted server is replaced by a fresh spot server ``replace_s`` later. Work since a job's last
   checkpoint is lost and re-run (the replay's work model).
6. **Run C** is run B with spot interrupted at ``stress_interruptions_per_node_day`` (a stress test of the
   recovery path; the facts' Spot Advisor buckets put GPU instances at "often > 20 % a month", i.e. about
   0.007 interruptions per node-day, which hardly ever fires in a few hours).
7. **Figures** over the measured window (after the warm-up; the workload keeps arriving to its end, so the
   comparison is of a cluster in steady state, not of a draining tail): total cost = reserved commitments for
   the window + metered spot and on-demand GPU-hours × price; useful GPU-hours = what the running work truly
   needs minus the work lost to preemption (B2's ``effective_utilization`` definition); cost per useful
   GPU-hour; lost GPU-hours; production-inference SLO misses = production services in the window that waited
   more than one scheduling cycle to start, or never started. Savings = 1 − cost(B) / cost(A).

Deterministic for a seed; no Django.
"""

from __future__ import annotations

import math
import random
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from scheduler.core.capacity import UNITS_PER_GPU, slot_units
from scheduler.core.catalog import GPU_MODEL_BY_NAME
from scheduler.core.state import Job, Node
from scheduler.core.vocabulary import CapacityTier, JobKind, JobTier, Priority
from scheduler.sim.bench.mixed_run import Repairs, guarded
from scheduler.sim.events import AddNode, Interrupt, Submit, TimedEvent
from scheduler.sim.metrics import window_metrics
from scheduler.sim.planners import PLANNERS
from scheduler.sim.prices import RESERVED_DISCOUNT, price_per_gpu_hour
from scheduler.sim.replay import replay
from scheduler.sim.report import ReplayResult
from scheduler.sim.scenario import Scenario
from scheduler.sim.topology_model import topology_speed
from scheduler.sim.workload.clusters import ClusterDef
from scheduler.sim.workload.mixed import Workload

AWS_NOTICE_S = 120.0  # facts §6: AWS's 2-minute spot interruption notice
# Run C: a few interruptions in a few hours on eight spot servers, so the recovery path is really exercised.
STRESS_INTERRUPTIONS_PER_NODE_DAY = 4.0
FACTS_INTERRUPTIONS_PER_NODE_DAY = round(0.20 / 30, 4)  # the Spot Advisor's "> 20 % a month" bucket


@dataclass(frozen=True)
class CostConfig:
    pool_factor: int = 2
    interruptions_per_node_day: float = FACTS_INTERRUPTIONS_PER_NODE_DAY
    stress_interruptions_per_node_day: float = STRESS_INTERRUPTIONS_PER_NODE_DAY
    replace_s: float = 600.0
    planner: str = "microcosm"

    def __post_init__(self) -> None:
        problems = []
        if self.pool_factor < 1:
            problems.append(f"pool_factor must be at least 1, got {self.pool_factor!r}")
        for name in ("interruptions_per_node_day", "stress_interruptions_per_node_day", "replace_s"):
            if getattr(self, name) < 0:
                problems.append(f"{name} must not be negative, got {getattr(self, name)!r}")
        if self.planner not in PLANNERS:
            problems.append(f"unknown planner {self.planner!r}; known: {', '.join(PLANNERS)}")
        if problems:
            raise ValueError("; ".join(problems))


@dataclass(frozen=True)
class TierRun:
    """One way of buying the capacity, and what the same work cost that way."""

    name: str
    reserved_gpus: dict[str, int]  # GPU model → reserved GPUs
    interruptions: int
    total_cost: float
    reserved_cost: float
    metered_cost: float
    useful_gpu_hours: float
    lost_gpu_hours: float
    effective_utilization: float
    slo_misses: int
    production_services: int
    production_wait_p95_s: float | None
    completed: int
    plan_repairs: int
    wall_s: float

    @property
    def cost_per_useful_gpu_hour(self) -> float:
        return self.total_cost / self.useful_gpu_hours if self.useful_gpu_hours else math.inf

    def as_dict(self) -> dict[str, Any]:
        return {
            "reserved_gpus": self.reserved_gpus,
            "spot_interruptions": self.interruptions,
            "total_cost": round(self.total_cost, 2),
            "reserved_cost": round(self.reserved_cost, 2),
            "metered_cost": round(self.metered_cost, 2),
            "useful_gpu_hours": round(self.useful_gpu_hours, 2),
            "cost_per_useful_gpu_hour": round(self.cost_per_useful_gpu_hour, 4),
            "lost_gpu_hours": round(self.lost_gpu_hours, 3),
            "effective_utilization": self.effective_utilization,
            "production_slo_misses": self.slo_misses,
            "production_services": self.production_services,
            "production_wait_p95_s": self.production_wait_p95_s,
            "completed": self.completed,
            "plan_repairs": self.plan_repairs,
            "wall_s": round(self.wall_s, 1),
        }


def pool(cluster: ClusterDef, factor: int) -> tuple[Node, ...]:
    """``factor`` copies of the cluster's servers (``name-1``, ``name-2`` …), each copy under its own leaves."""
    return tuple(
        replace(node, name=f"{node.name}-{copy}", leaf=f"{node.leaf}-{copy}" if node.leaf else "")
        for copy in range(1, factor + 1)
        for node in cluster.nodes
    )


def priced(node: Node, tier: CapacityTier) -> Node:
    """``node`` on ``tier`` at its list price; reserved is priced 0 here because it is paid for by the hour of
    the window, not by use (:func:`reserved_cost`)."""
    price = 0.0 if tier == CapacityTier.RESERVED else price_per_gpu_hour(node.gpu_model, tier)
    return replace(node, tier=tier, price_per_gpu_hour=price)


Steps = dict[str, list[tuple[float, float]]]  # GPU model → sorted (t, change in GPU-equivalents held)


def demand_by_model(result: ReplayResult, nodes: Mapping[str, Node], *, production_only: bool = False) -> Steps:
    """GPU model → the step function of GPU-equivalents held on it, as sorted ``(t, change)`` pairs."""
    changes: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for run in result.runs:
        job = run.job
        if production_only and not (job.priority == Priority.PRODUCTION and job.kind == JobKind.INFERENCE):
            continue
        for model, held in _held_by_model(run.slots, nodes).items():
            changes[model] += [(run.start, held), (run.end, -held)]
    return {model: sorted(steps) for model, steps in changes.items()}


def _held_by_model(slots: Sequence[Sequence[Any]], nodes: Mapping[str, Node]) -> dict[str, float]:
    held: dict[str, float] = defaultdict(float)
    for replica in slots:
        for slot in replica:
            model = nodes[slot.node].gpu_model
            held[model] += slot_units(slot, GPU_MODEL_BY_NAME[model]) / UNITS_PER_GPU
    return held


def time_quantile(steps: Sequence[tuple[float, float]], window: tuple[float, float], q: float) -> float:
    """The level L such that the held amount is ≤ L for a fraction ``q`` of the window (time-weighted)."""
    durations: dict[float, float] = defaultdict(float)
    level, since = 0.0, window[0]
    for t, change in [*steps, (window[1], 0.0)]:
        if t > since:  # ``level`` held on [since, t)
            low, high = max(since, window[0]), min(t, window[1])
            if high > low:
                durations[round(level, 6)] += high - low
            since = t
        level += change
    total = sum(durations.values())
    covered = 0.0
    for value in sorted(durations):
        covered += durations[value]
        if covered >= q * total - 1e-9:
            return max(0.0, value)
    return 0.0  # an empty window


def peak(steps: Sequence[tuple[float, float]]) -> float:
    level = best = 0.0
    for _, change in steps:
        level += change
        best = max(best, level)
    return best


def reserved_baseline(
    demand: Mapping[str, Sequence[tuple[float, float]]],
    production: Mapping[str, Sequence[tuple[float, float]]],
    nodes: Sequence[Node],
    window: tuple[float, float],
) -> dict[str, int]:
    """GPU model → servers to reserve (protocol step 4)."""
    per_node = {node.gpu_model: node.gpu_count for node in nodes}
    available: dict[str, int] = defaultdict(int)
    for node in nodes:
        available[node.gpu_model] += 1
    servers: dict[str, int] = {}
    for model, gpus in per_node.items():
        by_cost = math.floor(time_quantile(demand.get(model, ()), window, RESERVED_DISCOUNT) / gpus + 1e-9)
        for_production = math.ceil(peak(production.get(model, ())) / gpus - 1e-9)
        servers[model] = min(available[model], max(by_cost, for_production))
    return servers


def tiered_nodes(nodes: Sequence[Node], reserved_servers: Mapping[str, int]) -> tuple[Node, ...]:
    """The pool with the first ``reserved_servers[model]`` servers of each model reserved and the others
    alternating spot and on-demand (spot first)."""
    seen: dict[str, int] = defaultdict(int)
    out = []
    for node in nodes:
        index = seen[node.gpu_model]
        seen[node.gpu_model] += 1
        reserved = reserved_servers.get(node.gpu_model, 0)
        if index < reserved:
            tier = CapacityTier.RESERVED
        else:
            tier = CapacityTier.SPOT if (index - reserved) % 2 == 0 else CapacityTier.ON_DEMAND
        out.append(priced(node, tier))
    return tuple(out)


def job_tier(job: Job) -> JobTier:
    """Run B's routing of a job (protocol step 5)."""
    if job.priority == Priority.PRODUCTION:
        return JobTier.RESERVED_ONLY
    if job.preemptible and job.checkpoint_interval_s:
        return JobTier.SPOT_OK
    return JobTier.ANY


def interruptions(
    nodes: Sequence[Node], *, rate_per_node_day: float, until_s: float, replace_s: float, seed: int
) -> list[tuple[float, Interrupt | AddNode]]:
    """Spot interruptions (Poisson per server while the arrival window lasts) and their replacements."""
    rng = random.Random(f"cost:{seed}:spot")
    happenings: list[tuple[float, Interrupt | AddNode]] = []
    if rate_per_node_day <= 0:
        return happenings
    rate_per_s = rate_per_node_day / 86_400.0
    queue = [node for node in nodes if node.tier == CapacityTier.SPOT]
    generation: dict[str, int] = defaultdict(int)
    born = dict.fromkeys((node.name for node in queue), 0.0)
    while queue:
        node = queue.pop(0)
        t = born[node.name] + rng.expovariate(rate_per_s)
        if t >= until_s:
            continue
        happenings.append((round(t, 3), Interrupt(node.name, AWS_NOTICE_S)))
        base = node.name.split("~", 1)[0]
        generation[base] += 1
        fresh = replace(node, name=f"{base}~{generation[base]}")
        back = round(t + AWS_NOTICE_S + replace_s, 3)
        happenings.append((back, AddNode(fresh)))
        born[fresh.name] = back
        queue.append(fresh)
    return sorted(happenings, key=lambda item: item[0])


def scenario_for(
    workload: Workload,
    nodes: Sequence[Node],
    *,
    retier: Callable[[Job], JobTier] | None,
    extra: Sequence[tuple[float, Interrupt | AddNode]] = (),
) -> Scenario:
    """The workload's scenario on ``nodes``, its jobs re-tiered by ``retier`` and ``extra`` events merged in."""
    timed: list[tuple[float, int, Any]] = []
    for event in workload.scenario.events:
        action = event.action
        if retier is not None and isinstance(action, Submit):
            action = Submit(replace(action.job, tier=retier(action.job)))
        timed.append((event.t, 0, action))
    timed += [(t, 1, action) for t, action in extra]
    timed.sort(key=lambda item: (item[0], item[1]))
    events = tuple(TimedEvent(t=t, index=i, action=action) for i, (t, _, action) in enumerate(timed))
    return replace(workload.scenario, nodes=tuple(nodes), events=events)


def measure(
    name: str,
    workload: Workload,
    scenario: Scenario,
    config: CostConfig,
    spot_events: int,
) -> tuple[TierRun, ReplayResult]:
    """Replay ``scenario`` and bill it over the workload's window (protocol step 7)."""
    repairs = Repairs()
    started = time.perf_counter()
    result = replay(scenario, guarded(PLANNERS[config.planner], repairs), speed=topology_speed(workload.cluster.fabric))
    nodes = {node.name: node for node in scenario.nodes}
    for event in scenario.events:  # replacements join later; bill them like the server they replace
        if isinstance(event.action, AddNode):
            nodes[event.action.node.name] = event.action.node
    window = workload.config.window
    hours = (window[1] - window[0]) / 3600.0
    metered = 0.0
    for run in result.runs:
        ran = max(0.0, min(run.end, window[1]) - max(run.start, window[0]))
        if ran <= 0:
            continue
        for replica in run.slots:
            for slot in replica:
                node = nodes[slot.node]
                share = slot_units(slot, GPU_MODEL_BY_NAME[node.gpu_model]) / UNITS_PER_GPU
                metered += share * node.price_per_gpu_hour * ran / 3600.0
    reserved_gpus: dict[str, int] = {}
    reserved = 0.0
    for node in scenario.nodes:
        if node.tier == CapacityTier.RESERVED:
            reserved_gpus[node.gpu_model] = reserved_gpus.get(node.gpu_model, 0) + node.gpu_count
            reserved += node.gpu_count * price_per_gpu_hour(node.gpu_model, CapacityTier.RESERVED) * hours
    figures = window_metrics(result, workload.jobs, nodes, scenario.policy, window)
    capacity_s = sum(node.gpu_count for node in scenario.nodes) * (window[1] - window[0])
    useful = float(figures["effective_utilization"]) * capacity_s / 3600.0  # type: ignore[arg-type]
    misses, services, waits = _production_slo(result, workload.jobs, window, scenario.policy.cycle_s)
    waits.sort()
    p95 = waits[min(len(waits) - 1, math.ceil(0.95 * len(waits)) - 1)] if waits else None
    run = TierRun(
        name=name,
        reserved_gpus=reserved_gpus,
        interruptions=spot_events,
        total_cost=reserved + metered,
        reserved_cost=reserved,
        metered_cost=metered,
        useful_gpu_hours=useful,
        lost_gpu_hours=float(figures["lost_gpu_hours"]),  # type: ignore[arg-type]
        effective_utilization=float(figures["effective_utilization"]),  # type: ignore[arg-type]
        slo_misses=misses,
        production_services=services,
        production_wait_p95_s=None if p95 is None else round(p95, 3),
        completed=int(figures["completed"]),  # type: ignore[call-overload]
        plan_repairs=len(repairs.dropped_binds),
        wall_s=time.perf_counter() - started,
    )
    return run, result


def _production_slo(
    result: ReplayResult, jobs: Sequence[Job], window: tuple[float, float], cycle_s: float
) -> tuple[int, int, list[float]]:
    first_start: dict[str, float] = {}
    for run in result.runs:
        first_start[run.job.id] = min(first_start.get(run.job.id, math.inf), run.start)
    misses = services = 0
    waits: list[float] = []
    for job in jobs:
        if job.priority != Priority.PRODUCTION or job.kind != JobKind.INFERENCE:
            continue
        if not window[0] <= job.submitted_at < window[1]:
            continue
        services += 1
        started = first_start.get(job.id, math.inf)
        wait = started - job.submitted_at
        waits.append(wait if math.isfinite(wait) else result.end - job.submitted_at)
        misses += not wait <= cycle_s + 1e-9
    return misses, services, waits


@dataclass(frozen=True)
class CostResult:
    runs: tuple[TierRun, ...]
    reserved_servers: dict[str, int]

    def savings(self, run: TierRun) -> float:
        base = self.runs[0].total_cost
        return 1.0 - run.total_cost / base if base else 0.0


def run_cost(workload: Workload, config: CostConfig) -> CostResult:
    """Runs A, B and C of the protocol on ``workload``."""
    nodes = pool(workload.cluster, config.pool_factor)
    on_demand = tuple(priced(node, CapacityTier.ON_DEMAND) for node in nodes)
    scenario_a = scenario_for(workload, on_demand, retier=lambda job: JobTier.ANY)
    run_a, result_a = measure("on-demand only", workload, scenario_a, config, 0)
    by_name = {node.name: node for node in on_demand}
    window = workload.config.window
    servers = reserved_baseline(
        demand_by_model(result_a, by_name),
        demand_by_model(result_a, by_name, production_only=True),
        nodes,
        window,
    )
    tiered = tiered_nodes(nodes, servers)
    runs = [run_a]
    for name, rate in (
        ("tiered", config.interruptions_per_node_day),
        ("tiered, spot stressed", config.stress_interruptions_per_node_day),
    ):
        spot = interruptions(
            tiered,
            rate_per_node_day=rate,
            until_s=workload.config.until_s,
            replace_s=config.replace_s,
            seed=workload.config.seed,
        )
        scenario = scenario_for(workload, tiered, retier=job_tier, extra=spot)
        run, _ = measure(
            f"{name} ({rate:g}/node-day)",
            workload,
            scenario,
            config,
            sum(isinstance(a, Interrupt) for _, a in spot),
        )
        runs.append(run)
    return CostResult(tuple(runs), servers)
