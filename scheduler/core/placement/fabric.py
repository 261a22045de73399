"""Fabrics for gangs that span nodes: never mix them, prefer a real one, then one placement group.

A gang whose replicas sit on several nodes all-reduces over the network between them, and NCCL runs at the
pace of the slowest link. A node's ``fabric`` is that network: a real fabric (EFA, GPUDirect-TCPX/TCPXO,
InfiniBand) or ``tcp`` — none, NCCL then falls back to the primary interface at about 4 GB/s instead of the
fabric's hundreds (``docs/gpu-facts.md``, Running a multi-node training job on Kubernetes). The rule:

1. **Never mix fabrics.** The replicas of a multi-node gang all sit on nodes of one fabric: EFA does not talk
   to InfiniBand, and a gang with one TCP node runs every step at TCP speed anyway.
2. **A real fabric before TCP.** A multi-node gang goes on nodes without a fabric only when no fabric's
   nodes can hold it. This comes *before* the leaf/spine preference of :mod:`.topology`: TCP on the primary
   interface (≈4 GB/s per node) is an order of magnitude below a rail-optimised fabric even across an
   oversubscribed spine (25–50 GB/s per GPU, ``docs/gpu-facts.md``, Interconnect figures), so one leaf of TCP
   nodes is the slower choice. Among several real fabrics the better topology score wins, then the fabric's
   name.
3. **Within a fabric: one leaf, then one placement group, then one spine, then anywhere** (fewest nodes
   first within each, as in :mod:`.topology`). A leaf comes before a placement group because it is the
   tighter set: one switch, while a cloud placement group (an AWS cluster placement group, a GCP compact
   placement, an Azure proximity group) is a best-effort "close together" that may span several switches.
   A placement group comes before a spine because clouds label the former and rarely the latter; a node
   without a placement group shares one with no one (unknown is assumed far), as for leaves.

4. **Whole nodes on GPUDirect-TCPX/TCPXO.** On GKE A3 High and Mega, Google's GPUDirect guides and manifests
   (GoogleCloudPlatform/container-engine-accelerators, ``gpudirect-tcpx/nccl-test-latest.yaml`` and
   ``gpudirect-tcpxo/nccl-test-latest.yaml``) give one pod all 8 GPUs and all NICs of its node, beside one
   receive-datapath daemon that sees every GPU: a node's NICs and daemon serve one workload. So a gang spanning
   nodes uses such a node only when each of its replicas takes all of the node's GPUs
   (:func:`whole_node_only`); a gang of smaller replicas goes on one node, or on nodes of another fabric, or
   waits. Screening rejects one that no such place could ever hold
   (:func:`scheduler.core.placement.gang.node_capacity`).

Single-node placements are unchanged: one node comes first whatever its fabric (its GPUs talk over NVLink or
PCIe, not the network). When every candidate node of a gang offers the same fabric and placement group —
every fleet that records no fabric at all — this rule has nothing to choose between and :mod:`.topology`
decides alone, exactly as before; only fleets with mixed fabrics or placement groups take the node-by-node
search of :func:`fabric_sets`.
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.core.model.vocabulary import Fabric
from scheduler.core.placement.index import CapacityIndex
from scheduler.core.placement.options import Option

NO_FABRIC = 1  # the rank of a multi-node placement over TCP; 0 for a real fabric or a single node
# Fabrics whose nodes serve one workload each (rule 4): a multi-node gang's replica takes the whole node.
WHOLE_NODE_FABRICS: frozenset[str] = frozenset({Fabric.TCPX, Fabric.TCPXO})


def whole_node_only(fabric: str, gpu_count: int, gpus: int) -> bool:
    """Is a node of ``fabric`` with ``gpu_count`` GPUs barred to a multi-node gang of ``gpus``-GPU replicas?"""
    return str(fabric) in WHOLE_NODE_FABRICS and gpus < gpu_count


def barred(index: CapacityIndex, options: Sequence[Option]) -> bool:
    """Do the options include a node a multi-node gang of their demand may not use (rule 4)? Only the groups
    whose nodes offer such a fabric (the index's ``fabric_keys``) are walked node by node."""
    nodes = index.state.nodes
    gpus = options[0].demand.gpus
    for option in options:
        if not any(key[0] in WHOLE_NODE_FABRICS for key in index.fabric_keys.get(option.group, frozenset())):
            continue
        if any(whole_node_only(nodes[n].fabric, nodes[n].gpu_count, gpus) for n in index.groups[option.group]):
            return True
    return False


def mixed(index: CapacityIndex, options: Sequence[Option]) -> bool:
    """Do the options' nodes offer more than one (fabric, placement group)? If not, the rule has no say."""
    keys: set[tuple[str, str]] = set()
    for option in options:
        keys |= index.fabric_keys.get(option.group, frozenset())
        if len(keys) > 1:
            return True
    return False


def fabric_sets(index: CapacityIndex, options: Sequence[Option]) -> list[tuple[int, str, frozenset[int]]]:
    """The options' nodes (ordinals) split by fabric: (rank, fabric, members), real fabrics first (rank 0),
    then by name; the nodes without a fabric last (rank :data:`NO_FABRIC`). Nodes a gang of the options'
    replicas may not span (rule 4) are left out."""
    by_fabric: dict[str, set[int]] = {}
    nodes = index.state.nodes
    gpus = options[0].demand.gpus
    for option in options:
        for name in index.groups[option.group]:
            if whole_node_only(nodes[name].fabric, nodes[name].gpu_count, gpus):
                continue
            by_fabric.setdefault(str(nodes[name].fabric), set()).add(index.node_ordinal[name])
    ranked = [(_rank(fabric), fabric, frozenset(members)) for fabric, members in by_fabric.items()]
    return sorted(ranked, key=lambda entry: (entry[0], entry[1]))


def placement_group_of(index: CapacityIndex, ordinal: int) -> str:
    """The scope key of a node's placement group; a node without one shares it with no one."""
    name = index.node_names[ordinal]
    group = index.state.nodes[name].placement_group
    return group if group else "\x00" + name


def rank_of(index: CapacityIndex, ordinals: Sequence[int]) -> int:
    """0 for a placement on one node or on nodes of a real fabric, :data:`NO_FABRIC` for nodes over TCP."""
    if len(ordinals) <= 1:
        return 0
    return _rank(str(index.state.nodes[index.node_names[ordinals[0]]].fabric))


def _rank(fabric: str) -> int:
    return NO_FABRIC if fabric == Fabric.TCP else 0
