"""B4's goodput: checkpointed training on spot with the workload's fixed checkpoint intervals against the interval
Microcosm proposes (Young's √(2 × cost × MTBF), :mod:`scheduler.core.rules.checkpointing`), each checkpoint paid for.

A measure added to B4, beside its protocol (:mod:`scheduler.sim.bench.cost`), whose runs N, A, B and C stay as they
are. For each spot rate the benchmark runs (run B's, and run C's when asked for) two more replays of run B: the same
tiered pool, routing, seed and spot interruptions, differing only in the checkpoint intervals of the checkpointed
jobs:

- **fixed**: the workload's own intervals (10, 30 or 60 min: :mod:`scheduler.sim.workload.mixed`);
- **proposed**: each checkpointed job's interval replaced by the proposal for it, as the portal would make it —
  the spot tier its routing prefers, at the run's spot rate (the simulated on-demand and reserved servers are never
  interrupted, so their rate is 0), the fewest of the pool's largest servers its replicas pack into, the cost
  below, and the cap.

**Checkpoint cost.** The replay saves a checkpoint instantly (``scheduler/sim/records.py``), under which the
shortest interval always wins. Both replays here charge every checkpoint ``cost_s`` of the job's GPUs instead: a job
with interval τ and run time D runs τ + cost between checkpoints and D + n × cost in all, n = ⌈D / τ⌉ − 1 being the
checkpoints an uninterrupted run writes. A checkpoint is complete only once written, so an interruption during a
write loses the write as well (the replay keeps work only up to the end of each τ + cost). The workload has no
model of checkpoint cost, so every job pays the same ``cost_s`` (60 s by default). Not charged: reading the
checkpoint back on resume, and the topology model's slow-down of a gang, which stretches the write like the compute.

**Figures** over the window, of the checkpointed jobs only, in GPU-hours of wall time: *allocated* (their GPUs ×
time held), *lost* (work thrown away by evictions: by spot interruptions — the replay's ``node-lost`` — and by
other preemptions), *checkpoint* (checkpoints completed in the window × cost × the job's GPUs), *useful* =
allocated − lost − checkpoint, and **goodput** = useful ÷ (useful + lost + checkpoint); spot *interruptions*
(servers interrupted in the window) and the GPU-hours lost to them per interruption.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from scheduler.core.model.snapshot import Job
from scheduler.core.model.vocabulary import CapacityTier, EventType, EvictionReason
from scheduler.core.rules.checkpointing import checkpoint_interval, likely_tier, nodes_spanned
from scheduler.sim.bench.cost import (
    CostConfig,
    TierRun,
    interruptions,
    job_tier,
    measure,
    pool,
    scenario_for,
    tiered_nodes,
)
from scheduler.sim.bench.seeds import spread, spread_text
from scheduler.sim.events import Interrupt, Submit
from scheduler.sim.report import ReplayResult
from scheduler.sim.scenario import Scenario
from scheduler.sim.workload.mixed import Workload

FIXED = "fixed intervals"
PROPOSED = "proposed intervals"


@dataclass(frozen=True)
class Goodput:
    """The checkpointed jobs' GPU-hours over the window (module docstring, Figures)."""

    allocated_gpu_hours: float
    lost_spot_gpu_hours: float
    lost_other_gpu_hours: float
    checkpoint_gpu_hours: float
    checkpoints: int
    interruptions: int
    interval_s_median: float | None  # over the checkpointed jobs submitted

    @property
    def lost_gpu_hours(self) -> float:
        return self.lost_spot_gpu_hours + self.lost_other_gpu_hours

    @property
    def useful_gpu_hours(self) -> float:
        return self.allocated_gpu_hours - self.lost_gpu_hours - self.checkpoint_gpu_hours

    @property
    def goodput(self) -> float | None:
        return self.useful_gpu_hours / self.allocated_gpu_hours if self.allocated_gpu_hours > 0 else None

    @property
    def lost_per_interruption(self) -> float | None:
        return self.lost_spot_gpu_hours / self.interruptions if self.interruptions else None


@dataclass(frozen=True)
class GoodputRun:
    """One replay of the comparison: which intervals, at which spot rate, what it cost and its goodput."""

    intervals: str  # FIXED or PROPOSED
    rate_per_node_day: float
    run: TierRun
    goodput: Goodput


def proposed_interval(job: Job, *, rate_per_node_day: float, config: CostConfig, gpus_per_node: int) -> float:
    """The interval proposed for ``job`` in the simulated pool (module docstring, proposed)."""
    tier = likely_tier(job.tier, job.priority)
    nodes = nodes_spanned(replicas=job.replicas, gpus_per_replica=job.request.gpus or 1, gpus_per_node=gpus_per_node)
    return checkpoint_interval(
        cost_s=config.checkpoint_cost_s,
        interruptions_per_node_day=rate_per_node_day if tier == CapacityTier.SPOT else 0.0,
        nodes=nodes,
        max_interval_s=config.max_checkpoint_interval_s,
    ).interval_s


def with_checkpoint_cost(job: Job, interval_s: float, cost_s: float) -> Job:
    """``job`` checkpointing every ``interval_s`` of work, each checkpoint taking ``cost_s`` more (module
    docstring, Checkpoint cost)."""
    duration = job.duration_s
    if duration is not None:
        duration += max(0, math.ceil(duration / interval_s) - 1) * cost_s
    return replace(job, checkpoint_interval_s=interval_s + cost_s, duration_s=duration)


def costed(scenario: Scenario, intervals: Mapping[str, float], cost_s: float) -> Scenario:
    """``scenario`` with every job of ``intervals`` (id → interval) checkpointing at its interval, each checkpoint
    costing ``cost_s`` (:func:`with_checkpoint_cost`); the other jobs as they were."""
    events = tuple(
        replace(event, action=Submit(with_checkpoint_cost(event.action.job, intervals[event.action.job.id], cost_s)))
        if isinstance(event.action, Submit) and event.action.job.id in intervals
        else event
        for event in scenario.events
    )
    return replace(scenario, events=events)


def goodput_of(
    result: ReplayResult, jobs: Mapping[str, Job], *, cost_s: float, window: tuple[float, float], spot_events: int
) -> Goodput:
    """The figures of the checkpointed jobs among ``jobs`` (as submitted, by id) in ``result`` over ``window``."""
    gpus = {job_id: _gpus(job) for job_id, job in jobs.items() if job.checkpoint_interval_s}
    allocated = lost_spot = lost_other = 0.0
    for run in result.runs:
        if run.job.id not in gpus:
            continue
        allocated += gpus[run.job.id] * _overlap(run.start, run.end, window)
        if run.outcome == "evicted":
            lost = gpus[run.job.id] * _overlap(run.end - run.lost_s, run.end, window)
            if run.reason == EvictionReason.NODE_LOST:
                lost_spot += lost
            else:
                lost_other += lost
    checkpoints = [
        event["job"]
        for event in result.events
        if event["type"] == EventType.CHECKPOINTED and event["job"] in gpus and window[0] <= event["t"] < window[1]
    ]
    intervals = [job.checkpoint_interval_s for job in jobs.values() if job.checkpoint_interval_s]
    return Goodput(
        allocated_gpu_hours=allocated / 3600.0,
        lost_spot_gpu_hours=lost_spot / 3600.0,
        lost_other_gpu_hours=lost_other / 3600.0,
        checkpoint_gpu_hours=sum(gpus[job] for job in checkpoints) * cost_s / 3600.0,
        checkpoints=len(checkpoints),
        interruptions=spot_events,
        interval_s_median=statistics.median(intervals) if intervals else None,
    )


def run_goodput(workload: Workload, config: CostConfig, reserved_servers: Mapping[str, int]) -> list[GoodputRun]:
    """Fixed against proposed intervals at run B's spot rate (and run C's when it runs), on run B's pool."""
    nodes = tiered_nodes(pool(workload.cluster, config.pool_factor), reserved_servers)
    gpus_per_node = max(node.gpu_count for node in nodes)
    rates = [config.interruptions_per_node_day]
    if config.stress_interruptions_per_node_day > 0:
        rates.append(config.stress_interruptions_per_node_day)
    window = workload.config.window
    out: list[GoodputRun] = []
    for rate in rates:
        spot = interruptions(
            nodes,
            rate_per_node_day=rate,
            until_s=workload.config.until_s,
            replace_s=config.replace_s,
            seed=workload.config.seed,
        )
        in_window = sum(isinstance(a, Interrupt) and window[0] <= t < window[1] for t, a in spot)
        tiered = scenario_for(workload, nodes, retier=job_tier, extra=spot)
        for label in (FIXED, PROPOSED):
            intervals = _intervals(tiered, label, rate, config, gpus_per_node)
            scenario = costed(tiered, intervals, config.checkpoint_cost_s)
            run, result = measure(
                f"tiered, {label}", workload, scenario, config.planner, sum(isinstance(a, Interrupt) for _, a in spot)
            )
            jobs = {job.id: replace(job, checkpoint_interval_s=intervals.get(job.id)) for job in _submitted(tiered)}
            figures = goodput_of(result, jobs, cost_s=config.checkpoint_cost_s, window=window, spot_events=in_window)
            out.append(GoodputRun(label, rate, run, figures))
    return out


def _intervals(scenario: Scenario, label: str, rate: float, config: CostConfig, gpus_per_node: int) -> dict[str, float]:
    """Job id → the interval it checkpoints at in this replay (checkpointed jobs only)."""
    chosen: dict[str, float] = {}
    for job in _submitted(scenario):
        if job.checkpoint_interval_s:
            chosen[job.id] = (
                job.checkpoint_interval_s
                if label == FIXED
                else proposed_interval(job, rate_per_node_day=rate, config=config, gpus_per_node=gpus_per_node)
            )
    return chosen


def _submitted(scenario: Scenario) -> Iterable[Job]:
    return (event.action.job for event in scenario.events if isinstance(event.action, Submit))


def _gpus(job: Job) -> int:
    """GPUs a checkpointed job holds: whole GPUs per replica (training), one for anything smaller."""
    return job.replicas * (job.request.gpus or 1)


def _overlap(start: float, end: float, window: tuple[float, float]) -> float:
    return max(0.0, min(end, window[1]) - max(start, window[0]))


# --- the report ---------------------------------------------------------------------------------------------------

FIGURES: tuple[tuple[str, str, Callable[[GoodputRun], float | None]], ...] = (
    ("checkpoint interval (median job)", "{:,.1f} min", lambda r: _minutes(r.goodput.interval_s_median)),
    ("checkpoints written", "{:,.0f}", lambda r: r.goodput.checkpoints),
    ("checkpoint GPU-hours", "{:,.2f}", lambda r: r.goodput.checkpoint_gpu_hours),
    ("lost GPU-hours, spot interruptions", "{:,.2f}", lambda r: r.goodput.lost_spot_gpu_hours),
    ("lost GPU-hours, other preemptions", "{:,.2f}", lambda r: r.goodput.lost_other_gpu_hours),
    ("spot interruptions in the window", "{:g}", lambda r: r.goodput.interruptions),
    ("lost GPU-hours per interruption", "{:,.2f}", lambda r: r.goodput.lost_per_interruption),
    ("useful GPU-hours", "{:,.1f}", lambda r: r.goodput.useful_gpu_hours),
    ("goodput", "{:.2%}", lambda r: r.goodput.goodput),
    ("completed jobs (all)", "{:g}", lambda r: r.run.completed),
    ("total cost (all)", "${:,.2f}", lambda r: r.run.total_cost),
)
KEYS = (
    "interval_min_median",
    "checkpoints",
    "checkpoint_gpu_hours",
    "lost_spot_gpu_hours",
    "lost_other_gpu_hours",
    "spot_interruptions",
    "lost_gpu_hours_per_interruption",
    "useful_gpu_hours",
    "goodput",
    "completed",
    "total_cost",
)


def payload(by_seed: Mapping[int, Sequence[GoodputRun]]) -> dict[str, Any]:
    """Per spot rate and intervals, every figure's median and spread over the seeds, and each seed's own."""
    out: dict[str, Any] = {}
    first = next(iter(by_seed.values()))
    for index, sample in enumerate(first):
        entry = out.setdefault(f"{sample.rate_per_node_day:g}", {})
        runs = {seed: list(runs)[index] for seed, runs in by_seed.items()}
        entry[sample.intervals] = {
            "median": {key: spread(f(r) for r in runs.values()) for key, (_, _, f) in zip(KEYS, FIGURES, strict=True)},
            "seeds": {
                str(seed): {key: _round(f(r)) for key, (_, _, f) in zip(KEYS, FIGURES, strict=True)}
                for seed, r in runs.items()
            },
        }
    return out


def table(entry: Mapping[str, Any], cost_s: float) -> list[str]:
    """The comparison's lines for one mix, per spot rate: fixed and proposed side by side."""
    lines: list[str] = []
    labels = [label for label, _, _ in FIGURES]
    width = max(len(label) for label in labels)
    for rate, runs in entry.items():
        lines += [
            "",
            f"goodput of checkpointed training, spot at {rate} interruptions per server-day, each checkpoint "
            f"costing {cost_s:g} s of the job's GPUs:",
        ]
        names = list(runs)
        cells = [
            [spread_text(runs[name]["median"][key], render) for name in names]
            for key, (_, render, _) in zip(KEYS, FIGURES, strict=True)
        ]
        widths = [max(len(name), *(len(row[i]) for row in cells)) for i, name in enumerate(names)]
        lines.append(" " * width + "  " + "  ".join(f"{n:>{w}}" for n, w in zip(names, widths, strict=True)))
        lines += [
            f"{label:<{width}}  " + "  ".join(f"{c:>{w}}" for c, w in zip(row, widths, strict=True))
            for label, row in zip(labels, cells, strict=True)
        ]
    return lines


def _minutes(seconds: float | None) -> float | None:
    return None if seconds is None else seconds / 60.0


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
