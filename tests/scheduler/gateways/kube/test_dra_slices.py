"""ResourceSlices read into a node's inventory, and a node observed from them (pure functions, no API).

The slices are what the test cluster's drivers publish (tests/scheduler/kube_harness/dra_driver.py,
efa_dra_driver.py: upstream's shapes), then broken on purpose where a test says so.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest

from scheduler.gateways.kube.dra_devices import DraDeviceKind
from scheduler.gateways.kube.dra_memo import InventoryMemo
from scheduler.gateways.kube.dra_slices import attribute, device_classes, read_slices
from scheduler.gateways.kube.nodes import node_observation
from scheduler.gateways.protocol import Device, DeviceApi
from tests.scheduler.kube_harness.dra_driver import A100, DraGpus, GpuBoard, pool_slices
from tests.scheduler.kube_harness.efa_dra_driver import efa_slice

NODE = "dra-1"


def _gpus(**kwargs: Any) -> list[dict[str, Any]]:
    return pool_slices(DraGpus(NODE, **kwargs))


def _raw_node(name: str = NODE, labels: dict[str, str] | None = None, capacity: dict[str, str] | None = None):
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": "True"}], "capacity": capacity or {}},
    }


def _observe(raw: dict[str, Any], slices: list[dict[str, Any]]):
    inventory = read_slices(slices).inventories.get(raw["metadata"]["name"])
    return node_observation(raw, now=0.0, topology_labels=(), mig_config_timeout_s=900.0, dra=inventory)


# -- the reader ---------------------------------------------------------------------------------------------


def test_eight_h100s_are_eight_whole_gpus_of_the_catalog_model() -> None:
    read = read_slices(_gpus())
    found = read.inventories[NODE]
    assert (found.gpu_model, found.gpu_count, found.waiting, read.problems) == ("H100-SXM5-80GB", 8, "", ())
    assert found.mig == ((),) * 8 and not found.dynamic_mig
    assert [(d.name, d.gpu_index, d.kind) for d in found.node.gpus()][:2] == [
        ("gpu-0", 0, DraDeviceKind.GPU),
        ("gpu-1", 1, DraDeviceKind.GPU),
    ]
    assert found.node.device_for(Device(gpu=7)).name == "gpu-7"


def test_static_mig_instances_are_the_layout_and_serve_the_engines_placements() -> None:
    found = read_slices(_gpus(board=A100, count=2, mig=[[("3g.40gb", 0), ("3g.40gb", 4)], []])).inventories[NODE]
    assert (found.gpu_model, found.gpu_count) == ("A100-SXM4-80GB", 2)
    assert found.mig == ((("3g.40gb", 0), ("3g.40gb", 4)), ())
    assert [d.name for d in found.node.gpus()] == ["gpu-1"]  # a GPU in MIG mode publishes its instances, not itself
    served = found.node.device_for(Device(gpu=0, mig_profile="3g.40gb", mig_start=4))
    assert served is not None and served.name == "gpu-0-mig-3g40gb-9-4" and not served.partition


def test_mig_devices_named_as_v25_8_and_before_are_read_too() -> None:
    (slice_,) = _gpus(board=A100, count=1, mig=[[("3g.40gb", 0), ("3g.40gb", 4)]])
    for device, name in zip(slice_["spec"]["devices"], ("gpu-0-mig-9-0-4", "gpu-0-mig-9-4-4"), strict=True):
        device["name"] = name  # gpu-<minor>-mig-<GI profile id>-<start>-<size>
    assert read_slices([slice_]).inventories[NODE].mig == ((("3g.40gb", 0), ("3g.40gb", 4)),)


def test_dynamic_mig_publishes_whole_gpus_and_partitions_but_no_instances() -> None:
    slices = _gpus(count=2, dynamic_mig=True)
    assert len(slices) == 3 and "sharedCounters" in slices[0]["spec"]  # the counters' slice, then one per GPU
    found = read_slices(slices).inventories[NODE]
    assert (found.gpu_count, found.dynamic_mig, found.mig) == (2, True, ((), ()))
    assert len(found.node.gpus()) == 2
    assert found.node.partitions() and all(d.kind is DraDeviceKind.MIG for d in found.node.partitions())
    assert found.node.device_for(Device(gpu=1, mig_profile="1g.10gb", mig_start=6)).partition


def test_efa_interfaces_are_counted_and_the_ena_interface_is_not() -> None:
    read = read_slices([*_gpus(), efa_slice(NODE, 32, ena=True)])
    found = read.inventories[NODE]
    assert found.efa_devices == 32 and len(found.node.fabrics()) == 32
    assert all(d.driver == "dra.net" for d in found.node.fabrics())


def test_an_efa_only_pool_has_no_gpu_pool() -> None:
    found = read_slices([efa_slice(NODE, 4)]).inventories[NODE]
    assert (found.gpu_pool, found.gpu_count, found.efa_devices, found.waiting) == (False, 0, 4, "")


def test_an_incomplete_pool_is_not_counted() -> None:
    slices = _gpus(dynamic_mig=True)  # nine slices: the counters and one per GPU
    found = read_slices(slices[:4]).inventories[NODE]
    assert found.gpu_pool and found.gpu_count == 0 and found.node.devices == ()
    assert "incomplete: 4 of its 9 ResourceSlices of generation 1" in found.waiting


def test_the_newest_generation_wins_and_older_slices_are_ignored() -> None:
    old = _gpus(count=4)
    new = pool_slices(DraGpus(NODE, count=2), generation=2)
    assert read_slices([*old, *new]).inventories[NODE].gpu_count == 2
    assert read_slices([*new, *old]).inventories[NODE].gpu_count == 2
    # Half-way through an update: one slice of the new generation out of two is there, the old one is ignored.
    half = pool_slices(DraGpus(NODE, count=2, dynamic_mig=True), generation=3)[:1]
    assert "incomplete" in read_slices([*old, *half]).inventories[NODE].waiting


def test_a_device_name_twice_in_a_pool_makes_it_invalid() -> None:
    slices = _gpus(count=2, dynamic_mig=True)
    slices[2]["spec"]["devices"][0] = copy.deepcopy(slices[1]["spec"]["devices"][0])
    assert "invalid: duplicate device name gpu-0" in read_slices(slices).inventories[NODE].waiting


@pytest.mark.parametrize("nameless", [{"attributes": {}}, "gpu-9"])
def test_a_device_without_a_name_makes_its_pool_invalid(nameless) -> None:
    (slice_,) = _gpus(count=2)
    slice_["spec"]["devices"].append(nameless)
    assert "invalid: a device has no name" in read_slices([slice_]).inventories[NODE].waiting


def test_a_pool_whose_slices_name_two_nodes_is_invalid() -> None:
    slices = _gpus(count=2, dynamic_mig=True)
    slices[1]["spec"]["nodeName"] = "other"
    assert "its slices name two nodes" in read_slices(slices).inventories[NODE].waiting


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda s: s.pop("spec"), "has no spec"),
        (lambda s: s["spec"].pop("pool"), "names no pool"),
        (lambda s: s["spec"]["pool"].update(generation=-1), "pool.generation -1 is not a number ≥ 0"),
        (lambda s: s["spec"]["pool"].update(resourceSliceCount=0), "pool.resourceSliceCount 0 is not a number ≥ 1"),
        (lambda s: s["spec"].pop("nodeName"), "sets none of nodeName"),
        (lambda s: s["spec"].update(allNodes=True), "sets nodeName, allNodes of nodeName"),
        (lambda s: s["spec"].update(devices="gpu-0"), "its devices are not a list"),
    ],
)
def test_a_malformed_slice_is_skipped_with_its_reason_and_never_raises(change, reason) -> None:
    (slice_,) = _gpus(count=1)
    change(slice_)
    read = read_slices([slice_, efa_slice("other", 2)])
    assert len(read.problems) == 1 and reason in read.problems[0]
    assert NODE not in read.inventories and read.inventories["other"].efa_devices == 2


def test_slices_of_other_drivers_and_of_several_nodes_are_no_nodes_inventory() -> None:
    (shared,) = _gpus(count=1)
    shared["spec"].pop("nodeName")
    shared["spec"]["allNodes"] = True
    (other,) = _gpus(count=1)
    other["spec"]["driver"] = "neuron.amazonaws.com"
    assert read_slices([shared, other]).inventories == {}
    assert read_slices([shared, other]).problems == ()


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda d: d[0].update(name="gpu-x"), "GPU gpu-x is not gpu-<n>"),
        (lambda d: d[1]["attributes"].pop("profile"), "has no readable parent or profile"),
        (lambda d: d[1].update(name="gpu-1-mig-x"), "has no readable parent or profile"),
        (lambda d: d[1]["attributes"]["productName"].update(string="NVIDIA H200"), "one GPU product per node"),
        (lambda d: d[1]["attributes"]["profile"].update(string="7g.80gb"), "overlaps another instance"),
    ],
)
def test_gpus_that_cannot_be_read_make_the_node_wait_with_the_reason(change, reason) -> None:
    (slice_,) = _gpus(board=A100, count=2, mig=[[], [("3g.40gb", 0), ("3g.40gb", 4)]])
    change(slice_["spec"]["devices"])
    found = read_slices([slice_]).inventories[NODE]
    assert found.gpu_count == 0 and reason in found.waiting


def test_a_gpu_the_catalog_lacks_waits() -> None:
    board = GpuBoard("NVIDIA B200", "H100-SXM5-80GB", "Blackwell", "10.0.0", 180 * 1024**3)
    found = read_slices(_gpus(board=board, count=1)).inventories[NODE]
    assert "GPU 'NVIDIA B200' is not in the catalog" in found.waiting


def test_gpu_indices_close_a_gap_in_the_minors_and_other_device_types_are_skipped() -> None:
    (slice_,) = _gpus(count=3)
    devices = slice_["spec"]["devices"]
    devices[1]["name"], devices[2]["name"] = "gpu-3", "gpu-5"
    devices.append({"name": "gpu-vfio-0", "attributes": {"type": {"string": "vfio"}}})
    found = read_slices([slice_]).inventories[NODE]
    assert [(d.name, d.gpu_index) for d in found.node.gpus()] == [("gpu-0", 0), ("gpu-3", 1), ("gpu-5", 2)]


def test_attributes_are_read_with_or_without_the_drivers_domain() -> None:
    device = {"attributes": {"type": {"string": "gpu"}, "dra.net/rdma": {"bool": True}, "index": {"int": 3}}}
    assert attribute(device, "gpu.nvidia.com", "type") == "gpu"
    assert attribute(device, "dra.net", "rdma") is True
    assert attribute(device, "gpu.nvidia.com", "index") == 3
    assert attribute(device, "gpu.nvidia.com", "uuid") is None
    assert attribute({"attributes": "junk"}, "x", "type") is None
    assert attribute({"attributes": {"type": "gpu"}}, "x", "type") is None


def test_device_classes_are_their_names() -> None:
    assert device_classes([{"metadata": {"name": "gpu.nvidia.com"}}, {"metadata": {}}]) == {"gpu.nvidia.com"}


# -- the memo (scheduler/gateways/kube/dra_memo.py): a speed-up, never a different answer ---------------------


def _versioned(slices: list[dict[str, Any]], version: str = "1") -> list[dict[str, Any]]:
    for raw in slices:
        raw["metadata"]["resourceVersion"] = version
    return slices


def test_the_memo_gives_the_inventories_read_without_it_and_reads_a_changed_pool_again() -> None:
    memo = InventoryMemo()
    a100 = _versioned(pool_slices(DraGpus("a", board=A100, count=2, mig=[[("7g.80gb", 0)], []])))
    h100 = _versioned([*pool_slices(DraGpus("h", dynamic_mig=True)), efa_slice("h", 4)])
    broken = _versioned(pool_slices(DraGpus("w", count=2, dynamic_mig=True))[:2])
    cluster = [*a100, *h100, *broken]
    first = read_slices(cluster, memo=memo)
    assert first == read_slices(cluster) and memo.hits == 0
    again = read_slices(cluster, memo=memo)
    assert again == read_slices(cluster) and memo.hits == 3
    assert again.inventories["h"] is first.inventories["h"]  # kept, not read again
    # The driver republishes node a: a new generation and new resourceVersions; a changes, h does not.
    a100 = _versioned(pool_slices(DraGpus("a", board=A100, count=2, mig=[[], []]), generation=2), "9")
    changed = read_slices([*a100, *h100], memo=memo)
    assert changed == read_slices([*a100, *h100])
    assert changed.inventories["a"].mig == ((), ()) and changed.inventories["h"] is first.inventories["h"]
    assert "w" not in changed.inventories
    read_slices([*a100, *h100, *broken], memo=memo)  # node w was dropped from the memo: read afresh
    assert memo.misses == 3 + 1 + 1


def test_slices_without_a_resource_version_are_never_memoised() -> None:
    memo = InventoryMemo()
    slices = _gpus(count=2)
    read_slices(slices, memo=memo)
    slices[0]["spec"]["devices"].pop()
    assert read_slices(slices, memo=memo).inventories[NODE].gpu_count == 1 and memo.hits == 0


# -- node_observation on a DRA node ---------------------------------------------------------------------------


def test_a_dra_node_is_observed_from_its_slices_whatever_its_gfd_labels_say() -> None:
    labels = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "nvidia.com/gpu.count": "2"}
    found = _observe(_raw_node(labels=labels), _gpus())
    assert found is not None
    assert (found.gpu_model, found.gpu_count, found.device_api, found.schedulable) == (
        "H100-SXM5-80GB",
        8,
        DeviceApi.DRA,
        True,
    )


def test_a_dra_node_keeps_its_mig_layout_and_reads_efa_from_its_fabric_driver() -> None:
    slices = [*_gpus(board=A100, count=2, mig=[[("7g.80gb", 0)], []]), efa_slice(NODE, 4, ena=True)]
    found = _observe(_raw_node(), slices)
    assert found is not None and found.mig == ((("7g.80gb", 0),), ())
    assert (found.fabric, found.fabric_devices) == ("efa", 4)


def test_a_device_plugin_node_with_efa_through_dra_is_an_efa_node() -> None:
    labels = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"}
    found = _observe(_raw_node(labels=labels, capacity={"nvidia.com/gpu": "8"}), [efa_slice(NODE, 32)])
    assert found is not None
    assert (found.device_api, found.fabric, found.fabric_devices) == (DeviceApi.DEVICE_PLUGIN, "efa", 32)


def test_a_dra_node_whose_pool_is_incomplete_is_left_out_and_says_why(caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="scheduler.gateways.kube.nodes"):
        assert _observe(_raw_node(), _gpus(dynamic_mig=True)[:2]) is None
    assert "dra-1: its DRA GPUs are not counted until pool gpu.nvidia.com/dra-1 is incomplete" in caplog.text


def test_a_known_node_whose_efa_pool_is_incomplete_takes_no_new_work(caplog) -> None:
    efa = efa_slice(NODE, 4)
    efa["spec"]["pool"]["resourceSliceCount"] = 2
    with caplog.at_level(logging.WARNING, logger="scheduler.gateways.kube.nodes"):
        found = _observe(_raw_node(), [*_gpus(), efa])
    assert found is not None and found.gpu_count == 8 and not found.schedulable
    assert "no new work until pool dra.net/dra-1 is incomplete" in caplog.text


def test_a_node_with_both_the_device_plugin_and_the_dra_driver_is_counted_once_and_takes_no_new_work(caplog) -> None:
    labels = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"}
    with caplog.at_level(logging.WARNING, logger="scheduler.gateways.kube.nodes"):
        found = _observe(_raw_node(labels=labels, capacity={"nvidia.com/gpu": "8"}), _gpus())
    assert found is not None
    assert (found.gpu_count, found.device_api, found.schedulable) == (8, DeviceApi.DEVICE_PLUGIN, False)
    assert "both publish its GPUs and cannot run on one node" in caplog.text


def test_a_device_plugin_that_has_left_the_node_leaves_a_zero_that_does_not_count() -> None:
    found = _observe(_raw_node(capacity={"nvidia.com/gpu": "0"}), _gpus())  # the kubelet zeroes a gone plugin's
    assert found is not None and (found.device_api, found.schedulable) == (DeviceApi.DRA, True)


def test_without_slices_a_node_is_read_as_before() -> None:
    labels = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"}
    found = node_observation(_raw_node(labels=labels), now=0.0, topology_labels=(), mig_config_timeout_s=900.0)
    assert found is not None and (found.gpu_count, found.device_api, found.fabric) == (8, "device-plugin", "tcp")
    assert _observe(_raw_node(), []) is None  # no labels, no capacity, no slices: no GPUs
