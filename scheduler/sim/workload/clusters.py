"""The benchmark clusters, by name: ``mixed-64`` (B2) and the ``topology-N`` family (B3).

``mixed-64`` (spec/benchmarks.md B2): 64 GPUs in three kinds of server under two leaf switches and one spine.

| nodes | GPUs | interconnect | leaf | tier | price per GPU-hour |
|---|---|---|---|---|---|
| h100-1, h100-2 | 8 × H100-SXM5-80GB each | NVSwitch | leaf-1 | reserved | $4.47 |
| a100-1 | 8 × A100-SXM4-80GB | NVSwitch | leaf-1 | reserved | $2.23 |
| a100-2 | 8 × A100-SXM4-80GB | NVSwitch | leaf-1 | on-demand | $3.43 |
| a100-3, a100-4 | 8 × A100-SXM4-80GB each | NVSwitch | leaf-2 | on-demand | $3.43 |
| pcie-1 … pcie-4 | 4 × A100-PCIE-40GB each | NVLink pairs | leaf-2 | spot | $0.67 |

Prices (``docs/gpu-facts.md``, Prices: AWS us-east-1, per GPU = instance ÷ 8): on-demand H100
p5.48xlarge $6.88, A100-80GB p4de $3.43; reserved = on-demand × 0.65 (the planning assumption of
30–40 % off for one year: 35 %); spot A100-40GB = the middle of p4d's $0.31–1.02 range. MIG is off on every GPU
at the start (Kubernetes as shipped), so every policy starts from the same cluster. The spine is
**2:1 oversubscribed** (an assumption: NVIDIA's reference architecture is non-blocking; enterprise
fabrics often are not); it matters only to the topology model. Every server is on InfiniBand (one NIC per GPU,
what the topology model's network figures are), so the engine's fabric rule has nothing to choose between.

``topology-N`` (B3): N/8 servers of 8 × H100-SXM5-80GB (NVSwitch, as a DGX H100), 4 per leaf switch (32 GPUs a
leaf), every leaf under one spine, all on-demand at $6.88, on InfiniBand; the spine's oversubscription is an
argument, and so is a number of leaves whose servers have no fabric (TCP only; 0 in B3's protocol).
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.core.model.snapshot import Node
from scheduler.core.model.vocabulary import CapacityTier, Interconnect
from scheduler.core.model.vocabulary import Fabric as NodeFabric
from scheduler.sim.topology_model import Fabric

H100_ON_DEMAND = 6.88
A100_80_ON_DEMAND = 3.43
RESERVED_DISCOUNT = 0.35
A100_40_SPOT = round((0.31 + 1.02) / 2, 2)
NODES_PER_LEAF = 4
MIXED_OVERSUBSCRIPTION = 2.0


@dataclass(frozen=True)
class ClusterDef:
    name: str
    nodes: tuple[Node, ...]
    fabric: Fabric
    description: str

    @property
    def gpus(self) -> int:
        return sum(node.gpu_count for node in self.nodes)


def _reserved(price: float) -> float:
    return round(price * (1 - RESERVED_DISCOUNT), 2)


def mixed_64() -> ClusterDef:
    """The B2 cluster (module table)."""

    def sxm(name: str, model: str, leaf: str, tier: CapacityTier, price: float) -> Node:
        return Node(
            name,
            model,
            8,
            Interconnect.NVSWITCH,
            leaf=leaf,
            spine="spine-1",
            tier=tier,
            price_per_gpu_hour=price,
            fabric=NodeFabric.INFINIBAND,
        )

    nodes = [
        sxm("h100-1", "H100-SXM5-80GB", "leaf-1", CapacityTier.RESERVED, _reserved(H100_ON_DEMAND)),
        sxm("h100-2", "H100-SXM5-80GB", "leaf-1", CapacityTier.RESERVED, _reserved(H100_ON_DEMAND)),
        sxm("a100-1", "A100-SXM4-80GB", "leaf-1", CapacityTier.RESERVED, _reserved(A100_80_ON_DEMAND)),
        sxm("a100-2", "A100-SXM4-80GB", "leaf-1", CapacityTier.ON_DEMAND, A100_80_ON_DEMAND),
        sxm("a100-3", "A100-SXM4-80GB", "leaf-2", CapacityTier.ON_DEMAND, A100_80_ON_DEMAND),
        sxm("a100-4", "A100-SXM4-80GB", "leaf-2", CapacityTier.ON_DEMAND, A100_80_ON_DEMAND),
    ]
    nodes += [
        Node(
            f"pcie-{i}",
            "A100-PCIE-40GB",
            4,
            Interconnect.NVLINK_PAIRS,
            leaf="leaf-2",
            spine="spine-1",
            tier=CapacityTier.SPOT,
            price_per_gpu_hour=A100_40_SPOT,
            fabric=NodeFabric.INFINIBAND,
        )
        for i in range(1, 5)
    ]
    return ClusterDef(
        "mixed-64",
        tuple(nodes),
        Fabric(oversubscription=MIXED_OVERSUBSCRIPTION),
        "64 GPUs: 16 H100-SXM5-80GB + 32 A100-SXM4-80GB (NVSwitch) + 16 A100-PCIE-40GB (NVLink pairs); "
        "2 leaves, 1 spine (2:1); reserved/on-demand/spot",
    )


def topology_cluster(gpus: int, oversubscription: float = MIXED_OVERSUBSCRIPTION, tcp_leaves: int = 0) -> ClusterDef:
    """``topology-N``: ``gpus`` (a multiple of 8) H100 GPUs in DGX-like servers, 4 servers per leaf, on
    InfiniBand (one NIC per GPU, as the topology model's figures assume) — but the servers of the last
    ``tcp_leaves`` leaves have no fabric (TCP only), to measure what the fabric is worth (B3 ``--tcp-leaves``)."""
    if gpus < 8 or gpus % 8:
        raise ValueError(f"a topology cluster has whole 8-GPU servers: {gpus} is not a positive multiple of 8")
    servers = gpus // 8
    leaves = -(-servers // NODES_PER_LEAF)
    if not 0 <= tcp_leaves <= leaves:
        raise ValueError(f"tcp_leaves must be from 0 to the cluster's {leaves} leaves, not {tcp_leaves}")
    nodes = tuple(
        Node(
            f"dgx-{i:03d}",
            "H100-SXM5-80GB",
            8,
            Interconnect.NVSWITCH,
            leaf=f"leaf-{i // NODES_PER_LEAF + 1}",
            spine="spine-1",
            tier=CapacityTier.ON_DEMAND,
            price_per_gpu_hour=H100_ON_DEMAND,
            fabric=NodeFabric.TCP if i // NODES_PER_LEAF >= leaves - tcp_leaves else NodeFabric.INFINIBAND,
        )
        for i in range(servers)
    )
    without = f"; {tcp_leaves} leaves without a fabric (TCP)" if tcp_leaves else ""
    return ClusterDef(
        f"topology-{gpus}",
        nodes,
        Fabric(oversubscription=oversubscription),
        f"{gpus} H100-SXM5-80GB in {servers} NVSwitch servers, {NODES_PER_LEAF} per leaf, 1 spine "
        f"({oversubscription:g}:1){without}",
    )


CLUSTERS = {"mixed-64": mixed_64}


def cluster_named(name: str) -> ClusterDef:
    """A B2 cluster by name; ValueError lists the known names."""
    try:
        return CLUSTERS[name]()
    except KeyError:
        raise ValueError(f"unknown cluster {name!r}; known: {', '.join(sorted(CLUSTERS))}") from None
