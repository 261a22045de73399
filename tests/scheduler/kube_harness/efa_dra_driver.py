"""The EFA DRA driver (EKS's "DRANET", kubernetes-sigs/dranet) on a node: the ResourceSlice of its network devices.

As dranet publishes them: driver ``dra.net`` (``cmd/dranet/app.go``), one pool per node named after it with one
slice (``pkg/driver/dra_hooks.go``: ``Pools{nodeName: {Slices: [{Devices: filtered}]}}``), a device per network PCI
function named ``pci-<address with : and . as ->`` (``pkg/names/names.go`` ``NormalizePCIAddress``) with the
``dra.net/…`` attributes of ``pkg/apis/attributes.go`` (``pciAddress``, ``pciVendor``, ``pciDevice``, ``ifName``,
``rdma``, ``rdmaDevice``, ``numaNode``) and the standard ``resource.kubernetes.io/pcieRoot``. EKS's chart
(eks-charts ``stable/aws-dranet``) filters the slice to the EFA interfaces; without the filter the node's ENA
interfaces are published too (``ena=True`` here), which the DeviceClass ``efa.networking.k8s.aws`` leaves out by
``pciDevice`` (``examples/aws_eks_examples/gpu-efa/device-class.yaml``). The EFA interfaces sit under the node's
PCIe roots as :func:`tests.scheduler.kube_harness.dra_driver.pcie_root` assumes (the first half under the GPUs 0–3's
root, the rest under GPUs 4–7's); ``roots=0``: a DRANET whose sysfs lookup fails publishes no pcieRoot
(``pkg/inventory``: it logs and goes on).
"""

from __future__ import annotations

from typing import Any

from tests.scheduler.kube_harness.dra_driver import PCIE_ROOT, pcie_root

DRIVER = "dra.net"
EFA_PCI_DEVICE = "Elastic Fabric Adapter (EFA)"
ENA_PCI_DEVICE = "Elastic Network Adapter (ENA)"


def _device(bus: int, *, efa: bool, interface: str, root: str) -> dict[str, Any]:
    address = f"0000:{bus:02x}:00.0"
    attributes: dict[str, Any] = {
        "dra.net/pciAddress": {"string": address},
        "dra.net/pciVendor": {"string": "Amazon.com, Inc."},
        "dra.net/pciDevice": {"string": EFA_PCI_DEVICE if efa else ENA_PCI_DEVICE},
        "dra.net/ifName": {"string": interface},
        "dra.net/rdma": {"bool": efa},
        "dra.net/numaNode": {"int": 0 if bus < 0x80 else 1},
    }
    if root:
        attributes[PCIE_ROOT] = {"string": root}
    if efa:
        attributes["dra.net/rdmaDevice"] = {"string": f"rdmap{bus}s27"}
    return {"name": "pci-" + address.replace(":", "-").replace(".", "-"), "attributes": attributes}


def efa_slice(node: str, efa: int, *, ena: bool = False, generation: int = 1, roots: int = 2) -> dict[str, Any]:
    """The pool of ``node``: ``efa`` EFA interfaces (and its primary ENA interface with ``ena``), under ``roots``
    PCIe root complexes (module doc)."""
    devices = []
    for i in range(efa):
        root = pcie_root(i, efa, roots) if roots else ""
        bus = (int(root[-2:], 16) if root else 0) + 0x10 + i  # a bus number under its root's
        devices.append(_device(bus, efa=True, interface=f"eth{i + 1}", root=root))
    if ena:
        devices.insert(0, _device(0x05, efa=False, interface="eth0", root="pci0000:00" if roots else ""))
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}-0"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": sorted(devices, key=lambda d: d["name"]),  # db.go scan: sorted by name
        },
    }


def publish(cluster: Any, node: str, efa: int, *, ena: bool = False, roots: int = 2) -> dict[str, Any]:
    """Write ``node``'s EFA pool over HTTP, as the driver's kubelet plugin does."""
    body = efa_slice(node, efa, ena=ena, roots=roots)
    cluster.resource.create_resource_slice(body)
    return body
