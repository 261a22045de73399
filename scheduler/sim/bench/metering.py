"""How B4 bills capacity (spec/benchmarks.md B4): metered tiers per node-hour of every node holding work,
reserved capacity for every hour of the window.

- **Metered** (on-demand, spot): clouds bill an instance for every hour it runs, and an autoscaled pool releases
  a node once it is empty. So a node is billed, at its instance price (GPUs × price per GPU-hour), for every
  second at least one run holds any slot on it — a 10 GiB service alone on an 8-GPU server pays for the
  server. Seconds are counted exactly (no rounding up to whole hours: per-second billing, as AWS and GCP do).
- **Reserved**: every reserved GPU is paid for every hour of the window, used or not.

Only the measured window counts (after the warm-up). Pure functions of the replay's run log.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from scheduler.core.model.snapshot import Node
from scheduler.core.model.vocabulary import CapacityTier
from scheduler.sim.prices import price_per_gpu_hour
from scheduler.sim.records import RunLog


def held_seconds(runs: Iterable[RunLog], window: tuple[float, float]) -> dict[str, float]:
    """Node → seconds inside ``window`` during which at least one run held a slot on it (the union of the
    runs' intervals, so two services on one node at once are not billed twice)."""
    intervals: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for run in runs:
        start, end = max(run.start, window[0]), min(run.end, window[1])
        if end <= start:
            continue
        for node in {slot.node for replica in run.slots for slot in replica}:
            intervals[node].append((start, end))
    held: dict[str, float] = {}
    for node, spans in intervals.items():
        total, reach = 0.0, float("-inf")
        for start, end in sorted(spans):
            if end <= reach:
                continue
            total += end - max(start, reach)
            reach = end
        held[node] = total
    return held


def metered_cost(held_s: Mapping[str, float], nodes: Mapping[str, Node]) -> float:
    """Σ over on-demand and spot nodes of (held hours × GPUs × the node's price per GPU-hour)."""
    cost = 0.0
    for name, seconds in held_s.items():
        node = nodes[name]
        if node.tier != CapacityTier.RESERVED:
            cost += seconds / 3600.0 * node.gpu_count * node.price_per_gpu_hour
    return cost


def metered_node_hours(held_s: Mapping[str, float], nodes: Mapping[str, Node]) -> float:
    return sum(s for name, s in held_s.items() if nodes[name].tier != CapacityTier.RESERVED) / 3600.0


def reserved_cost(nodes: Iterable[Node], hours: float) -> tuple[float, dict[str, int]]:
    """(what the reserved nodes cost for ``hours``, GPU model → reserved GPUs)."""
    gpus: dict[str, int] = defaultdict(int)
    cost = 0.0
    for node in nodes:
        if node.tier == CapacityTier.RESERVED:
            gpus[node.gpu_model] += node.gpu_count
            cost += node.gpu_count * price_per_gpu_hour(node.gpu_model, CapacityTier.RESERVED) * hours
    return cost, dict(gpus)
