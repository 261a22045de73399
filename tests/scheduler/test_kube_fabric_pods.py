"""A multi-node gang's fabric on Kubernetes, through the official client against kmock's emulator: what the
gateway observes on the nodes and what it writes into the gang's pods."""

from __future__ import annotations

import json
from typing import Any

import pytest

from scheduler.errors import GatewayConflict
from scheduler.gateways.kube.fabrics import EFA_ENV, EFA_RESOURCE, FabricSettings
from scheduler.gateways.kube.gateway import KubeGateway
from scheduler.gateways.protocol import BindRequest, Device, ReplicaPlacement
from tests.scheduler.kube_emulator import H100_ONE_LEAF, cluster_fixture

cluster = pytest.fixture(cluster_fixture)

RDMA = "rdma/ib_pool"
FABRICS = FabricSettings(
    rdma_resource=RDMA,
    placement_group_label="microcosm.example/placement-group",
    nccl_ib_hca="mlx5_0,mlx5_1",
    tcpx_daemon_image="registry.example/tcpx-rxdm:2",
    tcpxo_daemon_image="registry.example/tcpxo-rxdm:1",
)
EFA_NODE = {"nvidia.com/gpu": "8", EFA_RESOURCE: "32"}


@pytest.fixture
def gateway(cluster) -> KubeGateway:
    gateway = KubeGateway(
        cluster.new_api_client(),
        namespace_create=True,
        clock=lambda: 1_800_000_000.0,
        sleep=lambda s: None,
        fabric=FABRICS,
    )
    gateway.namespace_ensure(namespace="team-nlp", team="nlp")
    return gateway


def _request(*placements: ReplicaPlacement) -> BindRequest:
    return BindRequest(job="42", namespace="team-nlp", name="llama", placements=placements, image="ghcr.io/acme/t:1")


def _gang(*nodes: str, gpus: int = 8) -> BindRequest:
    """One replica per entry of ``nodes``; replicas sharing a node take consecutive GPUs."""
    placements, taken = [], dict.fromkeys(nodes, 0)
    for replica, node in enumerate(nodes):
        placements.append(ReplicaPlacement(replica, node, tuple(Device(taken[node] + g) for g in range(gpus))))
        taken[node] += gpus
    return _request(*placements)


def _pods(cluster) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in cluster.pods("team-nlp")}


def _devices(limits: dict[str, str]) -> dict[str, str]:
    """The extended resources of a container (its cpu and memory: tests/scheduler/test_kube_pod_resources.py)."""
    return {k: v for k, v in limits.items() if k not in ("cpu", "memory")}


def _env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}


def test_the_gateway_observes_each_node_fabric_and_placement_group(cluster, gateway) -> None:
    cluster.add_node("p5-1", {**H100_ONE_LEAF, "microcosm.example/placement-group": "pg-a"}, allocatable=EFA_NODE)
    cluster.add_node("ib-1", H100_ONE_LEAF, allocatable={"nvidia.com/gpu": "8", RDMA: "63"})
    cluster.add_node("a3-1", {**H100_ONE_LEAF, "node.kubernetes.io/instance-type": "a3-megagpu-8g"})
    cluster.add_node("plain-1", H100_ONE_LEAF, allocatable={"nvidia.com/gpu": "8"})

    nodes = {n.name: (n.fabric, n.fabric_devices, n.placement_group) for n in gateway.observe().nodes}

    assert nodes == {
        "p5-1": ("efa", 32, "pg-a"),
        "ib-1": ("infiniband", 63, ""),
        "a3-1": ("gpudirect-tcpxo", 8, ""),
        "plain-1": ("tcp", 0, ""),
    }


def test_a_2x8_gang_on_efa_nodes_requests_every_efa_device_and_gets_the_env(cluster, gateway) -> None:
    cluster.add_node("p5-1", H100_ONE_LEAF, allocatable=EFA_NODE)
    cluster.add_node("p5-2", H100_ONE_LEAF, allocatable=EFA_NODE)

    gateway.job_bind(request=_gang("p5-1", "p5-2"))

    pods = _pods(cluster)
    assert sorted(pods) == ["mc-42-0", "mc-42-1"]
    for pod in pods.values():
        resources = pod["spec"]["containers"][0]["resources"]
        assert resources["limits"] == resources["requests"]
        assert _devices(resources["limits"]) == {"nvidia.com/gpu": "8", EFA_RESOURCE: "32"}
        assert {name: _env(pod).get(name) for name, _ in EFA_ENV} == dict(EFA_ENV)


def test_efa_devices_another_pod_holds_are_counted(cluster, gateway) -> None:
    cluster.add_node("p5-1", H100_ONE_LEAF, allocatable=EFA_NODE)
    cluster.add_node("p5-2", H100_ONE_LEAF, allocatable=EFA_NODE)
    cluster.add_pod("default", "efa-user", node="p5-2", resources={EFA_RESOURCE: "16"})

    with pytest.raises(GatewayConflict, match=r"offers 32 vpc\.amazonaws\.com/efa, 16 in use"):
        gateway.job_bind(request=_gang("p5-1", "p5-2"))
    assert cluster.pods("team-nlp") == []


def test_a_gang_on_nodes_without_a_fabric_gets_none_of_the_fabric_parts(cluster, gateway) -> None:
    cluster.add_node("gpu-1", H100_ONE_LEAF, allocatable={"nvidia.com/gpu": "8"})
    cluster.add_node("gpu-2", H100_ONE_LEAF, allocatable={"nvidia.com/gpu": "8"})

    gateway.job_bind(request=_gang("gpu-1", "gpu-2"))

    for pod in _pods(cluster).values():
        _assert_no_fabric(pod)


def test_a_single_node_job_on_an_efa_node_gets_no_fabric_parts(cluster, gateway) -> None:
    cluster.add_node("p5-1", H100_ONE_LEAF, allocatable=EFA_NODE)

    gateway.job_bind(request=_gang("p5-1", "p5-1", gpus=4))  # two replicas, one node: NVLink, not the fabric

    pods = _pods(cluster)
    assert len(pods) == 2
    for pod in pods.values():
        _assert_no_fabric(pod)


def _assert_no_fabric(pod: dict[str, Any]) -> None:
    container = pod["spec"]["containers"][0]
    assert set(_devices(container["resources"]["limits"])) == {"nvidia.com/gpu"}
    assert not {"FI_PROVIDER", "FI_EFA_FORK_SAFE", "NCCL_SOCKET_IFNAME", "NCCL_IB_HCA"} & set(_env(pod))
    assert not container.get("securityContext") and not pod["spec"].get("initContainers")
    assert not any(key.startswith(("networking.gke.io/", "devices.gke.io/")) for key in pod["metadata"]["annotations"])


def test_a_gang_on_gke_a3_mega_gets_the_nics_and_the_sidecar(cluster, gateway) -> None:
    for name in ("a3-1", "a3-2"):
        cluster.add_node(name, {**H100_ONE_LEAF, "node.kubernetes.io/instance-type": "a3-megagpu-8g"})

    gateway.job_bind(request=_gang("a3-1", "a3-2"))

    for pod in _pods(cluster).values():
        annotations = pod["metadata"]["annotations"]
        assert annotations["networking.gke.io/default-interface"] == "eth0"
        interfaces = json.loads(annotations["networking.gke.io/interfaces"])
        assert [i["network"] for i in interfaces] == ["default", *(f"vpc{n}" for n in range(1, 9))]
        (sidecar,) = pod["spec"]["initContainers"]
        assert (sidecar["image"], sidecar["restartPolicy"]) == ("registry.example/tcpxo-rxdm:1", "Always")
        assert "- path: /dev/nvidia7" in annotations[f"devices.gke.io/container.{sidecar['name']}"]
        assert _devices(pod["spec"]["containers"][0]["resources"]["limits"]) == {"nvidia.com/gpu": "8"}


def test_a_gang_on_gke_a3_high_without_the_daemon_image_is_refused_naming_the_setting(cluster) -> None:
    gateway = KubeGateway(
        cluster.new_api_client(), namespace_create=True, clock=lambda: 1_800_000_000.0, sleep=lambda s: None
    )
    gateway.namespace_ensure(namespace="team-nlp", team="nlp")
    for name in ("a3-1", "a3-2"):
        cluster.add_node(name, {**H100_ONE_LEAF, "node.kubernetes.io/instance-type": "a3-highgpu-8g"})

    with pytest.raises(GatewayConflict, match="KUBE_TCPX_DAEMON_IMAGE is not set"):
        gateway.job_bind(request=_gang("a3-1", "a3-2"))
    assert cluster.pods("team-nlp") == []


def test_a_gang_on_infiniband_nodes_gets_ipc_lock_and_the_hca(cluster, gateway) -> None:
    for name in ("ib-1", "ib-2"):
        cluster.add_node(name, H100_ONE_LEAF, allocatable={"nvidia.com/gpu": "8", RDMA: "63"})

    gateway.job_bind(request=_gang("ib-1", "ib-2"))

    for pod in _pods(cluster).values():
        container = pod["spec"]["containers"][0]
        assert container["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
        assert _devices(container["resources"]["limits"]) == {"nvidia.com/gpu": "8", RDMA: "63"}
        assert _env(pod)["NCCL_IB_HCA"] == "mlx5_0,mlx5_1"


def test_a_gang_over_nodes_of_different_fabrics_is_refused_before_anything_is_created(cluster, gateway) -> None:
    cluster.add_node("p5-1", H100_ONE_LEAF, allocatable=EFA_NODE)
    cluster.add_node("gpu-2", H100_ONE_LEAF, allocatable={"nvidia.com/gpu": "8"})

    with pytest.raises(GatewayConflict, match="different fabrics"):
        gateway.job_bind(request=_gang("p5-1", "gpu-2"))
    assert cluster.requests("POST", "/pods") == []
