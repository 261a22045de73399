"""The DRA device contract: which published device serves an engine placement."""

from scheduler.gateways.kube.dra_devices import DraDevice, DraDeviceKind, DraNode
from scheduler.gateways.protocol import Device

GPU0 = DraDevice("gpu.nvidia.com", "node-a", "gpu-0", DraDeviceKind.GPU, gpu_index=0)
GPU1 = DraDevice("gpu.nvidia.com", "node-a", "gpu-1", DraDeviceKind.GPU, gpu_index=1)
MIG = DraDevice(
    "gpu.nvidia.com", "node-a", "gpu-1-mig-1g10gb-0", DraDeviceKind.MIG, gpu_index=1, profile="1g.10gb", mig_start=0
)
EFA = DraDevice("efa.amazonaws.com", "node-a", "efa-0", DraDeviceKind.FABRIC)
NODE = DraNode("node-a", (GPU0, GPU1, MIG, EFA))


def test_a_whole_gpu_is_served_by_the_gpu_of_its_index() -> None:
    assert NODE.device_for(Device(gpu=1)) is GPU1
    assert NODE.device_for(Device(gpu=7)) is None


def test_a_mig_device_needs_its_parent_profile_and_placement() -> None:
    assert NODE.device_for(Device(gpu=1, mig_profile="1g.10gb", mig_start=0)) is MIG
    assert NODE.device_for(Device(gpu=1, mig_profile="1g.10gb", mig_start=3)) is None
    assert NODE.device_for(Device(gpu=0, mig_profile="1g.10gb", mig_start=0)) is None
    assert NODE.device_for(Device(gpu=1, mig_profile="2g.20gb", mig_start=0)) is None


def test_kinds_are_kept_apart() -> None:
    assert NODE.gpus() == (GPU0, GPU1)
    assert NODE.migs() == (MIG,)
    assert NODE.fabrics() == (EFA,)
