"""Dynamic MIG through DRA (scheduler/gateways/kube/dra_mig.py): the layout kept on a node whose driver publishes
partitions, read back by observe, and refused when the driver could not allocate it; the gateway keeps a layout
there with one patch and relabels elsewhere."""

from __future__ import annotations

import logging

import pytest

from scheduler.errors import GatewayConflict
from scheduler.gateways.kube.dra_mig import LAYOUT_ANNOTATION, dynamic, layout_annotation, layouts_of, unpublished
from scheduler.gateways.kube.dra_slices import read_slices
from scheduler.gateways.kube.gateway import KubeGateway
from scheduler.gateways.kube.nodes import node_observation
from tests.scheduler.kube_emulator import cluster_fixture
from tests.scheduler.kube_harness.dra_driver import A100, DraGpus, pool_slices

H100 = "H100-SXM5-80GB"
LAYOUT = (("1g.10gb", 0), ("1g.10gb", 1), ("2g.20gb", 2), ("3g.40gb", 4))
cluster = pytest.fixture(cluster_fixture)


def _node(gpus: DraGpus):
    return read_slices(pool_slices(gpus)).inventories[gpus.node]


def test_a_layout_round_trips_through_the_annotation() -> None:
    value = layout_annotation((LAYOUT, ()))
    assert layouts_of({LAYOUT_ANNOTATION: value}, H100, 2) == (LAYOUT, ())
    assert layouts_of({}, H100, 2) is None


@pytest.mark.parametrize(
    "value",
    [
        "not json",
        layout_annotation((LAYOUT,)),  # one GPU's layout on a two-GPU node
        '[[["1g.10gb",0],["3g.40gb",0]],[]]',  # overlapping instances
        '[[["9g.99gb",0]],[]]',  # no such profile
        '{"gpu":0}',
    ],
)
def test_a_layout_that_is_not_one_of_the_node_is_read_as_none(value: str) -> None:
    assert layouts_of({LAYOUT_ANNOTATION: value}, H100, 2) is None


def test_only_a_node_whose_driver_publishes_partitions_is_dynamic() -> None:
    assert dynamic(_node(DraGpus("h", count=1, dynamic_mig=True)).node)
    assert not dynamic(_node(DraGpus("s", count=1, mig=[list(LAYOUT)])).node)
    assert not dynamic(None)


def test_an_a100_under_dynamic_mig_is_dynamic_only_with_mig_already_on_and_never_offers_itself_whole() -> None:
    off = _node(DraGpus("a", board=A100, count=1, dynamic_mig=True))
    assert not off.waiting and not dynamic(off.node) and off.mig == ((),)  # published whole: the relabel flow
    on = _node(DraGpus("a", board=A100, count=1, dynamic_mig=True, mig=[[("7g.80gb", 0)]]))
    assert dynamic(on.node)
    assert unpublished(on.node, ((("3g.40gb", 0), ("3g.40gb", 4)),)) == []
    assert unpublished(on.node, ((),)) == ["the whole GPU 0"]
    # Read as what it offers: MIG enabled, one instance spanning the GPU (no instance exists until a claim is
    # prepared), never whole.
    assert (on.mig, on.mig_only, on.whole_only) == (((("7g.80gb", 0),),), frozenset({0}), frozenset())


def _raw(name: str, annotations: dict[str, str]) -> dict:
    return {
        "metadata": {"name": name, "labels": {}, "annotations": annotations},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


KW = {"now": 0.0, "topology_labels": (), "mig_config_timeout_s": 900.0}


def test_an_a100_with_one_gpu_mig_enabled_under_dynamic_mig_never_changes_a_gpu_s_mig_mode(caplog) -> None:
    # GPU 0 MIG-enabled (partitions only), GPU 1 MIG-disabled (itself only, as without DynamicMIG).
    inventory = _node(DraGpus("a", board=A100, count=2, dynamic_mig=True, mig=[[("7g.80gb", 0)], []]))
    assert (inventory.mig_only, inventory.whole_only) == (frozenset({0}), frozenset({1}))
    observed = node_observation(_raw("a", {}), dra=inventory, **KW)
    assert observed.mig == ((("7g.80gb", 0),), ()) and observed.reconfiguration == "dynamic-fixed-mode"
    kept = (LAYOUT, ())
    observed = node_observation(_raw("a", {LAYOUT_ANNOTATION: layout_annotation(kept)}), dra=inventory, **KW)
    assert observed.mig == kept
    # A layout kept before the GPUs' MIG modes changed (a reset since): each GPU is read as the driver publishes it.
    stale = layout_annotation(((), LAYOUT))
    with caplog.at_level(logging.WARNING, logger="scheduler.gateways.kube.dra_mig"):
        observed = node_observation(_raw("a", {LAYOUT_ANNOTATION: stale}), dra=inventory, **KW)
    assert observed.mig == ((("7g.80gb", 0),), ())
    assert "GPUs [0, 1] cannot take the MIG mode kept for them" in caplog.text


def test_a_hopper_in_dynamic_mig_is_reconfigured_at_once_and_a_static_mig_dra_node_relabels() -> None:
    hopper = node_observation(_raw("h", {}), dra=_node(DraGpus("h", count=1, dynamic_mig=True)), **KW)
    static = node_observation(_raw("s", {}), dra=_node(DraGpus("s", count=1, mig=[list(LAYOUT)])), **KW)
    assert (hopper.reconfiguration, static.reconfiguration) == ("dynamic", "relabel")


def test_a_layout_needs_a_published_partition_for_each_instance_and_a_published_gpu_for_each_whole_one() -> None:
    dynamic_node = _node(DraGpus("h", count=2, dynamic_mig=True)).node
    assert unpublished(dynamic_node, (LAYOUT, ())) == []
    assert unpublished(dynamic_node, ((("1g.10gb", 7),), ())) == ["1g.10gb at slice 7 on GPU 0"]
    # A MIG-enabled A100 under DynamicMIG publishes partitions but not the GPU itself (no whole GPU without a reset).
    no_whole = dynamic_node.__class__(
        "h", tuple(d for d in dynamic_node.devices if not (d.gpu_index == 1 and not d.partition))
    )
    assert unpublished(no_whole, (LAYOUT, ())) == ["the whole GPU 1"]


def test_observe_reads_the_kept_layout_on_a_dynamic_node_and_whole_gpus_without_one() -> None:
    inventory = _node(DraGpus("h", count=2, dynamic_mig=True))
    raw = {
        "metadata": {"name": "h", "labels": {}, "annotations": {}},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
    kw = {"now": 0.0, "topology_labels": (), "mig_config_timeout_s": 900.0, "dra": inventory}
    assert node_observation(raw, **kw).mig == ((), ())
    raw["metadata"]["annotations"] = {LAYOUT_ANNOTATION: layout_annotation((LAYOUT, ()))}
    observed = node_observation(raw, **kw)
    assert observed.mig == (LAYOUT, ()) and observed.schedulable


def test_the_gateway_keeps_a_dynamic_layout_with_one_patch_and_refuses_one_the_driver_cannot_allocate(cluster) -> None:
    cluster.add_dra_node("h", gpus=2, dynamic_mig=True)
    gateway = KubeGateway(cluster.new_api_client(), consistent_reads=True, sleep=lambda _s: None, dra=True)
    gateway.observe()
    cluster.clear_log()

    gateway.node_reconfigure(node="h", layouts=(LAYOUT, ()))
    gateway.node_reconfigure(node="h", layouts=(LAYOUT, ()))  # applied twice: nothing more is written

    assert [(m, p) for m, p in cluster.requests() if m == "PATCH"] == [("PATCH", "/api/v1/nodes/h")]
    assert cluster.node("h")["metadata"]["annotations"][LAYOUT_ANNOTATION] == layout_annotation((LAYOUT, ()))
    with pytest.raises(GatewayConflict, match=r"publishes no partition for 1g\.10gb at slice 7 on GPU 0"):
        gateway.node_reconfigure(node="h", layouts=((("1g.10gb", 7),), ()))


def test_the_counters_a_device_consumes_are_read_and_overlap_only_within_one_gpu() -> None:
    devices = {d.name: d for d in _node(DraGpus("h", count=2, dynamic_mig=True)).node.devices}
    big, small, other = (
        devices["gpu-0-mig-3g40gb-9-4"],
        devices["gpu-0-mig-1g10gb-19-5"],
        devices["gpu-1-mig-3g40gb-9-4"],
    )
    assert (big.counter_set, big.memory_slices) == ("gpu-0-counter-set", frozenset({4, 5, 6, 7}))
    assert devices["gpu-0"].memory_slices == frozenset(range(8))  # the whole GPU takes every slice
    assert big.overlaps(small) and big.overlaps(devices["gpu-0"]) and not big.overlaps(other)
    assert not small.overlaps(devices["gpu-0-mig-1g10gb-19-6"])
    static = _node(DraGpus("s", count=1, mig=[list(LAYOUT)])).node.devices
    assert all(d.counter_set == "" and not d.overlaps(d) for d in static)
