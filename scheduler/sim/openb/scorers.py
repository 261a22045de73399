"""B1 scorers (node-scoring placement functions), reimplemented from the FGD artifact's description (no code copied).

The artifact runs kube-scheduler with exactly one score plugin. For each pod: every feasible node gets an
integer score (higher is better); a plugin with a normalise step maps its scores min–max onto 0..100 with
integer division; the node with the highest score wins, and equal scores go to the node whose name sorts
first — the artifact prefixes names with the run's seeded permutation, so that is the earliest node in the
run's order (the artifact replaced kube-scheduler's random pick among equal scores with this, for
reproducibility). Then the reserve step picks the GPU(s) inside the chosen node. Whole-GPU pods always take
the lowest-indexed fully free GPUs; a sharing pod's GPU depends on the scorer:

- ``random``: a uniformly random feasible node (a pre-score step marks one; no ties), and a uniformly
  random GPU that holds the share.
- ``dotprod`` (Tetris-style, "merge" dimensions, "max" normalisation): score = ⌊100 × (1 − (c·r_c +
  g·r_g) / 2)⌋ where c, g are the node's free CPU and total free GPU milli and r_c, r_g the pod's request,
  each divided by the largest node spec (128,000 milli-CPU, 8,000 milli-GPU). No normalise step. GPU: best
  fit (the least free GPU that holds the share, lowest index on ties).
- ``gpu-clustering``: a GPU pod prefers nodes already running only its own kind (share / 1-GPU / 2-GPU /
  …) — band 75..100 —, then nodes running its kind among others (50..75), then idle nodes (25..50), then
  nodes of other kinds only (0..25); inside a band ⌊25 × used GPU milli / 8,000⌋ (fuller first). CPU-only
  pods score 0 everywhere. GPU: best fit.
- ``gpu-packing``: a pod that fits on partly used GPUs scores 100 − (their free % summed) / 10 (at least
  50); one that needs fully free GPUs on a used node 50 − (free GPUs it takes) (at least 33); a pod on an
  idle node max(33 − GPUs, GPUs). The GPUs considered are the tightest that hold it. CPU-only pods score 0.
  GPU: best fit.
- ``bestfit``: ⌊100 × (1 − ½ (c − r_c)/128,000 − ½ (g − r_g)/8,000)⌋, then min–max normalised to 0..100.
  GPU: best fit.
- ``fgd``: Δ = fragmentation before − after placing the pod (typical shapes of the original list,
  :mod:`.fragmentation`), score = ⌊100 × sigmoid(Δ / 1000)⌋ — the integer cut makes many nodes tie, and
  the tie goes to the earliest node. A sharing pod's node score is its best GPU's score; its GPU is the
  first with that score.
- ``microcosm``: the engine's fragmentation scorer (:mod:`scheduler.core.placement.fragscore`) over the
  same typical shapes; see :class:`MicrocosmScorer`.

CPU in scores is the pod's request, or 100 milli when it asks none (kube-scheduler's non-zero default).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Protocol

from scheduler.core.placement.fragscore import FragScorer, TaskShape
from scheduler.sim.openb.cluster import GPU_MILLI, NodeKey, NodeState, gpu_kind, is_sharing, lowest_free, scored_cpu
from scheduler.sim.openb.cluster import tightest as tightest_gpu
from scheduler.sim.openb.fragmentation import Fragmentation, Shape

MAX_SPEC_CPU_MILLI = 128_000
MAX_SPEC_GPU_MILLI = 8_000
MAX_SCORE = 100

SCORER_NAMES = ("random", "dotprod", "gpu-clustering", "gpu-packing", "bestfit", "fgd", "microcosm")


class Scorer(Protocol):
    name: str
    uniform: bool  # pick a uniformly random feasible node instead of scoring
    normalize: bool  # min–max normalise the scores of the feasible nodes onto 0..100 (integer division)

    def score(self, key: NodeKey, pod_cpu: int, num_gpu: int, milli: int, kind: str | None) -> object:
        """Higher is better; called only for a node state that fits the pod."""
        ...  # pragma: no cover

    def gpus(self, node: NodeState, num_gpu: int, milli: int, pod_cpu: int) -> tuple[int, ...]:
        """The GPUs of the chosen ``node`` the pod takes."""
        ...  # pragma: no cover


class _BestFitGpu:
    """The artifact's default GPU choice ("best"): tightest GPU for a share, lowest free GPUs otherwise."""

    uniform = False
    normalize = False

    def gpus(self, node: NodeState, num_gpu: int, milli: int, pod_cpu: int) -> tuple[int, ...]:
        if num_gpu == 0:
            return ()
        if num_gpu == 1 and milli < GPU_MILLI:
            return (tightest_gpu(node.gpu_free, milli),)
        return lowest_free(node.gpu_free, num_gpu)


class RandomScorer:
    name = "random"
    uniform = True
    normalize = False

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def score(self, key: NodeKey, pod_cpu: int, num_gpu: int, milli: int, kind: str | None) -> object:
        raise NotImplementedError("random picks a node uniformly; it has no score")

    def gpus(self, node: NodeState, num_gpu: int, milli: int, pod_cpu: int) -> tuple[int, ...]:
        if num_gpu == 1 and milli < GPU_MILLI:
            return (self.rng.choice([index for index, free in enumerate(node.gpu_free) if free >= milli]),)
        return lowest_free(node.gpu_free, num_gpu)


class DotProdScorer(_BestFitGpu):
    name = "dotprod"

    def score(self, key: NodeKey, pod_cpu: int, num_gpu: int, milli: int, kind: str | None) -> object:
        _model, cpu_free, _memory, gpus, _kinds = key
        dot = (cpu_free / MAX_SPEC_CPU_MILLI) * (pod_cpu / MAX_SPEC_CPU_MILLI)
        dot += (sum(gpus) / MAX_SPEC_GPU_MILLI) * (num_gpu * milli / MAX_SPEC_GPU_MILLI)
        return int(MAX_SCORE * (1 - dot / 2))


class GpuClusteringScorer(_BestFitGpu):
    name = "gpu-clustering"

    def score(self, key: NodeKey, pod_cpu: int, num_gpu: int, milli: int, kind: str | None) -> object:
        if kind is None:
            return 0
        _model, _cpu, _memory, gpus, kinds = key
        fuller = MAX_SCORE // 4 * (MAX_SPEC_GPU_MILLI - sum(gpus)) // MAX_SPEC_GPU_MILLI
        if kind in kinds:
            return fuller + (MAX_SCORE * 3 // 4 if len(kinds) == 1 else MAX_SCORE // 2)
        return fuller + (MAX_SCORE // 4 if not kinds else 0)


class GpuPackingScorer(_BestFitGpu):
    name = "gpu-packing"

    def score(self, key: NodeKey, pod_cpu: int, num_gpu: int, milli: int, kind: str | None) -> object:
        if num_gpu == 0:
            return 0
        gpus = key[3]
        whole = gpus.count(GPU_MILLI)
        if whole == len(gpus):
            return max(MAX_SCORE // 3 - whole, whole)
        used = [free for free in gpus if free >= milli][:num_gpu]  # ascending: the tightest that hold it
        fully_free = used.count(GPU_MILLI)
        if fully_free:
            return max(MAX_SCORE // 2 - fully_free, MAX_SCORE // 3)
        free_pct = sum(free * 100 // GPU_MILLI for free in used)
        return max(MAX_SCORE - free_pct // 10, MAX_SCORE // 2)


class BestFitScorer(_BestFitGpu):
    name = "bestfit"
    normalize = True

    def score(self, key: NodeKey, pod_cpu: int, num_gpu: int, milli: int, kind: str | None) -> object:
        _model, cpu_free, _memory, gpus, _kinds = key
        left = (cpu_free - pod_cpu) / MAX_SPEC_CPU_MILLI * 0.5
        left += (sum(gpus) - num_gpu * milli) / MAX_SPEC_GPU_MILLI * 0.5
        return int((1.0 - left) * MAX_SCORE)


def _sigmoid_score(delta_milli: float) -> int:
    return int(1.0 / (1.0 + math.exp(-delta_milli / 1000)) * MAX_SCORE)


class FgdScorer:
    name = "fgd"
    uniform = False
    normalize = False

    def __init__(self, shapes: tuple[Shape, ...]) -> None:
        self.frag = Fragmentation(shapes)

    def _gpu_scores(self, model: str, cpu_free: int, gpus: list[int] | tuple[int, ...], milli: int, pod_cpu: int):
        before = self.frag.of(model, cpu_free, tuple(sorted(gpus)))
        for index, free in enumerate(gpus):
            if free >= milli:
                after = list(gpus)
                after[index] -= milli
                yield index, _sigmoid_score(before - self.frag.of(model, cpu_free - pod_cpu, tuple(sorted(after))))

    def score(self, key: NodeKey, pod_cpu: int, num_gpu: int, milli: int, kind: str | None) -> object:
        model, cpu_free, _memory, gpus, _kinds = key
        if num_gpu == 1 and milli < GPU_MILLI:
            return max(score for _, score in self._gpu_scores(model, cpu_free, gpus, milli, pod_cpu))
        after = list(gpus)
        for position in range(len(after) - num_gpu, len(after)):  # sorted: the fully free GPUs are last
            after[position] -= milli
        before = self.frag.of(model, cpu_free, gpus)
        return _sigmoid_score(before - self.frag.of(model, cpu_free - pod_cpu, tuple(sorted(after))))

    def gpus(self, node: NodeState, num_gpu: int, milli: int, pod_cpu: int) -> tuple[int, ...]:
        if num_gpu == 1 and milli < GPU_MILLI:
            best_index, best_score = -1, -1
            for index, score in self._gpu_scores(node.model, node.cpu_free, node.gpu_free, milli, pod_cpu):
                if score > best_score:
                    best_index, best_score = index, score
            return (best_index,)
        return lowest_free(node.gpu_free, num_gpu)


class MicrocosmScorer:
    """The engine's fragmentation scorer, fed the same typical shapes FGD sees (the workload mix).

    The node whose placement scores best under :meth:`FragScorer.placement` wins (its score is already a
    total order with its own tie-breaks; equal scores still go to the earliest node), and its GPUs are the
    ones that placement names.
    """

    name = "microcosm"
    uniform = False
    normalize = False

    def __init__(self, shapes: tuple[Shape, ...]) -> None:
        self.scorer = FragScorer(
            tuple(TaskShape(s.cpu_milli, s.num_gpu, s.gpu_milli, s.gpu_spec, s.weight) for s in shapes)
        )

    def score(self, key: NodeKey, pod_cpu: int, num_gpu: int, milli: int, kind: str | None) -> object:
        model, cpu_free, _memory, gpus, _kinds = key
        cost, _ = self.scorer.placement(model, cpu_free, gpus, pod_cpu, num_gpu, milli)
        return tuple(-part for part in cost)

    def gpus(self, node: NodeState, num_gpu: int, milli: int, pod_cpu: int) -> tuple[int, ...]:
        _, chosen = self.scorer.placement(node.model, node.cpu_free, node.gpu_free, pod_cpu, num_gpu, milli)
        return chosen


def make_scorer(name: str, shapes: tuple[Shape, ...], rng: random.Random) -> Scorer:
    """The scorer called ``name`` (one of :data:`SCORER_NAMES`)."""
    simple: dict[str, Callable[[], Scorer]] = {
        "dotprod": DotProdScorer,
        "gpu-clustering": GpuClusteringScorer,
        "gpu-packing": GpuPackingScorer,
        "bestfit": BestFitScorer,
    }
    if name == "random":
        return RandomScorer(rng)
    if name in simple:
        return simple[name]()
    if name == "fgd":
        return FgdScorer(shapes)
    if name == "microcosm":
        return MicrocosmScorer(shapes)
    raise ValueError(f"unknown B1 scorer {name!r} (known: {', '.join(SCORER_NAMES)})")


__all__ = ["SCORER_NAMES", "Scorer", "gpu_kind", "is_sharing", "make_scorer", "scored_cpu"]
