"""Figures of a replay over a measurement window (B2/B3, spec/benchmarks.md), from its run log.

A window ``[start, end)`` excludes the warm-up. Definitions:

- **true need** of a running job (what it would hold on a perfectly right-sized cluster), per replica on the
  GPU model it runs on: :func:`scheduler.core.sizing.need.replica_need` (the live ``/metrics`` gauge reads the same).
  A 10 GiB service on a whole 80 GB GPU needs 1/7 of it.
- ``effective_utilization``: ∫ Σ true need of the running jobs dt / ∫ GPUs present dt over the window, with
  the need-seconds of work later thrown away taken out: an evicted training or batch run loses its work since
  the last checkpoint. An inference service's served time is never lost (it served requests while it ran),
  so its evictions take nothing out; the replay still restarts its remaining lifetime from its last
  checkpoint (none), so an evicted service lives longer than drawn — more demand, never more credit.
- ``allocation_ratio``: the same with what the jobs hold (GPU-equivalents: a whole GPU 1, a MIG instance its
  compute slices / 7, a share milli / 1000), nothing taken out.
- ``queue_wait_s``: per priority class, p50 / p95 / max of (first start − submission) of the jobs submitted
  in the window; a job still waiting at the end counts with its wait so far (a lower bound), and
  ``still_waiting`` says how many did; rejected jobs are left out and counted in ``rejected``.
  ``production_inference_wait_s`` is the same for production inference.
- ``completed``: jobs that completed inside the window; ``evictions``: runs evicted inside it (preemption or
  node loss, services included); ``lost_gpu_hours``: the need-hours of training and batch work those evictions
  threw away inside the window.
- ``training_throughput``: training work done in the window, in GPU-hours at ideal speed per hour of window:
  Σ GPUs × rate × time (the rate is the topology model's speed of the run's placement), minus the work lost
  to evictions; a job on a slow placement contributes less than its GPU-hours. ``distributed_speed``: the
  GPU-time-weighted mean speed of the multi-GPU training runs (1 = every one on an ideal placement).
  ``without_fabric``: the multi-node training runs on nodes without a common fabric, their GPU-hours and mean
  speed (:mod:`scheduler.sim.fabric_runs`).
- ``evictions_by_cause`` (:mod:`scheduler.sim.evictions`) and ``evictions_per_8h``: the evictions split by
  why they happened, and their count scaled to an 8-hour window.
- ``moves`` and ``moves_per_8h``: the moves (production moved make-before-break to its right-sized slice,
  docs/scheduling-rules.md, Place now, consolidate later) begun inside the window, and their count scaled to an
  8-hour window. A move loses no work and is no eviction; the run log splits a moved run at the move (outcome
  ``moved``), so each placement is counted at what it holds.

With the replay's per-cycle record (``cycles``, a :class:`~scheduler.sim.records.CycleLog`) also
``idle_while_pending`` (:mod:`scheduler.sim.idle_pending`), ``eta_error`` (:mod:`scheduler.sim.eta_error`) and,
for the production jobs ``queue_wait_s`` counts (in B2 these are the production inference services), the part
of their wait that was avoidable (:mod:`scheduler.sim.avoidable`): ``production_avoidable_wait_s`` (p50 / p95 /
max over those jobs of one cycle for every cycle before its first start whose verdict was ``avoidable``) and
``production_unavoidable_wait_s`` (the other judged seconds of those jobs, summed, by ``cause/GPU class``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from scheduler.core.gpus.catalog import GPU_MODEL_BY_NAME
from scheduler.core.gpus.units import FULL_GPU_MILLI, UNITS_PER_GPU
from scheduler.core.model.cluster_state import slot_units
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Node
from scheduler.core.model.vocabulary import JobKind, Priority
from scheduler.core.sizing.need import replica_need
from scheduler.sim.records import CycleLog, RunLog
from scheduler.sim.report import ReplayResult

PERCENTILES = (50, 95)
SERIES_BUCKET_S = 600.0


def job_need(job: Job, gpu_model: str, policy: Policy) -> float:
    return replica_need(job, gpu_model, policy) * job.replicas


def _overlap(start: float, end: float, window: tuple[float, float]) -> float:
    return max(0.0, min(end, window[1]) - max(start, window[0]))


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (the smallest value with at least q % of the values at or below it)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass(frozen=True)
class RunFigures:
    """Per-run quantities the metrics integrate."""

    need: float
    held: float
    gpus: int  # whole GPUs (the training work unit)


def _figures(run: RunLog, nodes: Mapping[str, Node], policy: Policy) -> RunFigures:
    held = 0.0
    gpus = 0
    for replica in run.slots:
        for slot in replica:
            spec = GPU_MODEL_BY_NAME.get(nodes[slot.node].gpu_model)
            held += slot_units(slot, spec) / UNITS_PER_GPU
            gpus += 1 if slot.mig_profile is None and slot.milli >= FULL_GPU_MILLI else 0
    first = run.slots[0][0].node
    need = min(held, job_need(run.job, nodes[first].gpu_model, policy))
    return RunFigures(need=need, held=held, gpus=gpus)


def capacity_gpu_s(capacity: Sequence[tuple[float, int]], window: tuple[float, float]) -> float:
    """∫ GPUs present dt over the window, from the replay's ``(t, GPUs from t on)`` log."""
    total = 0.0
    for i, (t, gpus) in enumerate(capacity):
        until = capacity[i + 1][0] if i + 1 < len(capacity) else math.inf
        total += gpus * _overlap(t, until, window)
    return total


def window_metrics(
    result: ReplayResult,
    jobs: Iterable[Job],
    nodes: Mapping[str, Node],
    policy: Policy,
    window: tuple[float, float],
    cycles: CycleLog | None = None,
) -> dict[str, object]:
    """The B2 figures of ``result`` over ``window`` (module docstring); ``jobs``: every job submitted;
    ``cycles``: the replay's per-cycle record, for the figures that need it (None: they are left out)."""
    # The metric modules below build on this one's definitions (replica_need, percentile): imported here.
    from scheduler.sim.eta_error import eta_error_summary, eta_errors
    from scheduler.sim.evictions import evictions_by_cause, per_window
    from scheduler.sim.fabric_runs import without_fabric
    from scheduler.sim.idle_pending import idle_while_pending

    jobs = list(jobs)
    capacity = capacity_gpu_s(result.capacity, window)
    hours = (window[1] - window[0]) / 3600.0
    need_s = held_s = lost_need_s = work_gpu_s = lost_work_gpu_s = spread_gpu_s = spread_work_gpu_s = 0.0
    first_start: dict[str, float] = {}
    completed = evictions = moves = 0
    for run in result.runs:
        first_start[run.job.id] = min(first_start.get(run.job.id, math.inf), run.start)
        amounts = _figures(run, nodes, policy)
        ran = _overlap(run.start, run.end, window)
        cumulative = run.job.kind != JobKind.INFERENCE  # served time is not lost work (module docstring)
        lost = _overlap(run.end - run.lost_s, run.end, window) if run.outcome == "evicted" and cumulative else 0.0
        need_s += amounts.need * ran
        held_s += amounts.held * ran
        lost_need_s += amounts.need * lost
        if run.job.kind == JobKind.TRAINING:
            work_gpu_s += amounts.gpus * run.rate * ran
            if amounts.gpus > 1:
                spread_gpu_s += amounts.gpus * ran
                spread_work_gpu_s += amounts.gpus * run.rate * ran
            lost_work_gpu_s += amounts.gpus * run.rate * lost
        if window[0] <= run.end < window[1]:
            completed += run.outcome == "completed"
            evictions += run.outcome == "evicted"
            moves += run.outcome == "moved"
    rejected = {event["job"] for event in result.events if event["type"] == "rejected"}
    waits: dict[str, list[float]] = {p.value: [] for p in Priority}
    production_inference: list[float] = []
    production_ids: list[str] = []
    still_waiting: dict[str, int] = {p.value: 0 for p in Priority}
    for job in jobs:
        if not window[0] <= job.submitted_at < window[1] or job.id in rejected:
            continue
        started = first_start.get(job.id)
        if started is None or started >= result.end:
            still_waiting[job.priority.value] += 1
            wait = max(0.0, result.end - job.submitted_at)
        else:
            wait = started - job.submitted_at
        waits[job.priority.value].append(wait)
        if job.priority == Priority.PRODUCTION:
            production_ids.append(job.id)
            if job.kind == JobKind.INFERENCE:
                production_inference.append(wait)
    figures: dict[str, object] = {
        "effective_utilization": round((need_s - lost_need_s) / capacity, 6) if capacity else 0.0,
        "allocation_ratio": round(held_s / capacity, 6) if capacity else 0.0,
        "queue_wait_s": {
            cls: {**_summary(values), "jobs": len(values), "still_waiting": still_waiting[cls]}
            for cls, values in waits.items()
            if values
        },
        "production_inference_wait_s": _summary(production_inference),
        "completed": completed,
        "training_throughput": round((work_gpu_s - lost_work_gpu_s) / 3600.0 / hours, 4) if hours else 0.0,
        "distributed_speed": round(spread_work_gpu_s / spread_gpu_s, 4) if spread_gpu_s else None,
        "lost_gpu_hours": round(lost_need_s / 3600.0, 4),
        "evictions": evictions,
        "evictions_per_8h": per_window(evictions, window),
        "evictions_by_cause": evictions_by_cause(result.runs, nodes, window),
        "moves": moves,
        "moves_per_8h": per_window(moves, window),
        "rejected": len(rejected),
        "without_fabric": without_fabric(result.runs, nodes, window),
    }
    if cycles is not None:
        figures["idle_while_pending"] = idle_while_pending(cycles.samples, nodes, policy, result.capacity, window)
        began = {job: t for job, t in first_start.items() if t < result.end}
        errors, without = eta_errors(jobs, began, cycles.etas, window, policy.cycle_s)
        figures["eta_error"] = eta_error_summary(errors, without)
        figures.update(_avoidable(production_ids, first_start, cycles, policy.cycle_s))
    return figures


def _avoidable(
    jobs: Sequence[str], first_start: Mapping[str, float], cycles: CycleLog, cycle_s: float
) -> dict[str, object]:
    """``production_avoidable_wait_s`` and ``production_unavoidable_wait_s`` of ``jobs`` (module docstring)."""
    avoidable, unavoidable = avoidable_wait_s(jobs, first_start, cycles, cycle_s)
    return {
        "production_avoidable_wait_s": _summary(list(avoidable.values())),
        "production_unavoidable_wait_s": dict(sorted(unavoidable.items())),
    }


def avoidable_wait_s(
    jobs: Sequence[str], first_start: Mapping[str, float], cycles: CycleLog, cycle_s: float
) -> tuple[dict[str, float], dict[str, float]]:
    """B2's count of ``jobs``' judged waiting seconds: per job, one cycle for every recorded verdict ``avoidable``
    before its first start (a job that never started: every verdict to the replay's end); and the other judged
    seconds of those jobs summed by ``cause/GPU class``. B4's production SLO counts its misses on the first."""
    avoidable = dict.fromkeys(jobs, 0.0)
    unavoidable: dict[str, float] = {}
    for t, verdicts in cycles.verdicts:
        for job, verdict in verdicts:
            if job not in avoidable or t >= first_start.get(job, math.inf):
                continue
            if verdict.avoidable:
                avoidable[job] += cycle_s
            else:
                key = f"{verdict.cause}/{verdict.gpu_class}"
                unavoidable[key] = unavoidable.get(key, 0.0) + cycle_s
    return avoidable, unavoidable


def _summary(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p95": None, "max": None}
    return {
        "p50": round(percentile(values, 50), 3),
        "p95": round(percentile(values, 95), 3),
        "max": round(max(values), 3),
    }


def utilization_series(
    result: ReplayResult,
    nodes: Mapping[str, Node],
    policy: Policy,
    window: tuple[float, float],
    bucket_s: float = SERIES_BUCKET_S,
) -> list[tuple[float, float, float]]:
    """``(bucket start, effective, allocated)`` over the window in buckets of ``bucket_s`` (lost work kept in:
    a time series shows what ran)."""
    buckets = max(1, math.ceil((window[1] - window[0]) / bucket_s))
    need = [0.0] * buckets
    held = [0.0] * buckets
    for run in result.runs:
        if run.end <= window[0] or run.start >= window[1]:
            continue
        figures = _figures(run, nodes, policy)
        first = int((max(run.start, window[0]) - window[0]) // bucket_s)
        last = min(buckets - 1, int((min(run.end, window[1]) - window[0]) // bucket_s))
        for b in range(first, last + 1):
            lo = window[0] + b * bucket_s
            part = _overlap(run.start, run.end, (lo, min(lo + bucket_s, window[1])))
            need[b] += figures.need * part
            held[b] += figures.held * part
    series = []
    for b in range(buckets):
        lo = window[0] + b * bucket_s
        cap = capacity_gpu_s(result.capacity, (lo, min(lo + bucket_s, window[1])))
        series.append((lo, need[b] / cap if cap else 0.0, held[b] / cap if cap else 0.0))
    return series
