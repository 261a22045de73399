"""The FGD paper's statistical fragmentation measure, as the artifact computes it (PROTOCOL.md step 6).

Typical shapes: every pod of the *original* list (CPU-only pods included) is counted once under its shape
(scored CPU, GPU count, per-GPU milli, allowed models); shapes are ranked by count, ties by the larger shape
first, and taken until they cover 95 % of the pods (the shape that crosses 95 % is in). Each shape's weight
is its count over the count of the taken shapes, so weights sum to 1.

A node's fragmentation for one shape (idle = the node's free GPU milli):

- a CPU-only shape: all idle GPU milli, whether the shape fits or not — the artifact files CPU-only shapes
  under its "satisfied/lacks CPU by the X axis" classes, and both count as fragment;
- a GPU shape the node's model cannot serve (``gpu_spec``), or that lacks CPU, or whose GPUs are not there
  (fewer GPUs with at least the shape's per-GPU milli free than it needs): all idle GPU milli;
- otherwise only the free milli of GPUs with less free than the shape's per-GPU milli.

A node's fragmentation is the weighted sum; memory plays no part. Values are float sums in shape order.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

from scheduler.sim.openb.cluster import scored_cpu
from scheduler.sim.traces import TracePod

COVERAGE = 0.95


@dataclass(frozen=True, slots=True)
class Shape:
    cpu_milli: int
    num_gpu: int
    gpu_milli: int
    gpu_spec: frozenset[str]
    weight: float


def _rank(item: tuple[tuple[int, int, int, str], int]) -> tuple[int, int, int, int, str]:
    """Most frequent first; equal counts: larger (CPU, milli, GPU count, models) first, as the artifact."""
    (cpu, milli, num_gpu, spec), count = item
    return (count, cpu, milli, num_gpu, spec)


def typical_shapes(pods: tuple[TracePod, ...]) -> tuple[Shape, ...]:
    """The shapes covering 95 % of ``pods`` with renormalised weights (module rules)."""
    counts = Counter((scored_cpu(pod), pod.gpu_milli, pod.num_gpu, "|".join(sorted(pod.gpu_spec))) for pod in pods)
    ordered = sorted(counts.items(), key=_rank, reverse=True)
    taken: list[tuple[tuple[int, int, int, str], int]] = []
    covered = 0
    for item in ordered:
        if covered >= COVERAGE * len(pods):
            break
        taken.append(item)
        covered += item[1]
    return tuple(
        Shape(cpu, num_gpu, milli, frozenset(spec.split("|")) if spec else frozenset(), count / covered)
        for (cpu, milli, num_gpu, spec), count in taken
    )


class Fragmentation:
    """Fragmentation of a node state for a fixed set of shapes, memoised by (model, CPU free, sorted GPUs)."""

    def __init__(self, shapes: tuple[Shape, ...]) -> None:
        self.shapes = shapes
        self.of = lru_cache(maxsize=1 << 20)(self._compute)

    def _compute(self, model: str, cpu_free: int, gpu_free: tuple[int, ...]) -> float:
        idle = sum(gpu_free)
        total = 0.0
        for shape in self.shapes:
            if shape.num_gpu == 0 or (shape.gpu_spec and model not in shape.gpu_spec):
                total += shape.weight * idle
                continue
            fitting = sum(1 for free in gpu_free if free >= shape.gpu_milli)
            if fitting >= shape.num_gpu and cpu_free >= shape.cpu_milli:
                total += shape.weight * sum(free for free in gpu_free if free < shape.gpu_milli)
            else:
                total += shape.weight * idle
        return total
