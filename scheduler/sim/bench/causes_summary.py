"""``bench causes`` over seeds: each run's attribution as shares (``flat``), and each share's median and spread
(min–max) over the seeds of a mix (:func:`scheduler.sim.bench.seeds.spread`).

Keys of :func:`flat` (shares are fractions of 1; None when the run had nothing to share):

- ``production.p95_s``: ``bench mixed``'s production inference wait p95 (all production inference, any wait);
- ``production.jobs``, ``production.wait_h``: the production inference jobs that waited more than 30 s, and
  their wait in hours (:mod:`scheduler.sim.causes.waits`);
- ``production.kind.<kind>``: share of that wait with the kind of block (every kind a seed saw);
- ``production.capacity.<category>``: share of the ``capacity``-blocked wait in each
  :mod:`~scheduler.sim.causes.room` category; ``production.capacity.a_room`` and ``…b_lower``: the shares
  where (a) room was free (any tier) and (b) lower-priority work ran where the job could (``…b_preemptible``:
  some of it preemptible), each whatever the other;
- ``production.avoidable_p95_s``, ``production.avoidable_max_s``: ``bench mixed``'s avoidable production wait
  (:mod:`scheduler.sim.avoidable`; every production job, any wait); ``production.unavoidable_h``: the
  rest of their judged wait, in hours;
- ``production.unavoidable.<cause/class>``: share of that rest by why no placement existed — ``burst/<class>``:
  room only above the team's burst limit, ``held/<class>``: none even with all lower-priority work evicted
  (production's own demand above what production may hold on that class);
- ``idle.figure``: ``idle_while_pending`` (``bench mixed``'s figure); ``idle.gap_gpu_h``: its GPU-hours;
- ``idle.<dimension>.<label>``: share of the gap's GPU-time (:mod:`scheduler.sim.causes.idle`);
- ``idle.blocker_class.<blocker / class>``, ``idle.blocker_place.<blocker / place>``: the same by blocker and
  class, and by blocker and where the fit put the work.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.sim.bench.causes_run import CauseRun
from scheduler.sim.bench.seeds import Spread, spread

GROUPS = (
    "production.kind",
    "production.unavoidable",
    "production.capacity",
    "idle.blocker",
    "idle.priority",
    "idle.kind",
    "idle.gang",
    "idle.place",
    "idle.blocker_class",
    "idle.blocker_place",
)


@dataclass(frozen=True)
class Flat:
    """One run's figures by key, and its shares by group → label (a group is None when its total was 0)."""

    figures: dict[str, float | None]
    groups: dict[str, dict[str, float] | None]


def _shares(parts: Mapping[str, float], total: float) -> dict[str, float] | None:
    return {label: seconds / total for label, seconds in parts.items()} if total else None


def flat(run: CauseRun) -> Flat | None:
    """One run's figures and shares (module doc); None for a failed run."""
    if run.metrics is None or run.waits is None or run.idle is None:
        return None
    waits, idle = run.waits, run.idle
    capacity_s = sum(waits.capacity.values())
    avoidable = run.metrics.get("production_avoidable_wait_s") or {}
    unavoidable = run.metrics.get("production_unavoidable_wait_s") or {}
    unavoidable_s = sum(unavoidable.values())
    figures: dict[str, float | None] = {
        "production.p95_s": run.metrics["production_inference_wait_s"]["p95"],
        "production.jobs": float(waits.jobs),
        "production.wait_h": waits.wait_s / 3600.0,
        "production.capacity.a_room": waits.room_s / capacity_s if capacity_s else None,
        "production.capacity.b_lower": waits.lower_s / capacity_s if capacity_s else None,
        "production.capacity.b_preemptible": waits.lower_preemptible_s / capacity_s if capacity_s else None,
        "production.avoidable_p95_s": avoidable.get("p95"),
        "production.avoidable_max_s": avoidable.get("max"),
        "production.unavoidable_h": unavoidable_s / 3600.0,
        "idle.figure": run.metrics.get("idle_while_pending"),
        "idle.gap_gpu_h": idle.gap_gpu_s / 3600.0,
    }
    groups = {
        "production.kind": _shares(waits.by_kind, waits.wait_s),
        "production.capacity": _shares(waits.capacity, capacity_s),
        "production.unavoidable": _shares(unavoidable, unavoidable_s),
        **{f"idle.{dimension}": _shares(parts, idle.gap_gpu_s) for dimension, parts in idle.by.items()},
    }
    return Flat(figures, groups)


def group_labels(rows: Iterable[Flat], group: str) -> list[str]:
    """The labels of ``group`` that any run has, in first-seen order."""
    seen: dict[str, None] = {}
    for row in rows:
        seen.update(dict.fromkeys(row.groups.get(group) or {}))
    return list(seen)


def spreads(rows: Sequence[Flat]) -> dict[str, Spread]:
    """Every figure and every ``group.label`` share → its median and spread over the runs. A share a run lacks
    counts as 0 for it (it saw none of that); a run whose group was empty (total 0) is left out of the group."""
    out: dict[str, Spread] = {}
    for key in dict.fromkeys(key for row in rows for key in row.figures):
        out[key] = spread(row.figures.get(key) for row in rows)
    for group in GROUPS:
        for label in group_labels(rows, group):
            values = [(row.groups.get(group) or {}).get(label, 0.0) for row in rows if row.groups.get(group)]
            out[f"{group}.{label}"] = spread(values)
    return out


def payload_of(runs: Sequence[CauseRun]) -> dict[str, Any]:
    """A mix's JSON: the medians and spreads over the seeds, and every seed's run."""
    rows = [row for row in (flat(run) for run in runs) if row is not None]
    return {"median": spreads(rows), "seeds": {str(run.seed): run.as_dict() for run in runs}}
