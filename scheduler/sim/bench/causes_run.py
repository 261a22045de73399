"""One run of ``bench causes``: the engine on one B2 workload, replayed as ``bench mixed`` replays it, with the
plans recorded (:class:`~scheduler.sim.causes.log.CauseLog`) for the attribution.

The replay is ``bench mixed``'s (:func:`scheduler.sim.bench.mixed_run.run_planner`): the same workload
(:func:`scheduler.sim.bench.mixed_matrix.workload_of`), the plan repair
(:func:`~scheduler.sim.bench.mixed_run.guarded`), the topology model's speed hook, the per-cycle
:class:`~scheduler.sim.records.CycleLog` over the window and :func:`~scheduler.sim.metrics.window_metrics`.
The recorder only observes (a test checks the figures equal ``run_planner``'s), so the runs' figures are
``bench mixed``'s figures for ``microcosm``.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from scheduler.core.model.plan import Plan
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Snapshot
from scheduler.sim.bench.mixed_matrix import Setup, workload_of
from scheduler.sim.bench.mixed_run import Repairs, guarded
from scheduler.sim.causes.idle import IdleCauses, idle_causes
from scheduler.sim.causes.log import CauseLog
from scheduler.sim.causes.waits import ProductionWaits, production_waits
from scheduler.sim.idle_pending import held_s
from scheduler.sim.metrics import window_metrics
from scheduler.sim.planners import PLANNERS
from scheduler.sim.records import CycleLog
from scheduler.sim.replay import PlanViolation, replay
from scheduler.sim.topology_model import topology_speed
from scheduler.sim.workload.mixed import Workload

POLICY = "microcosm"


@dataclass(frozen=True)
class CauseRun:
    """One mix and seed: the metrics of ``bench mixed`` for the engine, and the two attributions (None when the
    run failed: ``error`` says how)."""

    mix: str
    seed: int
    wall_s: float
    metrics: dict[str, Any] | None
    waits: ProductionWaits | None
    idle: IdleCauses | None
    plan_repairs: int = 0
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        if self.error is not None or self.metrics is None or self.waits is None or self.idle is None:
            return {"status": "failed", "error": self.error, "wall_s": round(self.wall_s, 1)}
        return {
            "status": "ok",
            "production_inference_wait_s": self.metrics["production_inference_wait_s"],
            "idle_while_pending": self.metrics.get("idle_while_pending"),
            "plan_repairs": self.plan_repairs,
            "production_waits": self.waits.as_dict(),
            "idle_while_pending_causes": self.idle.as_dict(),
            "wall_s": round(self.wall_s, 1),
        }


def run_causes(workload: Workload, mix: str = "", seed: int = 0) -> CauseRun:
    """Replay ``workload`` with the engine as ``bench mixed`` does, and attribute its waits (module doc)."""
    repairs = Repairs()
    scenario = workload.scenario
    window = workload.config.window
    log = CauseLog(window=window)
    cycles = CycleLog(window=window)
    last = {"now": 0.0}
    inner = log.observing(guarded(PLANNERS[POLICY], repairs))

    def planner(snapshot: Snapshot, policy: Policy, now: float) -> Plan:
        last["now"] = now
        return inner(snapshot, policy, now)

    started = time.perf_counter()
    try:
        result = replay(scenario, planner, speed=topology_speed(workload.cluster.fabric), cycles=cycles)
    except PlanViolation as violation:
        return CauseRun(mix, seed, time.perf_counter() - started, None, None, None, error=str(violation))
    except Exception as crash:  # the planner's own failure is a result to report, not to hide
        error = f"the planner raised {type(crash).__name__} at the cycle t={last['now']:g}: {crash}"
        return CauseRun(mix, seed, time.perf_counter() - started, None, None, None, error=error)
    nodes = {node.name: node for node in scenario.nodes}
    policy = scenario.policy
    metrics = window_metrics(result, workload.jobs, nodes, policy, window, cycles)
    log.dropped((float(drop["t"]), str(drop["job"])) for drop in repairs.dropped_binds)
    rejected = {str(event["job"]): float(event["t"]) for event in result.events if event["type"] == "rejected"}
    held = held_s(cycles.samples, window, policy.cycle_s)
    waits = production_waits(workload.jobs, result.runs, result.end, rejected, cycles.samples, held, log, window)
    idle = idle_causes(cycles.samples, nodes, policy, result.capacity, window, log)
    return CauseRun(mix, seed, time.perf_counter() - started, metrics, waits, idle, len(repairs.dropped_binds))


def _run(setup: Setup, mix: str, seed: int) -> CauseRun:
    return run_causes(workload_of(setup, mix, seed), mix, seed)


def run_all(setup: Setup, runs: Sequence[tuple[str, int]], workers: int = 1) -> list[CauseRun]:
    """Every (mix, seed) run, in order; ``workers`` > 1 runs them in that many processes (fork), as ``bench
    mixed`` does."""
    if workers <= 1 or len(runs) <= 1:
        return [_run(setup, mix, seed) for mix, seed in runs]
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(max_workers=min(workers, len(runs)), mp_context=context) as pool:
        return list(pool.map(_run, [setup] * len(runs), [m for m, _ in runs], [s for _, s in runs]))
