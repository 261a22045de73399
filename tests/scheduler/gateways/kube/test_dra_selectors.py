"""A claim's CEL selectors against the devices the NVIDIA DRA driver publishes today (the harness driver,
tests/scheduler/kube_harness/dra_driver.py; CEL as the allocator evaluates it, device_cel.py): each request's
selector, inside its DeviceClass, selects the device Microcosm allocated (a GPU or MIG instance: that one alone; a
dynamic-MIG partition: the partitions of its profile on its GPU, the placement being the allocation's), and the
``index``/``parentIndex`` selectors of earlier releases fail to evaluate on the devices of current ones."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.gateways.kube.dra_claims import GPU_CLASS, MIG_CLASS, ClaimRequest, replica_requests
from scheduler.gateways.kube.dra_devices import DraNode
from scheduler.gateways.kube.dra_slices import NVIDIA_GPU_DRIVER, read_slices
from scheduler.gateways.protocol import Device
from tests.scheduler.kube_harness.device_cel import CelError, matches
from tests.scheduler.kube_harness.dra_driver import DraGpus, pool_slices

# The DeviceClasses of the driver's chart (deployments/helm/dra-driver-nvidia-gpu/templates/deviceclass-*.yaml), as
# tests/scheduler/kube_emulator.py Cluster.add_device_classes installs them.
CLASSES = {
    GPU_CLASS: "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",
    MIG_CLASS: "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'",
}
STATIC_MIG = [("2g.20gb", 0), ("1g.10gb", 2), ("1g.10gb", 3), ("3g.40gb", 4)]


def _published(gpus: DraGpus) -> tuple[DraNode, list[dict[str, Any]]]:
    slices = pool_slices(gpus)
    read = read_slices(slices)
    inventory = read.inventories[gpus.node]
    assert not inventory.waiting, inventory.waiting
    return inventory.node, [d for s in slices for d in s["spec"].get("devices") or []]


def _selected(request: ClaimRequest, devices: list[dict[str, Any]]) -> set[str]:
    """The devices an allocator may give ``request``: its class's and its own selectors both true."""
    (selector,) = request.selectors
    return {
        d["name"]
        for d in devices
        if matches(CLASSES[request.device_class], d, NVIDIA_GPU_DRIVER) and matches(selector, d, NVIDIA_GPU_DRIVER)
    }


def test_a_whole_gpu_is_selected_by_its_uuid_alone() -> None:
    node, devices = _published(DraGpus("n1"))
    (request,) = replica_requests([Device(3)], node)
    assert request.device_class == GPU_CLASS
    assert _selected(request, devices) == {"gpu-3"}


def test_an_existing_mig_instance_is_selected_by_its_uuid_alone() -> None:
    node, devices = _published(DraGpus("n1", count=2, mig=[STATIC_MIG, STATIC_MIG]))
    (request,) = replica_requests([Device(1, "1g.10gb", 3)], node)
    assert request.device_class == MIG_CLASS
    assert _selected(request, devices) == {request.devices[0].name} == {"gpu-1-mig-1g10gb-19-3"}


def test_a_dynamic_mig_partition_is_selected_by_its_gpu_and_profile_and_allocated_at_its_placement() -> None:
    node, devices = _published(DraGpus("n1", count=2, dynamic_mig=True))
    (request,) = replica_requests([Device(1, "3g.40gb", 4)], node)
    (chosen,) = request.devices
    assert chosen.partition and chosen.name == "gpu-1-mig-3g40gb-9-4"
    # No attribute says where a partition sits (its memory slices are counters): the allocation result does.
    assert _selected(request, devices) == {"gpu-1-mig-3g40gb-9-0", "gpu-1-mig-3g40gb-9-4"}


@pytest.mark.parametrize(
    ("gpus", "selector"),
    [
        (
            DraGpus("n1"),
            'device.attributes["gpu.nvidia.com"].type == "gpu" && device.attributes["gpu.nvidia.com"].index == 3',
        ),
        (
            DraGpus("n1", count=1, mig=[STATIC_MIG]),
            'device.attributes["gpu.nvidia.com"].type == "mig" && device.attributes["gpu.nvidia.com"].parentIndex == 0 '
            '&& device.attributes["gpu.nvidia.com"].profile == "3g.40gb"',
        ),
    ],
)
def test_the_index_selectors_of_earlier_releases_cannot_be_evaluated_on_todays_devices(
    gpus: DraGpus, selector: str
) -> None:
    _node, devices = _published(gpus)
    with pytest.raises(CelError, match="no such key"):
        for device in devices:
            matches(selector, device, NVIDIA_GPU_DRIVER)
