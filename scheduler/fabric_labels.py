"""How a node's fabric reads on a page: "EFA × 32", "InfiniBand × 8", "TCP only".

TCP is the absence of a fabric (NCCL then talks over the node's primary interface, about 4 GB/s:
``docs/gpu-facts.md``, Running a multi-node training job on Kubernetes), so it is named as such rather than
counted in devices.
"""

from __future__ import annotations

from scheduler.core.model.vocabulary import Fabric

FABRIC_NAMES: dict[Fabric, str] = {
    Fabric.TCP: "TCP",
    Fabric.EFA: "EFA",
    Fabric.TCPX: "GPUDirect-TCPX",
    Fabric.TCPXO: "GPUDirect-TCPXO",
    Fabric.INFINIBAND: "InfiniBand",
}


def fabric_label(fabric: str, devices: int) -> str:
    """``"EFA × 32"`` for a node with 32 EFA interfaces, ``"TCP only"`` for a node without a fabric."""
    kind = Fabric(fabric)
    if kind == Fabric.TCP:
        return "TCP only"
    name = FABRIC_NAMES[kind]
    return f"{name} × {devices}" if devices else name
