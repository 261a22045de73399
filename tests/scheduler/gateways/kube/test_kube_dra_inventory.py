"""A DRA cluster's inventory over HTTP: the test cluster serves resource.k8s.io/v1 ResourceSlices and DeviceClasses,
its NVIDIA and EFA DRA drivers publish them, and the gateway (the unmodified official client) observes the nodes."""

from __future__ import annotations

import json
import logging

import pytest
from kubernetes.client.exceptions import ApiException

from scheduler.errors import GatewayError
from scheduler.gateways.kube.gateway import KubeGateway
from scheduler.gateways.protocol import DeviceApi
from tests.scheduler.kube_emulator import H100_ONE_LEAF, RESOURCE_SLICES, cluster_fixture
from tests.scheduler.kube_harness.dra_driver import A100, DraGpus, pool_slices

cluster = pytest.fixture(cluster_fixture)
NOW = 1_800_000_000.0


def _gateway(cluster, *, dra: bool = True) -> KubeGateway:
    return KubeGateway(
        cluster.new_api_client(), consistent_reads=True, clock=lambda: NOW, request_timeout_s=2.0, dra=dra
    )


@pytest.fixture
def gateway(cluster):
    found = _gateway(cluster)
    yield found
    found.close()


def _nodes(gateway: KubeGateway) -> dict:
    return {node.name: node for node in gateway.observe().nodes}


def test_a_dra_node_with_eight_h100s_is_eight_gpus(cluster, gateway) -> None:
    cluster.add_dra_node("dra-h100", {"topology.k8s.aws/network-node-layer-3": "nn-leaf"})
    (node,) = _nodes(gateway).values()
    assert (node.name, node.gpu_model, node.gpu_count, node.device_api) == (
        "dra-h100",
        "H100-SXM5-80GB",
        8,
        DeviceApi.DRA,
    )
    assert node.schedulable and node.mig == ((),) * 8 and node.leaf == "nn-leaf"
    assert [d.name for d in gateway.dra_nodes()["dra-h100"].gpus()] == [f"gpu-{i}" for i in range(8)]


def test_a_dra_a100_with_mig_devices_is_observed_with_its_layout(cluster, gateway) -> None:
    cluster.add_dra_node("dra-a100", board=A100, gpus=2, mig=[[("1g.10gb", 0), ("1g.10gb", 1), ("3g.40gb", 4)], []])
    (node,) = _nodes(gateway).values()
    assert (node.gpu_model, node.gpu_count) == ("A100-SXM4-80GB", 2)
    assert node.mig == ((("1g.10gb", 0), ("1g.10gb", 1), ("3g.40gb", 4)), ())
    migs = gateway.dra_nodes()["dra-a100"].migs()
    assert sorted(d.name for d in migs) == ["gpu-0-mig-1g10gb-19-0", "gpu-0-mig-1g10gb-19-1", "gpu-0-mig-3g40gb-9-4"]


def test_a_node_with_efa_through_dra_is_an_efa_node_with_its_interfaces(cluster, gateway) -> None:
    cluster.add_dra_node("dra-p5", efa=32, ena=True)  # an unfiltered driver also publishes the ENA interface
    (node,) = _nodes(gateway).values()
    assert (node.fabric, node.fabric_devices) == ("efa", 32)
    assert len(gateway.dra_nodes()["dra-p5"].fabrics()) == 32


def test_a_mixed_cluster_counts_each_node_once_through_its_own_device_api(cluster, gateway) -> None:
    cluster.add_node(
        "plugin-h100", H100_ONE_LEAF, capacity={"nvidia.com/gpu": "8"}, allocatable={"nvidia.com/gpu": "8"}
    )
    cluster.add_dra_node("dra-h100", {**H100_ONE_LEAF, "nvidia.com/gpu.count": "4"})  # GFD's labels do not count
    cluster.add_node("cpu-only", {})
    nodes = _nodes(gateway)
    assert sorted(nodes) == ["dra-h100", "plugin-h100"]
    assert (nodes["plugin-h100"].gpu_count, nodes["plugin-h100"].device_api) == (8, DeviceApi.DEVICE_PLUGIN)
    assert (nodes["dra-h100"].gpu_count, nodes["dra-h100"].device_api) == (8, DeviceApi.DRA)
    assert sum(n.gpu_count for n in nodes.values()) == 16
    assert list(gateway.dra_nodes()) == ["dra-h100"]


def test_an_incomplete_pool_is_ignored_until_the_driver_has_published_it_all(cluster, gateway, caplog) -> None:
    cluster.add_node("dra-dyn", {})
    gpus = DraGpus("dra-dyn", dynamic_mig=True)
    cluster.nvidia_dra.publish(gpus, slices=3)  # 3 of the pool's 9 slices (counters, then one per GPU)
    with caplog.at_level(logging.WARNING, logger="scheduler.gateways.kube.nodes"):
        assert _nodes(gateway) == {}
    assert "pool gpu.nvidia.com/dra-dyn is incomplete: 3 of its 9 ResourceSlices of generation 1" in caplog.text
    assert gateway.dra_nodes() == {}
    cluster.nvidia_dra.publish(gpus)  # the controller finishes: generation 2, every slice
    node = _nodes(gateway)["dra-dyn"]
    assert (node.gpu_count, node.schedulable, node.mig) == (8, True, ((),) * 8)
    assert gateway.dra_nodes()["dra-dyn"].partitions()


def test_a_republished_pool_is_read_at_its_new_generation(cluster, gateway) -> None:
    gpus = cluster.add_dra_node("dra-a100", board=A100, gpus=2)
    assert _nodes(gateway)["dra-a100"].mig == ((), ())
    gpus.mig = [[("7g.80gb", 0)], [("3g.40gb", 0), ("3g.40gb", 4)]]
    cluster.nvidia_dra.publish(gpus)
    assert _nodes(gateway)["dra-a100"].mig == ((("7g.80gb", 0),), (("3g.40gb", 0), ("3g.40gb", 4)))
    assert {s["spec"]["pool"]["generation"] for s in cluster.resource_slices()} == {2}
    # The driver restarted with dynamic MIG (the counters' slice comes first); MIG stays on, so the A100 publishes its
    # partitions and not itself (an A100 cannot turn MIG off without a reset: nvlib.go isDynamicMIGCapable): its GPUs
    # are MIG-enabled, each read as the one instance spanning it until a layout is kept, and never turn whole.
    gpus.dynamic_mig = True
    cluster.nvidia_dra.publish(gpus)
    node = _nodes(gateway)["dra-a100"]
    assert node.mig == ((("7g.80gb", 0),),) * 2 and gateway.dra_nodes()["dra-a100"].partitions()
    assert node.reconfiguration == "dynamic-fixed-mode"
    assert len(cluster.resource_slices()) == 3


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda s: s["spec"].update(allNodes=True),
            'spec: Invalid value: "{`nodeName`, `allNodes`}": exactly one of `nodeName`, `nodeSelector`, '
            "`allNodes`, `perDeviceNodeSelection` is required, but multiple fields are set",
        ),
        (lambda s: s["spec"].pop("nodeName"), "spec: Required value: exactly one of `nodeName`"),
        (
            lambda s: s["spec"]["devices"].extend(s["spec"]["devices"][:1]),
            'spec.devices[8].name: Duplicate value: "gpu-0"',
        ),
        (
            lambda s: s["spec"].update(devices=[{"name": f"gpu-{i}"} for i in range(129)]),
            "spec.devices: Too many: 129: must have at most 128 items",
        ),
        (
            lambda s: s["spec"]["pool"].update(resourceSliceCount=0),
            "spec.pool.resourceSliceCount: Invalid value: 0: must be greater than zero",
        ),
    ],
)
def test_the_api_server_refuses_a_malformed_slice(cluster, change, message) -> None:
    (body,) = pool_slices(DraGpus("dra-h100"))
    change(body)
    with pytest.raises(ApiException) as refused:
        cluster.resource.create_resource_slice(body)
    assert refused.value.status == 422 and message in json.loads(refused.value.body)["message"]
    assert cluster.resource_slices() == []


def test_the_api_server_refuses_more_than_64_devices_that_consume_counters(cluster) -> None:
    body = pool_slices(DraGpus("dra-h100", count=1, dynamic_mig=True))[1]
    body["spec"]["devices"] = [{**body["spec"]["devices"][1], "name": f"p-{i}"} for i in range(65)]
    with pytest.raises(ApiException, match="must have at most 64 items"):
        cluster.resource.create_resource_slice(body)


def test_a_malformed_slice_that_got_in_is_logged_and_never_breaks_observe(cluster, gateway, caplog) -> None:
    cluster.add_dra_node("dra-h100")
    cluster.add_node("dra-broken", {})
    (broken,) = pool_slices(DraGpus("dra-broken"))
    broken["spec"]["allNodes"] = True  # written past the API server (an older server, a bug): read defensively
    cluster.seed(RESOURCE_SLICES, [broken])
    with caplog.at_level(logging.WARNING, logger="scheduler.gateways.kube.gateway"):
        assert sorted(_nodes(gateway)) == ["dra-h100"]
    assert (
        "DRA: ResourceSlice dra-broken-gpu.nvidia.com-0 (gpu.nvidia.com) sets nodeName, allNodes of nodeName, "
        "nodeSelector, allNodes and perDeviceNodeSelection; exactly one is required" in caplog.text
    )


def test_the_slices_of_a_deleted_node_are_no_inventory(cluster, gateway) -> None:
    cluster.add_dra_node("dra-h100", efa=4)
    assert list(_nodes(gateway)) == ["dra-h100"]
    cluster.delete_node("dra-h100")  # its slices stay until the garbage collector follows their owner
    assert _nodes(gateway) == {} and gateway.dra_nodes() == {}
    assert len(cluster.resource_slices()) == 2


def test_the_inventory_memo_is_a_speed_up_not_a_different_answer(cluster) -> None:
    gpus = cluster.add_dra_node("dra-a100", board=A100, gpus=2, efa=4)
    cluster.add_dra_node("dra-h100", dynamic_mig=True)
    memoised, plain = (
        _gateway(cluster),
        KubeGateway(cluster.new_api_client(), consistent_reads=True, clock=lambda: NOW, dra=True, dra_memo=False),
    )
    try:
        for _ in range(2):
            assert memoised.observe() == plain.observe() and memoised.dra_nodes() == plain.dra_nodes()
            gpus.mig = [[("7g.80gb", 0)], []]
            cluster.nvidia_dra.publish(gpus)
        assert memoised._dra_memo is not None and memoised._dra_memo.hits >= 1
    finally:
        memoised.close()
        plain.close()


def test_a_gateway_built_to_apply_reads_the_dra_nodes_without_observing(cluster) -> None:
    cluster.add_dra_node("dra-h100", efa=4)
    gateway = _gateway(cluster)
    try:
        found = gateway.dra_nodes()["dra-h100"]
        assert (len(found.gpus()), len(found.fabrics())) == (8, 4)
    finally:
        gateway.close()


def test_without_kube_dra_no_slice_is_read_and_a_dra_node_has_no_gpus(cluster) -> None:
    cluster.add_dra_node("dra-h100")
    gateway = _gateway(cluster, dra=False)
    try:
        assert _nodes(gateway) == {} and gateway.dra_nodes() == {} and gateway.dra_device_classes() == frozenset()
        assert cluster.requests("GET", path="resourceslices") == []
    finally:
        gateway.close()


def test_a_cluster_without_the_dra_api_is_a_deployment_error_that_says_so(cluster) -> None:
    cluster.add_dra_node("dra-h100")
    cluster.fail("GET", r"/apis/resource.k8s.io/v1/resourceslices$", 404, times=1000)  # Kubernetes 1.33
    gateway = KubeGateway(cluster.new_api_client(), clock=lambda: NOW, dra=True, sleep=lambda _s: None)
    try:
        with pytest.raises(GatewayError, match=r"does not serve resource\.k8s\.io/v1 ResourceSlices"):
            gateway.observe()
    finally:
        gateway.close()


def test_the_device_classes_the_drivers_install_are_read(cluster, gateway) -> None:
    cluster.add_device_classes()
    assert gateway.dra_device_classes() == {"gpu.nvidia.com", "mig.nvidia.com", "efa.networking.k8s.aws"}


def test_slices_are_watched_not_listed_every_cycle(cluster) -> None:
    cluster.add_dra_node("dra-h100")
    gateway = KubeGateway(cluster.new_api_client(), consistent_reads=False, clock=lambda: NOW, dra=True)
    try:
        gateway.observe()
        cluster.clear_log()
        for _ in range(3):
            assert gateway.observe().nodes[0].gpu_count == 8
        assert [p for m, p in cluster.requests("GET", "resourceslices")] == []
    finally:
        gateway.close()
