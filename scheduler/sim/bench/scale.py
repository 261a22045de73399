"""B5 ``scale``: how long one scheduling cycle of the real engine takes on a large synthetic cluster.

Protocol (spec/benchmarks.md B5; the targets are in ``docs/benchmarks/scale.md``):

1. Build the snapshot of a :class:`ClusterShape` (:mod:`scheduler.sim.bench.synthetic`); its build time is
   reported separately and is never part of the cycle's time.
2. Run :func:`scheduler.core.plan_cycle` on it ``repeat`` times, each after a full garbage collection, timing
   each run with ``clock`` (``time.perf_counter``); report the median and the maximum. The benchmark leaves
   the garbage collector as a worker has it: the cyclic collector is off while a cycle plans
   (:func:`scheduler.gcpause.gc_paused`), in the loop as here. The first run starts with the engine's pure
   caches (layouts, reconfiguration choices) cold, as a worker's first cycle does.
3. Run it once more under ``tracemalloc`` for the peak of memory the cycle allocates on top of the snapshot
   (tracemalloc slows allocation down, so that run is not timed), and read the process's maximum resident set
   (``getrusage``: a high-water mark of the whole process, snapshot and earlier sizes included).
4. Check the plan: every repeat gave the same plan (the engine is deterministic), and the plan applies to the
   snapshot — evictions, then MIG reconfigurations of idle GPUs, then binds on free slots — without a conflict.

Decisions per second = (binds + evictions + rejections + reconfigurations + waiting) / median wall time:
every pending job gets exactly one answer, and an eviction is a decision of its own.
"""

from __future__ import annotations

import gc
import resource
import statistics
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from scheduler.core import Plan, Policy, Snapshot, plan_cycle
from scheduler.core.gpus.units import UNITS_PER_GPU
from scheduler.core.model.cluster_state import ClusterState, slot_units
from scheduler.gcpause import gc_paused
from scheduler.sim.bench.synthetic import NOW, ClusterShape, synthetic_snapshot

MIB = 1024 * 1024

# The targets of B5 in the shared benchmark spec, for (nodes, GPUs per node, pending jobs), on the project's 2-core
# machine: 2.3 s at 5,000 nodes is what KAI-Scheduler reports per cycle at about 4,000.
TARGETS_S: dict[tuple[int, int, int], float] = {(1_000, 8, 10_000): 0.5, (5_000, 8, 50_000): 2.3}
DEFAULT_SIZES: tuple[tuple[int, int], ...] = ((1_000, 10_000), (5_000, 50_000))  # (nodes, pending)
PENDING_PER_NODE = 10  # --nodes without --pending: the ratio


def target_s(shape: ClusterShape) -> float | None:
    """The issue's time target for this size, or None when the issue sets none."""
    return TARGETS_S.get((shape.nodes, shape.gpus_per_node, shape.pending))


@dataclass(frozen=True, slots=True)
class ScaleResult:
    """The figures of one size; ``wall_s`` holds every timed run, in order."""

    shape: ClusterShape
    running_jobs: int
    busy_gpu_fraction: float
    snapshot_build_s: float
    wall_s: tuple[float, ...]
    tracemalloc_peak_mib: float
    max_rss_mib: float
    counts: dict[str, int] = field(default_factory=dict)
    deterministic: bool = True
    plan_problem: str | None = None  # None: the plan applied to the snapshot cleanly

    @property
    def median_s(self) -> float:
        return statistics.median(self.wall_s)

    @property
    def max_s(self) -> float:
        return max(self.wall_s)

    @property
    def decisions(self) -> int:
        return sum(self.counts.values())

    @property
    def decisions_per_s(self) -> float:
        return self.decisions / self.median_s if self.median_s > 0 else float("inf")

    @property
    def target_s(self) -> float | None:
        return target_s(self.shape)

    @property
    def target_met(self) -> bool | None:
        """Every timed run (so the maximum) within the target; None when the issue sets no target for this size."""
        target = self.target_s
        return None if target is None else self.max_s <= target

    def as_dict(self) -> dict[str, Any]:
        shape = self.shape
        return {
            "nodes": shape.nodes,
            "gpus_per_node": shape.gpus_per_node,
            "gpus": shape.nodes * shape.gpus_per_node,
            "pending": shape.pending,
            "seed": shape.seed,
            "teams": shape.teams,
            "running_jobs": self.running_jobs,
            "busy_gpu_fraction": round(self.busy_gpu_fraction, 4),
            "snapshot_build_s": round(self.snapshot_build_s, 4),
            "wall_s": {
                "median": round(self.median_s, 4),
                "max": round(self.max_s, 4),
                "runs": [round(w, 4) for w in self.wall_s],
            },
            "tracemalloc_peak_mib": round(self.tracemalloc_peak_mib, 1),
            "max_rss_mib": round(self.max_rss_mib, 1),
            "decisions": {**self.counts, "total": self.decisions},
            "decisions_per_s": round(self.decisions_per_s, 1),
            "target_s": self.target_s,
            "target_met": self.target_met,
            "deterministic": self.deterministic,
            "plan_valid": self.plan_problem is None,
            "plan_problem": self.plan_problem,
        }


def measure(
    shape: ClusterShape,
    repeat: int = 3,
    policy: Policy | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> ScaleResult:
    """Run the protocol of the module doc on ``shape``; ``repeat`` ≥ 1 timed cycles."""
    if repeat < 1:
        raise ValueError("repeat must be at least 1")
    policy = policy or Policy()
    gc.collect()
    started = clock()
    snapshot = synthetic_snapshot(shape)
    build_s = clock() - started

    walls: list[float] = []
    first: Plan | None = None
    deterministic = True
    for _ in range(repeat):
        gc.collect()
        with gc_paused():
            started = clock()
            plan = plan_cycle(snapshot, policy, NOW)
            walls.append(clock() - started)
        if first is None:
            first = plan
        elif plan != first:
            deterministic = False
    assert first is not None

    gc.collect()
    tracemalloc.start()
    try:
        with gc_paused():
            plan_cycle(snapshot, policy, NOW)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()

    return ScaleResult(
        shape=shape,
        running_jobs=len(snapshot.running),
        busy_gpu_fraction=busy_fraction(snapshot),
        snapshot_build_s=build_s,
        wall_s=tuple(walls),
        tracemalloc_peak_mib=peak / MIB,
        max_rss_mib=max_rss_mib(),
        counts=plan_counts(first),
        deterministic=deterministic,
        plan_problem=plan_problem(snapshot, first),
    )


def plan_counts(plan: Plan) -> dict[str, int]:
    return {
        "binds": len(plan.binds),
        "evictions": len(plan.evictions),
        "rejections": len(plan.rejections),
        "reconfigurations": len(plan.reconfigurations),
        "waiting": len(plan.waiting),
    }


def busy_fraction(snapshot: Snapshot) -> float:
    """Share of the cluster's GPU capacity that the snapshot's running work holds."""
    state = ClusterState(Snapshot(nodes=snapshot.nodes, teams=()))
    held = 0
    for running in snapshot.running:
        for replica in running.slots:
            for slot in replica:
                held += slot_units(slot, state.gpus[(slot.node, slot.gpu)].spec)
    return held / (UNITS_PER_GPU * len(state.gpus)) if state.gpus else 0.0


def plan_problem(snapshot: Snapshot, plan: Plan) -> str | None:
    """None if ``plan`` applies to ``snapshot`` in order (evictions, reconfigurations, binds) with no conflict,
    every pending job is answered exactly once and no job is both bound and waiting; else what went wrong."""
    state = ClusterState(snapshot)
    try:
        for evict in plan.evictions:
            state.remove(evict.job)
        for change in plan.reconfigurations:
            state.set_layout(change.node, change.gpu, change.new)
        pending = {job.id: job for job in snapshot.pending}
        for bind in plan.binds:
            state.place(pending[bind.job] if bind.job in pending else state.jobs[bind.job], bind.slots)
    except (KeyError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"
    answered = [b.job for b in plan.binds if b.job in pending]  # a bind may also restart an evicted job
    answered += [r.job for r in plan.rejections] + [w.job for w in plan.waiting]
    if sorted(answered) != sorted(set(answered)):
        return "a pending job is answered more than once (bound, rejected or waiting)"
    if set(answered) != set(pending) - set(state.running):
        return "some pending job is neither bound, rejected nor waiting"
    return None


def max_rss_mib() -> float:
    """The process's maximum resident set so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
