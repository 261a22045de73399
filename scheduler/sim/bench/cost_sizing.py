"""B4's reserved baseline (spec/benchmarks.md B4, :mod:`scheduler.sim.bench.cost` step 5): sized from the
aggregate non-spot demand per GPU model that the all on-demand run measured.

Reserving one more GPU pays off when demand stays at or above it for more than (1 − d) of the time, d being the
reserved discount: so each model's baseline is the time-weighted d-quantile of that demand, rounded down to
whole servers (capacity is bought by the server).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from scheduler.core.gpus.catalog import GPU_MODEL_BY_NAME
from scheduler.core.gpus.units import UNITS_PER_GPU
from scheduler.core.model.cluster_state import slot_units
from scheduler.core.model.snapshot import Job, Node
from scheduler.sim.prices import RESERVED_DISCOUNT
from scheduler.sim.report import ReplayResult

Steps = dict[str, list[tuple[float, float]]]  # GPU model → sorted (t, change in GPU-equivalents held)


def demand_by_model(
    result: ReplayResult, nodes: Mapping[str, Node], *, include: Callable[[Job], bool] = lambda job: True
) -> Steps:
    """GPU model → the step function of GPU-equivalents held on it by the jobs ``include`` keeps, as sorted
    ``(t, change)`` pairs."""
    changes: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for run in result.runs:
        if not include(run.job):
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
    demand: Mapping[str, Sequence[tuple[float, float]]], nodes: Sequence[Node], window: tuple[float, float]
) -> dict[str, int]:
    """GPU model → servers to reserve from the non-spot ``demand`` (protocol step 5)."""
    per_node = {node.gpu_model: node.gpu_count for node in nodes}
    available: dict[str, int] = defaultdict(int)
    for node in nodes:
        available[node.gpu_model] += 1
    servers: dict[str, int] = {}
    for model, gpus in per_node.items():
        by_cost = math.floor(time_quantile(demand.get(model, ()), window, RESERVED_DISCOUNT) / gpus + 1e-9)
        servers[model] = min(available[model], by_cost)
    return servers
