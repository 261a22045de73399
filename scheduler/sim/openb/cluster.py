"""The B1 cluster: openb nodes with per-GPU free milli, and the feasibility rules of the FGD protocol.

Every GPU is 1,000 milli-GPU whatever its model (PROTOCOL.md step 1). A sharing pod (one GPU, ``gpu_milli``
< 1000) needs one GPU with at least that much free; a whole-GPU pod needs ``num_gpu`` fully free GPUs on one
node; CPU and memory must fit; ``gpu_spec`` (when set) must name the node's model (step 5). CPU-only pods fit
on any node with the CPU and memory (every B1 node is a GPU node).

Scores of the artifact depend on a node only through its model, free CPU, the multiset of free GPU milli and
(for GpuClustering) which kinds of GPU pod it runs; feasibility adds free memory. :meth:`NodeState.key` is that
tuple, so a run scores each distinct key once per pod shape instead of each of the 1,213 nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler.sim.traces import TraceNode, TracePod

GPU_MILLI = 1000
#: kube-scheduler counts a container that requests no CPU as 100 milli-CPU when scoring
#: (``GetNonzeroRequests``); the artifact's scores and typical shapes use that figure. No openb pod asks 0.
DEFAULT_SCORED_CPU_MILLI = 100

#: (model, free CPU, free memory, sorted free GPU milli, kinds of GPU pods running) — see the module doc.
NodeKey = tuple[str, int, int, tuple[int, ...], tuple[str, ...]]


@dataclass(slots=True)
class NodeState:
    """Mutable free capacity of one node during one run (private to a run; never shared).

    ``order`` is the node's place in the run's seeded permutation: the artifact breaks equal scores by node
    name, and names are prefixed with that permutation, so the earliest ``order`` wins a tie.
    """

    name: str
    model: str
    order: int
    cpu_free: int
    memory_free: int
    gpu_free: list[int]
    kinds: dict[str, int] = field(default_factory=dict)

    def key(self) -> NodeKey:
        kinds = tuple(sorted(kind for kind, count in self.kinds.items() if count))
        return (self.model, self.cpu_free, self.memory_free, tuple(sorted(self.gpu_free)), kinds)


def fresh_cluster(nodes: tuple[TraceNode, ...]) -> list[NodeState]:
    """GPU nodes only (CPU-only nodes are not part of the FGD cluster), all capacity free, file order."""
    gpu_nodes = [node for node in nodes if node.gpus > 0]
    return [
        NodeState(node.name, node.model, order, node.cpu_milli, node.memory_mib, [GPU_MILLI] * node.gpus)
        for order, node in enumerate(gpu_nodes)
    ]


def is_sharing(pod: TracePod) -> bool:
    """A GPU-sharing pod: one GPU, less than all of it."""
    return pod.num_gpu == 1 and pod.gpu_milli < GPU_MILLI


def scored_cpu(pod: TracePod) -> int:
    """The CPU the artifact's scores see for ``pod`` (:data:`DEFAULT_SCORED_CPU_MILLI` when it asks none)."""
    return pod.cpu_milli or DEFAULT_SCORED_CPU_MILLI


def gpu_kind(pod: TracePod) -> str | None:
    """The artifact's GPU "affinity" tag of a pod: None (no GPU), "share", or "<n>-gpu"."""
    if pod.num_gpu == 0:
        return None
    return "share" if is_sharing(pod) else f"{pod.num_gpu}-gpu"


def fits(key: NodeKey, pod: TracePod) -> bool:
    """Can a node in state ``key`` run ``pod`` (module rules)?"""
    model, cpu_free, memory_free, gpus, _kinds = key
    if pod.cpu_milli > cpu_free or pod.memory_mib > memory_free:
        return False
    if pod.num_gpu == 0:
        return True
    if pod.gpu_spec and model not in pod.gpu_spec:
        return False
    if is_sharing(pod):
        return gpus[-1] >= pod.gpu_milli
    return gpus.count(GPU_MILLI) >= pod.num_gpu


def lowest_free(gpu_free: list[int], count: int) -> tuple[int, ...]:
    """The ``count`` lowest-indexed fully free GPUs (how the artifact places whole-GPU pods)."""
    return tuple([index for index, free in enumerate(gpu_free) if free == GPU_MILLI][:count])


def tightest(gpu_free: list[int], milli: int) -> int:
    """The GPU with the least free milli that still holds ``milli``, lowest index on ties (best fit)."""
    best = -1
    for index, free in enumerate(gpu_free):
        if free >= milli and (best < 0 or free < gpu_free[best]):
            best = index
    return best


def bind(node: NodeState, pod: TracePod, gpus: tuple[int, ...]) -> None:
    """Take ``pod``'s resources from ``node`` on ``gpus`` (indexes of GPUs that hold it)."""
    node.cpu_free -= pod.cpu_milli
    node.memory_free -= pod.memory_mib
    for index in gpus:
        node.gpu_free[index] -= pod.gpu_milli
    kind = gpu_kind(pod)
    if kind is not None:
        node.kinds[kind] = node.kinds.get(kind, 0) + 1
