"""The B1 cluster: openb nodes with per-GPU free milli, and the feasibility rules of the FGD protocol.

Every GPU is 1,000 milli-GPU whatever its model (PROTOCOL.md step 1). A sharing pod (``gpu_milli`` < 1000,
one GPU) needs one GPU with at least that much free; a whole-GPU pod needs ``num_gpu`` fully free GPUs on one
node; CPU and memory must fit; ``gpu_spec`` (when set) must name the node's model (step 5).
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.sim.traces import TraceNode, TracePod

GPU_MILLI = 1000


@dataclass(slots=True)
class NodeState:
    """Mutable free capacity of one node during one run (private to a run; never shared)."""

    name: str
    model: str
    cpu_milli: int
    memory_mib: int
    cpu_free: int
    memory_free: int
    gpu_free: list[int]


def fresh_cluster(nodes: tuple[TraceNode, ...]) -> list[NodeState]:
    """GPU nodes only (CPU-only nodes are not part of the FGD cluster), all capacity free."""
    return [
        NodeState(
            node.name,
            node.model,
            node.cpu_milli,
            node.memory_mib,
            node.cpu_milli,
            node.memory_mib,
            [GPU_MILLI] * node.gpus,
        )
        for node in nodes
        if node.gpus > 0
    ]


def gpu_choices(node: NodeState, pod: TracePod) -> list[tuple[int, ...]]:
    """The GPU index sets of ``node`` that could hold ``pod`` (empty list: the pod does not fit).

    A CPU-only pod has the single choice ``()``. Whole-GPU pods take the lowest-indexed fully free GPUs: any
    other set of free GPUs is equivalent, so offering one keeps the candidate list short.
    """
    if pod.cpu_milli > node.cpu_free or pod.memory_mib > node.memory_free:
        return []
    if pod.num_gpu == 0:
        return [()]
    if pod.gpu_spec and node.model not in pod.gpu_spec:
        return []
    if pod.num_gpu == 1 and pod.gpu_milli < GPU_MILLI:
        return [(index,) for index, free in enumerate(node.gpu_free) if free >= pod.gpu_milli]
    whole = [index for index, free in enumerate(node.gpu_free) if free == GPU_MILLI]
    return [tuple(whole[: pod.num_gpu])] if len(whole) >= pod.num_gpu else []


def bind(node: NodeState, pod: TracePod, gpus: tuple[int, ...]) -> None:
    """Take ``pod``'s resources from ``node`` on ``gpus`` (a choice from :func:`gpu_choices`)."""
    node.cpu_free -= pod.cpu_milli
    node.memory_free -= pod.memory_mib
    for index in gpus:
        node.gpu_free[index] -= pod.gpu_milli
