"""The FGD paper's statistical fragmentation measure (Weng et al., ATC '23, §3; PROTOCOL.md step 6).

Typical pod shapes are the most common (CPU, GPU count, GPU share, GPU models) of the original pod list,
taken by decreasing frequency until they cover 95 % of pods, each weighted by its share of the pods.
For a node and a shape: if the shape cannot run on the node at all (CPU, model, or not enough GPU), all the
node's idle GPU milli counts as fragment; otherwise only the idle milli on GPUs with less free than the
shape's per-GPU need (its share, or a whole GPU) counts. A node's fragmentation is the weighted sum.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

from scheduler.sim.openb.cluster import GPU_MILLI
from scheduler.sim.traces import TracePod

COVERAGE = 0.95


@dataclass(frozen=True, slots=True)
class Shape:
    cpu_milli: int
    num_gpu: int
    gpu_milli: int
    gpu_spec: frozenset[str]
    weight: float


def typical_shapes(pods: tuple[TracePod, ...]) -> tuple[Shape, ...]:
    """The shapes covering 95 % of ``pods``; ties in frequency are broken by the shape's values (stable)."""
    counts = Counter((pod.cpu_milli, pod.num_gpu, pod.gpu_milli, tuple(sorted(pod.gpu_spec))) for pod in pods)
    ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    shapes: list[Shape] = []
    covered = 0
    for (cpu, num_gpu, milli, spec), count in ordered:
        if covered >= COVERAGE * len(pods):
            break
        shapes.append(Shape(cpu, num_gpu, milli, frozenset(spec), count / len(pods)))
        covered += count
    return tuple(shapes)


class Fragmentation:
    """Fragmentation of a node state for a fixed set of shapes, memoised by (model, CPU free, sorted free GPUs)."""

    def __init__(self, shapes: tuple[Shape, ...]) -> None:
        self.shapes = shapes
        self.of = lru_cache(maxsize=1 << 18)(self._compute)

    def _compute(self, model: str, cpu_free: int, gpu_free: tuple[int, ...]) -> float:
        idle = sum(gpu_free)
        if idle == 0:
            return 0.0
        whole = sum(1 for free in gpu_free if free == GPU_MILLI)
        total = 0.0
        for shape in self.shapes:
            if shape.cpu_milli > cpu_free or (shape.gpu_spec and shape.num_gpu and model not in shape.gpu_spec):
                total += shape.weight * idle
            elif shape.num_gpu == 0:
                continue
            else:
                need = min(shape.gpu_milli, GPU_MILLI) if shape.num_gpu == 1 else GPU_MILLI
                fits = sum(1 for free in gpu_free if free >= need) if shape.num_gpu == 1 else whole
                if fits < shape.num_gpu:
                    total += shape.weight * idle
                else:
                    total += shape.weight * sum(free for free in gpu_free if free < need)
        return total
