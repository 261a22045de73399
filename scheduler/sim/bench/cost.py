"""B4 ``cost``: what the same work costs on stock Kubernetes on-demand, on Microcosm on-demand, and with
Microcosm's capacity tiers.

Protocol (spec/benchmarks.md B4; prices :mod:`scheduler.sim.prices`, from ``docs/gpu-facts.md``, Prices;
billing :mod:`scheduler.sim.bench.metering`):

1. **Workload.** The B2 generator (:mod:`scheduler.sim.workload.mixed`) for ``mixed-64`` at ``load``, for a mix
   and a seed: inference services and checkpointed, preemptible training.
2. **Capacity.** Clouds are elastic, so every run gets a pool of ``pool_factor`` copies of ``mixed-64``'s
   servers (128 GPUs by default for a workload sized for 64). On-demand and spot are **metered per node-hour**:
   a server is billed at its instance price for every second it holds any work (an autoscaled pool releases
   empty nodes). Reserved servers are paid for every hour of the window, used or not.
3. **Run N, naive on-demand**: the ``naive`` baseline (stock Kubernetes) on the pool, every server on-demand:
   what a team on stock Kubernetes pays.
4. **Run A, microcosm on-demand**: the engine on the same all on-demand pool; the run also measures the demand
   the tiers are then sized from.
5. **Reserved baseline**, from the aggregate non-spot demand per GPU model — run A's GPU-equivalents held by
   the jobs run B does not send to spot (everything but checkpointed preemptible training): reserving one more
   GPU pays off when that demand stays at or above it for more than (1 − d) of the time, d being the reserved
   discount (35 %), so each model's baseline is the time-weighted d-quantile of that demand, rounded *down* to
   whole servers. The other servers of the pool alternate spot and on-demand (spot first).
6. **Run B, microcosm tiered**: same pool, those tiers and prices. Checkpointed preemptible training is
   ``spot-ok`` (the engine routes it spot first, then reserved, then on-demand); everything else is ``any``
   (reserved first, then on-demand; production never on spot — the engine's tier rule,
   ``scheduler/core/rules/tiers.py``): production inference runs on reserved capacity first and on
   on-demand when reserved is full. Spot servers are interrupted as a Poisson process at
   ``interruptions_per_node_day`` during the arrival window, with AWS's 2-minute notice (``docs/gpu-facts.md``,
   Spot and preemption signals); the interrupted server is replaced by a fresh spot server ``replace_s``
   later; work since a job's last checkpoint is lost and re-run (the replay's work model).
7. **Run D, microcosm tiered, autoscaled on-demand** (spec B4: "On-demand capacity for peaks is requested and
   released through the autoscaler model"): run B's pool, reserved and spot servers and interruptions, but its
   on-demand servers are not there at the start: each GPU model's on-demand servers become one autoscaled pool
   (:mod:`scheduler.sim.autoscaler`) whose ceiling is that many servers, which the engine grows by node requests
   and shrinks by releases (its provisioning rule: ``Plan.provisions``, ``Plan.releases``). A request's nodes
   arrive after a delay drawn from the provisioning model or stock out (:mod:`scheduler.core.gpus.arrival`,
   seeded per run); an autoscaled node is billed from its request to its release, at the on-demand price; a
   stocked-out request is billed nothing. Runs N, A and B (the fixed pools) are reported beside it.
8. **Run C** (only when ``stress_interruptions_per_node_day`` > 0; off by default) is run B with spot
   interrupted that often — a stress test of the recovery path, as the Spot Advisor's "> 20 % a month"
   rate (about 0.007 per node-day) hardly ever fires in a few hours.
9. **Figures** over the measured window (after the warm-up; the workload keeps arriving to its end, so the
   comparison is of a cluster in steady state, not of a draining tail): total cost = reserved for the window +
   metered node-hours × instance price (run D: + its autoscaled node-hours, request to release); useful
   GPU-hours = what the running work truly needs minus the work lost to preemption (B2's
   ``effective_utilization`` × the GPU-hours present); cost per useful GPU-hour; lost GPU-hours; **production
   SLO misses** as the spec defines them, "start later than one cycle, avoidable waits only — B2's definition":
   production inference services submitted in the window whose avoidable wait (B2's count of the replay's
   per-cycle verdicts, :mod:`scheduler.sim.avoidable`, recorded in every run) exceeds one cycle — a service that
   never started is judged on every cycle it waited to the replay's end, a rejected one is left out as B2 leaves
   it out; and beside them, never hidden, the **late starts** of any cause (first start more than one cycle after
   submission, or never), each with its recorded cause (:mod:`scheduler.sim.bench.cost_slo`). The two savings:
   **tiering alone** = 1 − cost(B) / cost(A);
   **what a user gets** = 1 − cost(B) / cost(N); the same two for run D against A and N.
10. **Goodput**, a measure beside the protocol (:mod:`scheduler.sim.bench.goodput`): run B again twice per spot
   rate, every checkpoint now costing GPU time, once with the workload's fixed checkpoint intervals and once with
   the intervals Microcosm proposes (Young's √(2 × cost × MTBF)); lost GPU-hours per interruption and goodput.

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

from scheduler.core.gpus.arrival import ANY_CLOUD, arrival_model
from scheduler.core.model.provisioning import Offering
from scheduler.core.model.snapshot import Job, Node
from scheduler.core.model.vocabulary import CapacityTier, JobTier, Priority
from scheduler.core.rules.checkpointing import DEFAULT_COST_S, DEFAULT_MAX_INTERVAL_S, SPOT_INTERRUPTIONS_PER_NODE_DAY
from scheduler.sim.autoscaler import AutoscaledPool, Autoscaler
from scheduler.sim.bench.cost_sizing import demand_by_model, reserved_baseline
from scheduler.sim.bench.cost_slo import production_slo
from scheduler.sim.bench.metering import held_seconds, metered_cost, metered_node_hours, reserved_cost
from scheduler.sim.bench.mixed_run import Repairs, guarded
from scheduler.sim.events import AddNode, Interrupt, Submit, TimedEvent
from scheduler.sim.metrics import capacity_gpu_s, percentile, window_metrics
from scheduler.sim.planners import PLANNERS
from scheduler.sim.prices import price_per_gpu_hour
from scheduler.sim.records import CycleLog
from scheduler.sim.replay import replay
from scheduler.sim.report import ReplayResult
from scheduler.sim.scenario import Scenario
from scheduler.sim.topology_model import topology_speed
from scheduler.sim.workload.clusters import ClusterDef
from scheduler.sim.workload.mixed import Workload

AWS_NOTICE_S = 120.0  # AWS's 2-minute spot interruption notice (docs/gpu-facts.md, Spot and preemption signals)
# Run C: a few interruptions in a few hours on eight spot servers, so the recovery path is really exercised.
STRESS_INTERRUPTIONS_PER_NODE_DAY = 0.0  # run C is off unless asked for (e.g. 4: a few per run)
FACTS_INTERRUPTIONS_PER_NODE_DAY = SPOT_INTERRUPTIONS_PER_NODE_DAY  # the Spot Advisor's "> 20 % a month" bucket


@dataclass(frozen=True)
class CostConfig:
    pool_factor: int = 2
    interruptions_per_node_day: float = FACTS_INTERRUPTIONS_PER_NODE_DAY
    stress_interruptions_per_node_day: float = STRESS_INTERRUPTIONS_PER_NODE_DAY
    replace_s: float = 600.0
    planner: str = "microcosm"
    baseline: str = "naive"  # run N: stock Kubernetes
    # The goodput comparison beside the protocol (scheduler/sim/bench/goodput.py): what each checkpoint costs, and
    # the cap on the proposed interval (the portal's defaults, scheduler/core/rules/checkpointing.py).
    checkpoint_cost_s: float = DEFAULT_COST_S
    max_checkpoint_interval_s: float = DEFAULT_MAX_INTERVAL_S
    # Run D: on-demand as autoscaled pools (protocol step 7); the provisioning model's cloud (scheduler/core/gpus/
    # arrival.py: one default for every cloud today).
    autoscaled: bool = True
    cloud: str = ANY_CLOUD

    def __post_init__(self) -> None:
        problems = []
        if self.pool_factor < 1:
            problems.append(f"pool_factor must be at least 1, got {self.pool_factor!r}")
        for name in ("checkpoint_cost_s", "max_checkpoint_interval_s"):
            if not (getattr(self, name) > 0 and math.isfinite(getattr(self, name))):
                problems.append(f"{name} must be a positive number of seconds, got {getattr(self, name)!r}")
        for name in ("interruptions_per_node_day", "stress_interruptions_per_node_day", "replace_s"):
            if getattr(self, name) < 0:
                problems.append(f"{name} must not be negative, got {getattr(self, name)!r}")
        for planner in (self.planner, self.baseline):
            if planner not in PLANNERS:
                problems.append(f"unknown planner {planner!r}; known: {', '.join(PLANNERS)}")
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
    metered_node_hours: float
    useful_gpu_hours: float
    lost_gpu_hours: float
    effective_utilization: float
    slo_misses: int  # the spec's: avoidable wait beyond one cycle (scheduler/sim/bench/cost_slo.py)
    late_starts: int  # any cause: first start more than one cycle after submission, or never
    late_by_cause: dict[str, int]
    late_wait_s_by_cause: dict[str, float]
    production_services: int
    production_wait_p95_s: float | None
    completed: int
    plan_repairs: int
    wall_s: float
    # Run D's autoscaled pools (None on the fixed pools): node requests made, stocked out and withdrawn in the
    # window, the node-hours billed from request to release and what they cost (part of metered_cost), and the
    # node-hours asked for that stocked out (billed nothing).
    requests_made: int | None = None
    requests_failed: int | None = None
    requests_withdrawn: int | None = None
    autoscaled_node_hours: float | None = None
    autoscaled_cost: float | None = None
    stocked_out_node_hours: float | None = None

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
            "metered_node_hours": round(self.metered_node_hours, 2),
            "useful_gpu_hours": round(self.useful_gpu_hours, 2),
            "cost_per_useful_gpu_hour": round(self.cost_per_useful_gpu_hour, 4),
            "lost_gpu_hours": round(self.lost_gpu_hours, 3),
            "effective_utilization": self.effective_utilization,
            "production_slo_misses": self.slo_misses,
            "production_late_starts": self.late_starts,
            "production_late_starts_by_cause": self.late_by_cause,
            "production_late_wait_s_by_cause": {k: round(v, 1) for k, v in self.late_wait_s_by_cause.items()},
            "production_services": self.production_services,
            "production_wait_p95_s": self.production_wait_p95_s,
            "completed": self.completed,
            "plan_repairs": self.plan_repairs,
            "wall_s": round(self.wall_s, 1),
            **({} if self.requests_made is None else self._autoscaling()),
        }

    def _autoscaling(self) -> dict[str, Any]:
        return {
            "node_requests": self.requests_made,
            "node_requests_failed": self.requests_failed,
            "node_requests_withdrawn": self.requests_withdrawn,
            "autoscaled_node_hours": round(self.autoscaled_node_hours or 0.0, 2),
            "autoscaled_cost": round(self.autoscaled_cost or 0.0, 2),
            "stocked_out_node_hours": round(self.stocked_out_node_hours or 0.0, 2),
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
    """Run B's routing of a job (protocol step 6): checkpointed preemptible work may go to spot; everything
    else — production included, which the engine never puts on spot — takes reserved first, then on-demand."""
    if job.preemptible and job.checkpoint_interval_s and job.priority != Priority.PRODUCTION:
        return JobTier.SPOT_OK
    return JobTier.ANY


def non_spot(job: Job) -> bool:
    """Demand the reserved baseline is sized from: what run B does not send to spot."""
    return job_tier(job) != JobTier.SPOT_OK


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
    planner: str,
    spot_events: int,
    autoscaler: Autoscaler | None = None,
) -> tuple[TierRun, ReplayResult]:
    """Replay ``scenario`` with ``planner`` and bill it over the workload's window (protocol steps 2, 7 and 9)."""
    repairs = Repairs()
    started = time.perf_counter()
    window = workload.config.window
    # The production SLO needs the oracle's verdict on every cycle that leaves production waiting (cost_slo);
    # the per-GPU samples B2 also takes are not read here.
    cycles = CycleLog(window=window, sampling=False)
    result = replay(
        scenario,
        guarded(PLANNERS[planner], repairs),
        speed=topology_speed(workload.cluster.fabric),
        cycles=cycles,
        autoscaler=autoscaler,
    )
    nodes = {node.name: node for node in scenario.nodes}
    for event in scenario.events:  # replacements join later; bill them like the server they replace
        if isinstance(event.action, AddNode):
            nodes[event.action.node.name] = event.action.node
    hours = (window[1] - window[0]) / 3600.0
    held = held_seconds(result.runs, window)
    reserved, reserved_gpus = reserved_cost(scenario.nodes, hours)
    scaled: dict[str, float | int] = {}
    if autoscaler is not None:  # autoscaled nodes are billed request to release, not while they hold work
        held = {node: seconds for node, seconds in held.items() if node not in autoscaler.nodes}
        nodes.update(autoscaler.nodes)
        scaled = autoscaler.summary(window)
    metered = metered_cost(held, nodes) + float(scaled.get("cost", 0.0))
    figures = window_metrics(result, workload.jobs, nodes, scenario.policy, window)
    present_gpu_h = capacity_gpu_s(result.capacity, window) / 3600.0
    useful = float(_figure(figures, "effective_utilization")) * present_gpu_h
    requests = autoscaler.requests.values() if autoscaler is not None else ()
    slo = production_slo(result, workload.jobs, window, scenario.policy.cycle_s, cycles, requests)
    p95 = percentile(slo.waits_s, 95) if slo.waits_s else None
    run = TierRun(
        name=name,
        reserved_gpus=reserved_gpus,
        interruptions=spot_events,
        total_cost=reserved + metered,
        reserved_cost=reserved,
        metered_cost=metered,
        metered_node_hours=metered_node_hours(held, nodes),
        useful_gpu_hours=useful,
        lost_gpu_hours=float(_figure(figures, "lost_gpu_hours")),
        effective_utilization=float(_figure(figures, "effective_utilization")),
        slo_misses=slo.misses,
        late_starts=slo.late_starts,
        late_by_cause=slo.late_by_cause,
        late_wait_s_by_cause=slo.late_wait_s_by_cause,
        production_services=slo.services,
        production_wait_p95_s=None if p95 is None else round(p95, 3),
        completed=int(_figure(figures, "completed")),
        plan_repairs=len(repairs.dropped_binds),
        wall_s=time.perf_counter() - started,
    )
    if autoscaler is not None:
        run = replace(
            run,
            metered_node_hours=run.metered_node_hours + float(scaled["billed_node_hours"]),
            requests_made=int(scaled["requests"]),
            requests_failed=int(scaled["failed"]),
            requests_withdrawn=int(scaled["withdrawn"]),
            autoscaled_node_hours=float(scaled["billed_node_hours"]),
            autoscaled_cost=float(scaled["cost"]),
            stocked_out_node_hours=float(scaled["stocked_out_node_hours"]),
        )
    return run, result


def _figure(figures: Mapping[str, object], name: str) -> float:
    """One number of :func:`window_metrics`' figures (beside them it holds per-class summaries)."""
    value = figures[name]
    if not isinstance(value, int | float):
        raise TypeError(f"window figure {name!r} is not a number: {value!r}")
    return value


RUN_NAIVE = "naive on-demand"
RUN_ON_DEMAND = "microcosm on-demand"
RUN_TIERED = "microcosm tiered"
RUN_STRESSED = "microcosm tiered, spot stressed"
RUN_AUTOSCALED = "microcosm tiered, autoscaled on-demand"


@dataclass(frozen=True)
class CostResult:
    runs: tuple[TierRun, ...]  # N, A, B, D (when autoscaled) and C (when stressed), in that order
    reserved_servers: dict[str, int]

    def run(self, name: str) -> TierRun:
        return next(run for run in self.runs if run.name == name)

    @staticmethod
    def _saving(base: TierRun, run: TierRun) -> float:
        return 1.0 - run.total_cost / base.total_cost if base.total_cost else 0.0

    @property
    def tiering_alone(self) -> float:
        """microcosm on-demand → microcosm tiered."""
        return self._saving(self.run(RUN_ON_DEMAND), self.run(RUN_TIERED))

    @property
    def for_user(self) -> float:
        """naive on-demand → microcosm tiered: what a team moving from stock Kubernetes gets."""
        return self._saving(self.run(RUN_NAIVE), self.run(RUN_TIERED))

    def savings_vs_naive(self, run: TierRun) -> float:
        return self._saving(self.run(RUN_NAIVE), run)

    def tiering_alone_of(self, run: TierRun) -> float:
        """microcosm on-demand → ``run``."""
        return self._saving(self.run(RUN_ON_DEMAND), run)

    @property
    def autoscaled(self) -> TierRun | None:
        return next((run for run in self.runs if run.name == RUN_AUTOSCALED), None)


def autoscaled_pools(
    nodes: Sequence[Node], *, seed: int, cloud: str = ANY_CLOUD
) -> tuple[tuple[Node, ...], Autoscaler]:
    """Run D's cluster (protocol step 7): ``nodes`` without their on-demand servers, and an autoscaler whose pool per
    GPU model (``od-MODEL``) can add up to that many such servers, at the on-demand price, arriving as the
    provisioning model of the model's class says."""
    kept: list[Node] = []
    by_model: dict[str, list[Node]] = defaultdict(list)
    for node in nodes:
        (by_model[node.gpu_model] if node.tier == CapacityTier.ON_DEMAND else kept).append(node)
    pools = []
    for model, servers in by_model.items():
        template = servers[0]
        arrival = arrival_model(model, cloud)
        offering = Offering(
            pool=f"od-{model}",
            gpu_model=model,
            gpu_count=template.gpu_count,
            price_per_gpu_hour=price_per_gpu_hour(model, CapacityTier.ON_DEMAND),
            arrival_s=arrival.expected_s,
            max_nodes=len(servers),
            interconnect=template.interconnect,
        )
        pools.append(AutoscaledPool(offering, arrival, replace(template, name=offering.pool)))
    return tuple(kept), Autoscaler(pools, seed=seed)


def run_cost(workload: Workload, config: CostConfig) -> CostResult:
    """Runs N, A, B (and C) of the protocol on ``workload``."""
    nodes = pool(workload.cluster, config.pool_factor)
    on_demand = tuple(priced(node, CapacityTier.ON_DEMAND) for node in nodes)
    scenario_a = scenario_for(workload, on_demand, retier=lambda job: JobTier.ANY)
    run_n, _ = measure(RUN_NAIVE, workload, scenario_a, config.baseline, 0)
    run_a, result_a = measure(RUN_ON_DEMAND, workload, scenario_a, config.planner, 0)
    by_name = {node.name: node for node in on_demand}
    servers = reserved_baseline(demand_by_model(result_a, by_name, include=non_spot), nodes, workload.config.window)
    tiered = tiered_nodes(nodes, servers)
    runs = [run_n, run_a]
    stressed = config.stress_interruptions_per_node_day
    plan = [(RUN_TIERED, config.interruptions_per_node_day)]
    plan += [(RUN_AUTOSCALED, config.interruptions_per_node_day)] if config.autoscaled else []
    plan += [(RUN_STRESSED, stressed)] if stressed > 0 else []
    for name, rate in plan:
        spot = interruptions(
            tiered,
            rate_per_node_day=rate,
            until_s=workload.config.until_s,
            replace_s=config.replace_s,
            seed=workload.config.seed,
        )
        nodes_now, autoscaler = tiered, None
        if name == RUN_AUTOSCALED:
            nodes_now, autoscaler = autoscaled_pools(tiered, seed=workload.config.seed, cloud=config.cloud)
        scenario = scenario_for(workload, nodes_now, retier=job_tier, extra=spot)
        events = sum(isinstance(a, Interrupt) for _, a in spot)
        run, _ = measure(name, workload, scenario, config.planner, events, autoscaler)
        runs.append(run)
    return CostResult(tuple(runs), servers)
