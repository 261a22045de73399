"""Evictions split by why they happened (spec B2: "evictions, split by reason").

The replay keeps each eviction's reason (:attr:`scheduler.sim.records.RunLog.reason`): the plan's own
``Evict.reason`` or the replay's ``node-lost``. They fold into the causes a reader can act on:

| cause | reasons | what happened |
|---|---|---|
| ``priority`` | ``priority``, ``production`` | a higher-priority job preempted it (baselines: kube-scheduler's rule) |
| ``reclaim`` | ``reclaim`` | its team was borrowing; the lender took its guarantee back |
| ``backfill`` | ``backfill`` | it backfilled GPUs a reservation held, and yielded them when the reservation started |
| ``reconfiguration`` | ``repartition`` | its GPU was drained for a MIG reconfiguration |
| ``spot`` | ``node-lost`` on a spot node | a spot interruption took the node |
| ``node-lost`` | ``node-lost`` on any other node | the node went away (removed, failed) |

A reason outside the table is kept under its own name, so a new engine reason shows up instead of hiding.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from scheduler.core.model.snapshot import Node
from scheduler.core.model.vocabulary import CapacityTier, EvictionReason
from scheduler.sim.records import RunLog

CAUSES = ("priority", "reclaim", "backfill", "reconfiguration", "spot", "node-lost")
_BY_REASON: dict[str, str] = {
    EvictionReason.PRIORITY: "priority",
    EvictionReason.PRODUCTION: "priority",
    EvictionReason.RECLAIM: "reclaim",
    EvictionReason.BACKFILL: "backfill",
    EvictionReason.RECONFIGURE: "reconfiguration",
}
WINDOW_HOURS = 8.0  # the B2 eviction target is per 8 h window (docs/benchmarks/mixed.md)


def cause(run: RunLog, nodes: Mapping[str, Node]) -> str:
    """The cause of an evicted run (module table)."""
    reason = run.reason or "unknown"
    if reason == EvictionReason.NODE_LOST:
        first = run.slots[0][0].node if run.slots and run.slots[0] else None
        node = nodes.get(first) if first is not None else None
        return "spot" if node is not None and node.tier == CapacityTier.SPOT else "node-lost"
    return _BY_REASON.get(reason, reason)


def evictions_by_cause(
    runs: Iterable[RunLog], nodes: Mapping[str, Node], window: tuple[float, float]
) -> dict[str, int]:
    """Cause → evictions that happened inside ``window`` (every cause of the table listed, 0 included)."""
    counts = dict.fromkeys(CAUSES, 0)
    for run in runs:
        if run.outcome == "evicted" and window[0] <= run.end < window[1]:
            key = cause(run, nodes)
            counts[key] = counts.get(key, 0) + 1
    return counts


def per_window(count: int, window: tuple[float, float], hours: float = WINDOW_HOURS) -> float:
    """``count`` scaled to a window of ``hours`` (the target's unit)."""
    span_h = (window[1] - window[0]) / 3600.0
    return round(count * hours / span_h, 3) if span_h else 0.0
