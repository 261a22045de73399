"""A job's network as its team sees it: the fabric its nodes talk over, and the submit form's warning.

A job whose replicas sit on more than one node all-reduces over the network between them: over the nodes'
fabric (EFA, GPUDirect-TCPX/TCPXO, InfiniBand), or, on nodes without one, over TCP on the primary interface at
about 4 GB/s (``docs/gpu-facts.md``, Running a multi-node training job on Kubernetes). The engine never mixes
fabrics within a gang and takes a fabric before TCP (``docs/scheduling-rules.md``), so one placement has one
fabric; the page says which, and the submit form warns before a multi-node job is sent where only TCP waits.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from jobs.models import Allocation, Job
from jobs.selectors.rightsizing import Suggestion
from scheduler.core.model.vocabulary import Fabric, NodeState
from scheduler.fabric_labels import FABRIC_NAMES
from scheduler.models import Node


@dataclass(frozen=True)
class JobNetwork:
    """The network of one placement spanning ``nodes`` nodes: ``label`` reads "EFA × 32 per node"."""

    fabric: str  # a Fabric value ("tcp" when the nodes have none), or "mixed" for a placement made by hand
    devices_per_node: int
    nodes: int
    label: str

    @property
    def has_fabric(self) -> bool:
        return self.fabric != Fabric.TCP


def job_network(*, job: Job) -> JobNetwork | None:
    """The fabric of the job's current placement (its live allocations of its newest generation, else its latest
    run's) when that placement spans more than one node; None for a job on one node or never placed. While a move
    is under way the job holds two placements; its replicas talk within the one it is moving to, not across both."""
    allocations = Allocation.objects.filter(job_id=job.pk).select_related("node")
    live = [a for a in allocations if a.ended_at is None]
    newest = max((a.generation for a in live), default=0)
    live = [a for a in live if a.generation == newest]
    if not live:
        every = list(allocations)
        latest = max((a.started_at for a in every), default=None)
        live = [a for a in every if a.started_at == latest]
    return network_of(a.node for a in live)


def network_of(nodes: Iterable[Node]) -> JobNetwork | None:
    """The network between ``nodes`` (repeats allowed); None for fewer than two distinct nodes."""
    distinct = {node.pk: node for node in nodes}
    if len(distinct) < 2:
        return None
    fabrics = {node.fabric for node in distinct.values()}
    devices = sorted({node.fabric_devices for node in distinct.values()})
    if len(fabrics) > 1:  # the engine never places a gang so; a placement made by hand may be
        names = ", ".join(sorted(FABRIC_NAMES[Fabric(f)] for f in fabrics))
        return JobNetwork("mixed", 0, len(distinct), f"Mixed fabrics ({names}): the gang talks at TCP speed")
    fabric = Fabric(fabrics.pop())
    if fabric == Fabric.TCP:
        return JobNetwork(fabric.value, 0, len(distinct), "TCP only — no fabric on these nodes")
    name = FABRIC_NAMES[fabric]
    count = f"{devices[0]}" if len(devices) == 1 else f"{devices[0]}–{devices[-1]}"
    label = f"{name} × {count} per node" if devices[-1] else name
    return JobNetwork(fabric.value, devices[0], len(distinct), label)


def fabric_warning(suggestion: Suggestion | None) -> str:
    """The submit form's warning for a job that spans nodes and could only land on nodes without a fabric
    (empty when the job fits one node of the fleet, or a fabric's nodes could hold the whole gang).

    Whole-GPU options only: a MIG or shared replica never spans nodes by itself. Nodes that are gone do not
    count; a fabric's nodes are pooled per GPU class, as a gang may span the models of one class."""
    if suggestion is None or suggestion.replicas < 2:
        return ""
    gpus_by_model = {o.gpu_model: o.gpus for o in suggestion.options if not o.mig_profile and o.gpus}
    if not gpus_by_model:
        return ""
    nodes = list(
        Node.objects.filter(gpu_model__name__in=gpus_by_model)
        .exclude(state=NodeState.GONE)
        .values_list("gpu_model__name", "gpu_model__gpu_class", "gpu_count", "fabric")
    )
    replicas = suggestion.replicas
    if not nodes or any(count // gpus_by_model[model] >= replicas for model, _, count, _ in nodes):
        return ""
    held: dict[tuple[str, str], int] = defaultdict(int)  # (class, fabric) → replicas its nodes hold
    for model, gpu_class, count, fabric in nodes:
        held[(gpu_class, fabric)] += count // gpus_by_model[model]
    if any(total >= replicas for (_, fabric), total in held.items() if fabric != Fabric.TCP):
        return ""
    return (
        f"These {replicas} replicas cannot share one node, and no nodes with a network fabric (EFA, GPUDirect, "
        "InfiniBand) can hold them: the replicas would talk over TCP on the primary interface (about 4 GB/s), "
        "so a training job spends much of each step waiting on the network. Fewer, larger replicas that fit "
        "one node avoid it."
    )
