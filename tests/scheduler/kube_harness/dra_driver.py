"""The NVIDIA GPU DRA driver's kubelet plugin on a DRA node: the ResourceSlices it publishes for the node's GPUs.

As kubernetes-sigs/dra-driver-nvidia-gpu ``cmd/gpu-kubelet-plugin/`` writes them (the gateway's reader,
``scheduler/gateways/kube/dra_slices.py``, cites the same files):

- one pool per node, named after it, ``spec.nodeName`` set (``driver.go`` ``publishResources``); the kubelet
  plugin's helper publishes it through the resourceslice controller (kubernetes ``staging/src/k8s.io/
  dynamic-resource-allocation/resourceslice/resourceslice_controller.go``), which creates one object per slice,
  raises ``pool.generation`` when the pool changes, sets ``resourceSliceCount`` to the pool's slice count and
  deletes the slices the pool no longer has (it lets the server generate the names; here they are
  ``<node>-gpu.nvidia.com-<i>``, which no reader depends on);
- a whole GPU ``gpu-<minor>`` with ``type: gpu``, ``uuid``, ``productName``, ``brand``, ``architecture``,
  ``cudaComputeCapability``, ``driverVersion``, ``cudaDriverVersion`` and capacity ``memory`` in bytes
  (``deviceinfo.go`` ``GpuInfo.GetDevice``);
- **static MIG** (a GPU in MIG mode, instances made beforehand, e.g. by MIG Manager): its instances instead of the GPU
  (``nvlib.go``), each ``gpu-<minor>-mig-<profile without dots>-<GI profile id>-<start>`` (``mig.go``
  ``ToCanonicalName``) with ``type: mig``, ``profile``, ``parentUUID``, ``uuid``, the parent's product attributes,
  capacities ``memory``, ``multiprocessors``... and ``memorySlice<i>`` per memory slice it holds
  (``MigDeviceInfo.GetDevice``), all in one slice;
- **dynamic MIG** (the ``DynamicMIG`` feature gate; KEP-4815 partitionable devices; Hopper and newer, and an A100
  only while MIG is already on, as its whole GPU then cannot be offered without a reset: ``nvlib.go``
  ``isDynamicMIGCapable``; an A100 with MIG off is published whole, as without the gate): on
  Kubernetes 1.35+ G+1 slices (``driver.go`` ``generateSplitResourceSlices``): first one holding every GPU's shared
  counter set ``gpu-<minor>-counter-set`` (a counter per capacity and ``memory-slice-<i>``), then per GPU the whole
  GPU and every possible partition (profile × placement), each consuming counters of its GPU's set
  (``partitions.go``); a partition has no ``uuid`` (it has no instance until a claim creates it).

Both GPUs and MIG devices carry the standard ``resource.kubernetes.io/pcieRoot`` (``GpuInfo.Attributes`` sets it from
``deviceattribute.GetPCIeRootAttributeByPCIBusID``; ``mig.go`` ``CommonAttributesMig`` copies the parent's). The
layout is :func:`pcie_root`'s documented assumption (``pcie_roots=0``: a node whose sysfs lookups fail publishes none).

GI profile ids are NVML's, the same on A100 and H100 (docs/gpu-facts.md): 19 = 1g, 20 = 1g+me, 15 = 1g with two
memory slices, 14 = 2g, 9 = 3g, 5 = 4g, 0 = 7g. Slices are written over HTTP with the official client, so the API
server's validation (:mod:`tests.scheduler.kube_harness.resource_slices`) applies to them.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from scheduler.core.gpus.catalog import GPU_MODEL_BY_NAME, ProfileSpec

DRIVER = "gpu.nvidia.com"
MIB = 1024 * 1024
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"


def pcie_root(position: int, total: int, roots: int) -> str:
    """The PCIe root complex of a node's ``position``-th device of ``total`` (GPUs, or EFA interfaces), ``pci<domain>:
    <bus>`` as deviceattribute's ``GetPCIeRootAttributeByPCIBusID`` names it. An assumption, not a read of real
    hardware: ``roots`` root complexes (two: one per CPU socket of an 8-GPU HGX host like p4d/p5), each with an equal
    share of the GPUs and of the EFA interfaces in order (GPUs 0–3 and the first half of the EFA interfaces under
    ``pci0000:00``, GPUs 4–7 and the rest under ``pci0000:80``), as those hosts pair GPUs with the EFA interfaces
    behind their PCIe switches."""
    return f"pci0000:{position * roots // total * (0x100 // roots):02x}"


_GI_PROFILE_IDS = {"1g": 19, "1g+me": 20, "1g-2m": 15, "2g": 14, "3g": 9, "4g": 5, "7g": 0}


@dataclass(frozen=True)
class GpuBoard:
    """What NVML reports of the node's GPUs (one model per node)."""

    product: str = "NVIDIA H100 80GB HBM3"  # NVML's product name, as the driver publishes it
    model: str = "H100-SXM5-80GB"  # the catalog's name for it (what the test expects the gateway to read)
    architecture: str = "Hopper"
    compute_capability: str = "9.0.0"
    memory_bytes: int = 81559 * MIB


H100 = GpuBoard()
A100 = GpuBoard("NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB", "Ampere", "8.0.0", 81920 * MIB)
H200 = GpuBoard("NVIDIA H200", "H200-SXM-141GB", "Hopper", "9.0.0", 143771 * MIB)


@dataclass
class DraGpus:
    """One node's GPUs as the plugin sees them: ``mig`` per GPU the existing instances (``[(profile, start)]``; an
    empty list: MIG off), ``dynamic_mig`` the driver's DynamicMIG mode."""

    node: str
    board: GpuBoard = H100
    count: int = 8
    mig: Sequence[Sequence[tuple[str, int]]] = ()
    dynamic_mig: bool = False
    uuids: list[str] = field(default_factory=list)
    pcie_roots: int = 2  # the node's PCIe root complexes (pcie_root); 0: the driver publishes no pcieRoot

    def __post_init__(self) -> None:
        if not self.uuids:
            self.uuids = [f"GPU-{uuid.uuid4()}" for _ in range(self.count)]

    def layout(self, minor: int) -> Sequence[tuple[str, int]]:
        return self.mig[minor] if minor < len(self.mig) else ()


def _attributes(gpus: DraGpus, minor: int) -> dict[str, Any]:
    board = gpus.board
    attributes: dict[str, Any] = {
        "productName": {"string": board.product},
        "brand": {"string": "Nvidia"},
        "architecture": {"string": board.architecture},
        "cudaComputeCapability": {"version": board.compute_capability},
        "driverVersion": {"version": "580.95.5"},
        "cudaDriverVersion": {"version": "13.0.0"},
    }
    if gpus.pcie_roots:
        attributes[PCIE_ROOT] = {"string": pcie_root(minor, gpus.count, gpus.pcie_roots)}
    return attributes


def _gpu_device(gpus: DraGpus, minor: int, *, partitionable: bool) -> dict[str, Any]:
    device: dict[str, Any] = {
        "name": f"gpu-{minor}",
        "attributes": {"type": {"string": "gpu"}, "uuid": {"string": gpus.uuids[minor]}, **_attributes(gpus, minor)},
        "capacity": {"memory": {"value": str(gpus.board.memory_bytes)}},
    }
    if partitionable:  # partitions.go PartConsumesCounters: the whole GPU consumes every counter of its set
        device["consumesCounters"] = [{"counterSet": f"gpu-{minor}-counter-set", "counters": _counters(gpus, 0, 8)}]
    return device


def _mig_name(minor: int, profile: ProfileSpec, start: int) -> str:
    return f"gpu-{minor}-mig-{profile.name.replace('.', '').replace('+', '-')}-{_GI_PROFILE_IDS[profile.key]}-{start}"


def _mig_device(gpus: DraGpus, minor: int, profile: ProfileSpec, start: int, *, partition: bool) -> dict[str, Any]:
    attributes = {
        "type": {"string": "mig"},
        "parentUUID": {"string": gpus.uuids[minor]},
        "profile": {"string": profile.name},
        **_attributes(gpus, minor),
    }
    capacity: dict[str, Any] = {
        "memory": {"value": str(profile.memory_mib * MIB)},
        "multiprocessors": {"value": str(profile.compute_slices * 18)},
    }
    device: dict[str, Any] = {"name": _mig_name(minor, profile, start), "attributes": attributes, "capacity": capacity}
    if partition:
        counters = _counters(gpus, start, profile.memory_slices, memory=profile.memory_mib * MIB)
        device["consumesCounters"] = [{"counterSet": f"gpu-{minor}-counter-set", "counters": counters}]
    else:
        attributes["uuid"] = {"string": f"MIG-{uuid.uuid4()}"}
        for index in range(start, start + profile.memory_slices):  # MigDeviceInfo.GetDevice
            capacity[f"memorySlice{index}"] = {"value": "1"}
    return device


def _counters(gpus: DraGpus, start: int, size: int, *, memory: int | None = None) -> dict[str, Any]:
    counters: dict[str, Any] = {"memory": {"value": str(memory if memory is not None else gpus.board.memory_bytes)}}
    for index in range(start, start + size):  # partitions.go addCountersForMemSlices
        counters[f"memory-slice-{index}"] = {"value": "1"}
    return counters


def _toggles_mig(gpus: DraGpus) -> bool:
    """Hopper and newer change MIG mode without a GPU reset (nvlib.go ``supportsMIGModeToggle``)."""
    return gpus.board.architecture != "Ampere"


def _capable(gpus: DraGpus, minor: int) -> bool:
    """nvlib.go ``isDynamicMIGCapable``: Hopper and newer always; an Ampere GPU only with MIG already on (``mig``:
    a layout given for it), whose partitions the driver can then create without a reset. Otherwise the GPU is
    published whole, with no counter set and no partitions (partitions.go ``PartSharedCounterSets`` returns none)."""
    return _toggles_mig(gpus) or bool(gpus.layout(minor))


def pool_devices(gpus: DraGpus) -> list[list[dict[str, Any]]]:
    """The devices of each of the pool's device slices (static: one slice; dynamic MIG: one per GPU)."""
    profiles = GPU_MODEL_BY_NAME[gpus.board.model].profiles()
    if gpus.dynamic_mig:
        per_gpu = []
        for minor in range(gpus.count):
            if not _capable(gpus, minor):
                per_gpu.append([_gpu_device(gpus, minor, partitionable=False)])
                continue
            # A MIG-enabled Ampere GPU cannot become whole without a reset: its partitions only (nvlib.go).
            whole = _toggles_mig(gpus) or not gpus.layout(minor)
            devices = [_gpu_device(gpus, minor, partitionable=True)] if whole else []
            for profile in profiles.values():
                devices += [_mig_device(gpus, minor, profile, start, partition=True) for start in profile.starts]
            per_gpu.append(sorted(devices, key=lambda d: d["name"]))
        return per_gpu
    devices = []
    for minor in range(gpus.count):
        layout = gpus.layout(minor)
        if not layout:
            devices.append(_gpu_device(gpus, minor, partitionable=False))
        for name, start in layout:
            devices.append(_mig_device(gpus, minor, profiles[name], start, partition=False))
    return [devices]


def pool_slices(gpus: DraGpus, *, generation: int = 1) -> list[dict[str, Any]]:
    """The ResourceSlice objects of ``gpus.node``'s pool at ``generation`` (module doc)."""
    specs: list[dict[str, Any]] = []
    if gpus.dynamic_mig:
        counter_sets = [
            {"name": f"gpu-{minor}-counter-set", "counters": _counters(gpus, 0, 8)}
            for minor in range(gpus.count)
            if _capable(gpus, minor)
        ]
        if counter_sets:
            specs.append({"sharedCounters": counter_sets})
    specs += [{"devices": devices} for devices in pool_devices(gpus)]
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{gpus.node}-{DRIVER}-{i}"},
            "spec": {
                "driver": DRIVER,
                "nodeName": gpus.node,
                "pool": {"name": gpus.node, "generation": generation, "resourceSliceCount": len(specs)},
                **spec,
            },
        }
        for i, spec in enumerate(specs)
    ]


class NvidiaDraDriver:
    """The plugin on every DRA node of a :class:`~tests.scheduler.kube_emulator.Cluster`: publishes and republishes
    each node's pool over HTTP (module doc)."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.generations: dict[str, int] = {}
        self.published: dict[str, list[str]] = {}  # node -> its slices' names

    def publish(self, gpus: DraGpus, *, slices: int | None = None) -> list[dict[str, Any]]:
        """Write ``gpus.node``'s pool at the next generation; ``slices``: stop after that many (a pool caught mid-way
        through an update, as a watcher sees it until the controller has written every slice)."""
        generation = self.generations.get(gpus.node, 0) + 1
        self.generations[gpus.node] = generation
        wanted = pool_slices(gpus, generation=generation)
        written = wanted[:slices] if slices is not None else wanted
        before = set(self.published.get(gpus.node, []))
        for body in written:
            name = body["metadata"]["name"]
            if name in before:
                # A merge patch keeps the keys it does not name: the controller's update replaces the whole spec.
                patch = {**body, "spec": {"devices": None, "sharedCounters": None, **body["spec"]}}
                self.cluster.resource.patch_resource_slice(name, patch, _content_type="application/merge-patch+json")
            else:
                self.cluster.resource.create_resource_slice(body)
        if slices is None:  # the controller deletes the slices the pool no longer has
            for name in before - {b["metadata"]["name"] for b in wanted}:
                self.cluster.resource.delete_resource_slice(name)
        self.published[gpus.node] = sorted(before | {b["metadata"]["name"] for b in written})
        return wanted
