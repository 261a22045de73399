"""``fgd``: Fragmentation Gradient Descent (Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing
Workloads with Fragmentation Gradient Descent", USENIX ATC '23), reimplemented from the paper's description.

Rules (on top of :mod:`scheduler.sim.baselines.common`: FIFO, no MIG, no preemption, no quotas):

- **target workload**: the popularity of replica shapes among the jobs the cycle sees (running and pending,
  each counted once per replica), per kind of node (GPU model, time-sliced or not), since a memory request's
  shape depends on the GPU's memory;
- **fragmentation of a node** for one shape: if the shape cannot run on the node's free GPUs at all, every
  idle milli-GPU of the node is a fragment; otherwise only the idle milli-GPU on GPUs with less free than the
  shape's per-GPU need (a whole GPU, or its share) is. The node's fragmentation is the popularity-weighted
  sum over shapes;
- **placement**: each replica goes to the (node, GPUs) whose placement **increases** its node's
  fragmentation least (the gradient step), ties to the first node in the cluster's order and its lowest GPU;
  the job binds when every replica is placed;
- **whole GPUs and shares**: on nodes that time-slice their GPUs (``sharing``), a request smaller than one
  GPU — ``gpu_milli`` below 1,000, or a memory/model request below the GPU's memory — takes a share of
  ``ceil(1000 × memory / GPU memory)`` milli-GPU of one GPU; elsewhere it takes whole GPUs as in ``common``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from functools import lru_cache

from scheduler.core.gpus.units import FULL_GPU_MILLI
from scheduler.core.model.plan import Plan
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Node, Slot, Slots, Snapshot
from scheduler.sim.baselines.common import Free, Need, may_use, plan_fifo, replica_need

NAME = "fgd"
Shapes = tuple[tuple[int, int, float], ...]  # (whole GPUs, share milli, popularity)


@lru_cache(maxsize=1 << 16)
def fragmentation(shapes: Shapes, free_milli: tuple[int, ...]) -> float:
    """A node's expected fragmentation in milli-GPU for free per-GPU capacities ``free_milli`` (sorted)."""
    idle = sum(free_milli)
    if idle == 0:
        return 0.0
    whole_free = sum(1 for free in free_milli if free >= FULL_GPU_MILLI)
    total = 0.0
    for gpus, milli, weight in shapes:
        per_gpu = FULL_GPU_MILLI if gpus else milli
        runs = whole_free >= gpus if gpus else any(free >= milli for free in free_milli)
        if not runs:
            total += weight * idle
        else:
            total += weight * sum(free for free in free_milli if free < per_gpu)
    return total


class _Fgd:
    def __init__(self, snapshot: Snapshot, policy: Policy) -> None:
        self.snapshot = snapshot
        self.policy = policy
        self._shapes: dict[tuple[str, bool], Shapes] = {}

    def shapes(self, node: Node) -> Shapes:
        """The target workload as seen on nodes like ``node`` (module rules)."""
        kind = (node.gpu_model, node.sharing)
        if kind not in self._shapes:
            counts: Counter[Need] = Counter()
            jobs = [running.job for running in self.snapshot.running] + list(self.snapshot.pending)
            for job in jobs:
                need = replica_need(job, node, self.policy, shares=True) if may_use(job, node) else None
                if need is not None:
                    counts[need] += job.replicas
            total = sum(counts.values())
            ordered = sorted(counts.items(), key=lambda item: (item[0].gpus, item[0].milli))
            self._shapes[kind] = tuple((need.gpus, need.milli, count / total) for need, count in ordered)
        return self._shapes[kind]

    def place(self, free: Free, job: Job, candidates: Sequence[tuple[Node, Need]]) -> Slots | None:
        slots: list[tuple[Slot, ...]] = []
        for _ in range(job.replicas):
            best: tuple[float, int, int] | None = None
            choice: tuple[Node, Need, int] | None = None
            for order, (node, need) in enumerate(candidates):
                vector = _free_vector(free, node)
                shapes = self.shapes(node)
                before = fragmentation(shapes, tuple(sorted(vector.values())))
                for gpu in _gpu_choices(free, node, need, vector):
                    after = dict(vector)
                    if need.is_share:
                        after[gpu] -= need.milli
                    else:
                        for index in free.whole[node.name][: need.gpus]:
                            after[index] = 0
                    key = (fragmentation(shapes, tuple(sorted(after.values()))) - before, order, gpu)
                    if best is None or key < best:
                        best, choice = key, (node, need, gpu)
            if choice is None:
                return None
            node, need, gpu = choice
            if need.is_share:
                slots.append(free.take_share(node.name, gpu, need.milli))
            else:
                slots.append(free.take_whole(node.name, need.gpus))
        return tuple(slots)


def _free_vector(free: Free, node: Node) -> dict[int, int]:
    """GPU → free milli on ``node`` (GPUs with MIG on are left out: FGD never uses them)."""
    shared = free.milli.get(node.name)
    if shared is not None:
        return dict(shared)
    return dict.fromkeys(free.whole[node.name], FULL_GPU_MILLI)


def _gpu_choices(free: Free, node: Node, need: Need, vector: dict[int, int]) -> list[int]:
    """The GPUs worth scoring: for a share, the lowest GPU of each distinct free amount that holds it; for
    whole GPUs, the node's lowest free one (the node's lowest ``need.gpus`` are taken, all equivalent)."""
    if not need.is_share:
        return [free.whole[node.name][0]] if len(free.whole[node.name]) >= need.gpus else []
    by_free: dict[int, int] = {}
    for gpu in sorted(vector):
        if vector[gpu] >= need.milli:
            by_free.setdefault(vector[gpu], gpu)
    return sorted(by_free.values())


def fgd(snapshot: Snapshot, policy: Policy, now: float) -> Plan:
    """One cycle of the ``fgd`` baseline (module rules)."""
    return plan_fifo(snapshot, policy, _Fgd(snapshot, policy).place, name=NAME, shares=True)
