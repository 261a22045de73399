"""The devices a Dynamic Resource Allocation node publishes, as the gateway keeps them from observe to apply.

On a DRA node (``resource.k8s.io/v1``) there is no ``nvidia.com/gpu`` extended resource: the NVIDIA GPU DRA driver
and the EFA DRA driver publish ResourceSlices, and a pod gets devices through ResourceClaims that the scheduler
allocates. This module is the contract between the two halves of the gateway's DRA support: reading the slices
into the fleet (a node's :class:`DraNode`) and writing the claims for what the engine placed there (the claim names
the :class:`DraDevice` s a replica's :class:`~scheduler.gateways.protocol.Device` s map to). Pure data: no
``kubernetes`` import.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from scheduler.gateways.protocol import Device


class DraDeviceKind(StrEnum):
    GPU = "gpu"  # a whole GPU
    MIG = "mig"  # a MIG device: an instance that exists, or (dynamic MIG) a partition the driver creates on allocation
    FABRIC = "fabric"  # a network device for multi-node jobs (an EFA interface, an RDMA NIC)


@dataclass(frozen=True, slots=True)
class DraDevice:
    """One device of one ResourceSlice: what a claim's allocation result names (``driver``, ``pool``, ``name``)."""

    driver: str  # the slice's spec.driver, e.g. "gpu.nvidia.com"
    pool: str  # the slice's spec.pool.name (a node-local driver names the pool after the node)
    name: str  # the device's name within the pool
    kind: DraDeviceKind
    gpu_index: int | None = None  # the GPU's index on the node (a MIG device: its parent's); None for a fabric
    profile: str = ""  # a MIG device's profile, e.g. "1g.10gb"
    mig_start: int | None = None  # a MIG device's first memory slice (its placement), where the driver says it
    # A dynamic-MIG partition (KEP-4815 partitionable device: it consumes its GPU's shared counters and has no
    # instance, hence no uuid, until a claim allocates it); False for a whole GPU, an existing MIG instance, a fabric.
    partition: bool = False
    # What a claim's CEL selector pins it by (the NVIDIA driver's attributes, cmd/gpu-kubelet-plugin deviceinfo.go,
    # mig.go CommonAttributesMig): a whole GPU's or an existing MIG instance's ``uuid``; a partition has none yet,
    # only its GPU's (``parentUUID``, also set on an existing instance). "" where the driver published none.
    uuid: str = ""
    parent_uuid: str = ""
    # Dynamic MIG (KEP-4815): the GPU's shared counter set the device consumes from and the memory slices it takes
    # (a partition its placement's, the whole GPU all of them); two devices of one set whose slices overlap cannot be
    # allocated together, whatever their names ("" and empty: a device that consumes no counter).
    counter_set: str = ""
    memory_slices: frozenset[int] = frozenset()
    # The PCIe root complex the device sits under (the standard attribute ``resource.kubernetes.io/pcieRoot``,
    # ``pci<domain>:<bus>``: k8s.io/dynamic-resource-allocation deviceattribute/attribute.go, KEP-5491), which the
    # NVIDIA driver publishes for a GPU (deviceinfo.go ``GpuInfo.Attributes``) and DRANET for a NIC
    # (pkg/inventory: ``GetPCIeRootAttributeByPCIBusID``); a MIG device is under its GPU's. "" when none published.
    pcie_root: str = ""

    def overlaps(self, other: DraDevice) -> bool:
        """Do ``self`` and ``other`` consume the same memory slice of one GPU's counter set?"""
        same_set = (self.driver, self.pool, self.counter_set) == (other.driver, other.pool, other.counter_set)
        return bool(self.counter_set) and same_set and bool(self.memory_slices & other.memory_slices)

    def serves(self, device: Device) -> bool:
        """True when this device is the one the engine's placement ``device`` means."""
        if device.mig_profile is None:
            return self.kind is DraDeviceKind.GPU and self.gpu_index == device.gpu
        return (
            self.kind is DraDeviceKind.MIG
            and self.gpu_index == device.gpu
            and self.profile == device.mig_profile
            and (device.mig_start is None or self.mig_start is None or self.mig_start == device.mig_start)
        )


@dataclass(frozen=True, slots=True)
class DraNode:
    """A node whose GPUs are published through DRA (never also counted through the device plugin's resource)."""

    node: str
    devices: tuple[DraDevice, ...]

    def gpus(self) -> tuple[DraDevice, ...]:
        return tuple(d for d in self.devices if d.kind is DraDeviceKind.GPU)

    def migs(self) -> tuple[DraDevice, ...]:
        return tuple(d for d in self.devices if d.kind is DraDeviceKind.MIG)

    def fabrics(self) -> tuple[DraDevice, ...]:
        return tuple(d for d in self.devices if d.kind is DraDeviceKind.FABRIC)

    def partitions(self) -> tuple[DraDevice, ...]:
        """The dynamic-MIG partitions the driver creates on allocation (none on a static-MIG or whole-GPU node)."""
        return tuple(d for d in self.devices if d.partition)

    def device_for(self, device: Device) -> DraDevice | None:
        """The published device that serves the engine's ``device``; None when the node publishes none (the
        inventory changed since observe: the caller refuses the bind rather than guess)."""
        return next((d for d in self.devices if d.serves(device)), None)
