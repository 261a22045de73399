"""Running several planners side by side on one generated workload (B2 ``mixed``, B3 ``topology``).

Every policy replays the same :class:`~scheduler.sim.Scenario` with the topology model's speed hook, and its
figures come from :func:`scheduler.sim.metrics.window_metrics` over the same window.

Plan repair (disclosed in every output): a plan that binds a job on a node being reconfigured — in the
snapshot or by the same plan — breaks the replay's rule that nothing new binds on a node being reconfigured
(spec/scenario.md; the MIG Manager needs the node drained: ``docs/gpu-facts.md``, MIG Manager
reconfiguration flow). Rather than stop the whole benchmark, :func:`guarded` drops such binds (the job stays
pending and is planned again next cycle) and counts them in ``plan_repairs``; ``strict=True`` stops the
policy's run with the violation instead. Any other violation — or an exception raised by the planner itself —
stops that policy's run, which is then reported as failed with the message and the cycle's time; the other
policies still run.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from scheduler.core.model.plan import Plan
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Snapshot
from scheduler.sim.metrics import utilization_series, window_metrics
from scheduler.sim.planners import PLANNERS, Planner
from scheduler.sim.records import CycleLog
from scheduler.sim.replay import PlanViolation, replay
from scheduler.sim.topology_model import topology_speed
from scheduler.sim.workload.mixed import Workload

PLANNER_ORDER = ("naive", "k8s-default", "binpack", "fgd", "microcosm")


@dataclass
class Repairs:
    dropped_binds: list[dict[str, Any]] = field(default_factory=list)


def guarded(planner: Planner, repairs: Repairs) -> Planner:
    """``planner`` with binds on nodes being reconfigured dropped and recorded (module docstring)."""

    def plan(snapshot: Snapshot, policy: Policy, now: float) -> Plan:
        result = planner(snapshot, policy, now)
        changing = {node.name for node in snapshot.nodes if node.reconfiguring_until is not None}
        changing |= {change.node for change in result.reconfigurations if change.ready_at > now}
        if not changing or not result.binds:
            return result
        kept = []
        for bind in result.binds:
            nodes = sorted({slot.node for replica in bind.slots for slot in replica} & changing)
            if nodes:
                repairs.dropped_binds.append({"t": now, "job": bind.job, "nodes": nodes})
            else:
                kept.append(bind)
        return replace(result, binds=tuple(kept))

    return plan


@dataclass(frozen=True)
class PlannerResult:
    name: str
    metrics: dict[str, Any] | None  # None: the run failed
    series: tuple[tuple[float, float, float], ...]
    wall_s: float
    plan_repairs: int
    first_repair: dict[str, Any] | None = None
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": "ok" if self.error is None else "failed"}
        if self.error is not None:
            out["error"] = self.error
        out.update(self.metrics or {})
        out["plan_repairs"] = self.plan_repairs
        if self.first_repair is not None:
            out["first_repair"] = self.first_repair
        out["wall_s"] = round(self.wall_s, 1)
        return out


def check_planners(names: Sequence[str]) -> list[str]:
    """The names, validated against the registry; ValueError names the unknown ones and the known ones."""
    unknown = [name for name in names if name not in PLANNERS]
    if unknown:
        raise ValueError(f"unknown policies {', '.join(unknown)}; known: {', '.join(PLANNERS)}")
    if not names:
        raise ValueError("name at least one policy")
    return list(dict.fromkeys(names))


def run_planner(workload: Workload, name: str, *, strict: bool = False, cycles: bool = False) -> PlannerResult:
    """Replay ``workload`` with the planner registered as ``name`` and compute its window figures; ``cycles``:
    record every cycle's queue too, for ``idle_while_pending`` and ``eta_error`` (B2 needs them, B3 does not)."""
    repairs = Repairs()
    inner = PLANNERS[name] if strict else guarded(PLANNERS[name], repairs)
    last = {"now": 0.0}

    def planner(snapshot: Snapshot, policy: Policy, now: float) -> Plan:
        last["now"] = now
        return inner(snapshot, policy, now)

    scenario = workload.scenario
    nodes = {node.name: node for node in scenario.nodes}
    log = CycleLog(window=workload.config.window) if cycles else None
    started = time.perf_counter()
    error: str | None
    try:
        result = replay(scenario, planner, speed=topology_speed(workload.cluster.fabric), cycles=log)
    except PlanViolation as violation:
        error = str(violation)
    except Exception as crash:  # the planner's own failure is a result to report, not to hide
        error = f"the planner raised {type(crash).__name__} at the cycle t={last['now']:g}: {crash}"
    else:
        error = None
    if error is not None:
        return PlannerResult(name, None, (), time.perf_counter() - started, len(repairs.dropped_binds), None, error)
    metrics = window_metrics(result, workload.jobs, nodes, scenario.policy, workload.config.window, log)
    series = utilization_series(result, nodes, scenario.policy, workload.config.window)
    first = repairs.dropped_binds[0] if repairs.dropped_binds else None
    return PlannerResult(name, metrics, tuple(series), time.perf_counter() - started, len(repairs.dropped_binds), first)
