"""Node-level fragmentation scoring for time-sliced GPU shares and whole GPUs (pure, deterministic).

Weng et al. (ATC'23, "Beware of Fragmentation") score a placement by how much it raises the *expected*
fragmentation of a node under the workload's mix of task shapes. This scorer keeps that gradient and its
coarse classes, and makes the tie-break explicit.

Fragmentation of a node for one task shape (``TaskShape``), with ``idle`` the node's free GPU milli:

- a CPU-only shape never strands GPU capacity and is ignored (the FGD artifact counts all idle GPU milli as
  fragment for it, which only shifts every placement's gradient by the same amount);
- a GPU shape the node cannot take at all — its model is not allowed, CPU is short, or fewer GPUs hold the
  shape's per-GPU milli than it needs: all ``idle`` is fragment for it;
- otherwise the free milli of GPUs with less free than the shape's per-GPU milli (they can never serve it).

The node's fragmentation is the weight-summed value over the shapes (weights are the shapes' shares of the
workload). A placement's gradient Δ = fragmentation after − before, in milli-GPU.

Cost of a placement, lower is better: ``(class, idle node)``.

- ``class`` = −⌊100 · σ(−Δ / 1000)⌋ with σ the logistic function: FGD's own score classes. Near Δ = 0 a
  class is about 40 milli-GPU wide, and classes widen as |Δ| grows. Comparing classes rather than Δ itself
  matters: measured on the openb trace, ranking placements by the exact gradient leaves about one point more
  GPU capacity unallocated than ranking by class and then packing, because fine differences of an
  *expected* fragmentation are noise while packing the work onto fewer nodes is not.
- ``idle node`` = 1 when every GPU of the node is fully free, else 0: among equal classes, a node already in
  use is preferred, keeping idle nodes whole for the shapes that need a whole node (as the engine's
  whole-GPU best fit does). Remaining ties are the caller's (a fixed node order: first fit).

For a sharing task every GPU that holds it is tried (the first of equal costs wins); whole-GPU tasks take the
lowest-indexed fully free GPUs (all fully free GPUs are equivalent).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from scheduler.core.gpus.units import FULL_GPU_MILLI

CLASSES = 100  # FGD's score range: the gradient is cut into this many logistic classes

Cost = tuple[int, int]


@dataclass(frozen=True, slots=True)
class TaskShape:
    """One shape of the workload mix: CPU, GPUs and per-GPU milli (1000 = whole GPUs), allowed models
    (empty = any), and its weight (share of the workload; the weights of a mix sum to 1)."""

    cpu_milli: int
    gpus: int
    milli: int
    models: frozenset[str]
    weight: float


def gradient_class(delta_milli: float) -> int:
    """−⌊100 · σ(−Δ/1000)⌋: lower for placements that fragment less (module doc)."""
    return -int(CLASSES / (1.0 + math.exp(delta_milli / 1000)))


class FragScorer:
    """Scores placements against a fixed mix of task shapes; memoises node fragmentation by node state (a pure
    function of the scorer's fixed mix: the cache can never answer differently, so no speed-up switch needs to
    turn it off)."""

    def __init__(self, shapes: Sequence[TaskShape]) -> None:
        self.shapes = tuple(shape for shape in shapes if shape.gpus > 0)
        self.fragmentation = lru_cache(maxsize=1 << 20)(self._fragmentation)

    def _fragmentation(self, model: str, cpu_free: int, gpu_free: tuple[int, ...]) -> float:
        """Expected stranded GPU milli of a node in this state (module rules); ``gpu_free`` sorted."""
        idle = sum(gpu_free)
        total = 0.0
        for shape in self.shapes:
            fitting = sum(1 for free in gpu_free if free >= shape.milli)
            usable = not shape.models or model in shape.models
            if usable and fitting >= shape.gpus and cpu_free >= shape.cpu_milli:
                total += shape.weight * sum(free for free in gpu_free if free < shape.milli)
            else:
                total += shape.weight * idle
        return total

    def placement(
        self, model: str, cpu_free: int, gpu_free: Sequence[int], cpu: int, gpus: int, milli: int
    ) -> tuple[Cost, tuple[int, ...]]:
        """The cost of the best placement of a task (``cpu`` milli-CPU, ``gpus`` GPUs of ``milli`` each) on a
        node with ``cpu_free`` and per-GPU ``gpu_free`` (index order), and the GPU indexes it takes.

        The caller has checked that the task fits. ``gpus`` = 0 is a CPU-only task.
        """
        before = self.fragmentation(model, cpu_free, tuple(sorted(gpu_free)))
        cpu_left = cpu_free - cpu
        idle_node = int(all(free == FULL_GPU_MILLI for free in gpu_free))
        if gpus == 1 and milli < FULL_GPU_MILLI:
            candidates: list[tuple[int, ...]] = [(index,) for index, free in enumerate(gpu_free) if free >= milli]
        else:
            candidates = [tuple([index for index, free in enumerate(gpu_free) if free == FULL_GPU_MILLI][:gpus])]
        best: tuple[Cost, tuple[int, ...]] | None = None
        for chosen in candidates:
            after = list(gpu_free)
            for index in chosen:
                after[index] -= milli
            delta = self.fragmentation(model, cpu_left, tuple(sorted(after))) - before
            cost = (gradient_class(delta), idle_node)
            if best is None or cost < best[0]:
                best = (cost, chosen)
        if best is None:
            raise ValueError(f"no GPU of {list(gpu_free)} holds {gpus} × {milli} milli: check fit first")
        return best
