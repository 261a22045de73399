"""A multi-node gang's fabric on Kubernetes, through the official client against kmock's emulator: what the
gateway observes on the nodes and what it writes into the gang's pods."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from scheduler.errors import GatewayConflict
from scheduler.gateways.kube.fabrics import EFA_ENV, EFA_RESOURCE, FabricSettings
from scheduler.gateways.kube.gateway import KubeGateway
from scheduler.gateways.protocol import BindRequest, Device, ReplicaPlacement
from tests.scheduler.kube_emulator import H100_ONE_LEAF, cluster_fixture
from tests.scheduler.kube_harness.pod_validation import validate_pod_resources


@pytest.fixture
def cluster():
    """The emulator with the API server's huge-page validation (tests/scheduler/kube_harness/pod_validation.py)."""
    for emulator in cluster_fixture():
        emulator.handler.interceptors.append(validate_pod_resources)
        yield emulator


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
    """The extended resources of a container (its cpu and memory:
    tests/scheduler/gateways/kube/test_kube_pod_resources.py)."""
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
        # AWS's EFA pods ask 2 MiB huge pages with the devices (request = limit), and memory with them: the API
        # server refuses huge pages without cpu or memory (fabrics.py). The memory is the pod's own when it asks
        # some, else a request of AWS's 8000Mi.
        devices = {"nvidia.com/gpu": "8", EFA_RESOURCE: "32", "hugepages-2Mi": "5120Mi"}
        assert {name: resources["limits"].get(name) for name in devices} == devices
        assert {name: resources["requests"].get(name) for name in devices} == devices
        assert resources["requests"].get("memory") == resources["limits"].get("memory", "8000Mi")
        assert {name: _env(pod).get(name) for name, _ in EFA_ENV} == dict(EFA_ENV)


def test_the_api_server_refuses_huge_pages_without_cpu_or_memory(cluster, gateway) -> None:
    """The harness's validation is the API server's: huge pages alone are Invalid (pod_validation.py)."""
    pod = {
        "metadata": {"name": "bare"},
        "spec": {"containers": [{"name": "c", "image": "i", "resources": {"limits": {"hugepages-2Mi": "5120Mi"}}}]},
    }
    with pytest.raises(ApiException) as refused:
        cluster.core.create_namespaced_pod("team-nlp", pod)
    assert (
        refused.value.status == 422 and "HugePages require cpu or memory" in json.loads(refused.value.body)["message"]
    )


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


@pytest.mark.parametrize("machine", ["a3-highgpu-8g", "a3-megagpu-8g"])
def test_half_node_replicas_on_gke_a3_are_refused_before_anything_is_created(cluster, gateway, machine) -> None:
    """Google's manifests give one pod all 8 GPUs and NICs of an A3 node beside one receive-datapath daemon
    (container-engine-accelerators gpudirect-tcpx(o)/nccl-test-latest.yaml): two half-node replicas would each
    start a daemon claiming all 8 GPUs and the node's NICs."""
    for name in ("a3-1", "a3-2"):
        cluster.add_node(name, {**H100_ONE_LEAF, "node.kubernetes.io/instance-type": machine})

    with pytest.raises(GatewayConflict, match=r"holds 4 of the 8 GPUs of a3-1.*replicas of a whole node"):
        gateway.job_bind(request=_gang("a3-1", "a3-1", "a3-2", "a3-2", gpus=4))
    assert cluster.requests("POST", "/pods") == []


def test_a_gang_on_gke_a3_high_gets_google_s_nccl_settings_and_one_daemon_per_node(cluster, gateway) -> None:
    for name in ("a3-1", "a3-2"):
        cluster.add_node(name, {**H100_ONE_LEAF, "node.kubernetes.io/instance-type": "a3-highgpu-8g"})

    gateway.job_bind(request=_gang("a3-1", "a3-2"))

    pods = _pods(cluster)
    assert len(pods) == 2
    for pod in pods.values():
        env = _env(pod)
        # gpudirect-tcpx/nccl-config-latest.yaml (run-nccl.sh): data over eth1-4, control over eth0.
        assert env["NCCL_GPUDIRECTTCPX_SOCKET_IFNAME"] == "eth1,eth2,eth3,eth4"
        assert env["NCCL_GPUDIRECTTCPX_CTRL_DEV"] == env["NCCL_SOCKET_IFNAME"] == "eth0"
        assert env["NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX"] == "/run/tcpx"
        assert (env["NCCL_ALGO"], env["NCCL_PROTO"], env["NCCL_CROSS_NIC"]) == ("Ring", "Simple", "0")
        assert env["NCCL_DYNAMIC_CHUNK_SIZE"] == env["NCCL_P2P_NET_CHUNKSIZE"] == "524288"
        assert env["NCCL_GPUDIRECTTCPX_TX_BINDINGS"].startswith("eth1:8-21,112-125;")
        assert env["NCCL_GPUDIRECTTCPX_PROGRAM_FLOW_STEERING_WAIT_MICROS"] == "1000000"
        assert (env["NCCL_NET_GDR_LEVEL"], env["NCCL_P2P_PXN_LEVEL"]) == ("PIX", "0")
        assert len(pod["spec"]["initContainers"]) == 1
    assert len({p["spec"]["nodeName"] for p in pods.values()}) == 2  # one daemon per node


def test_a_gang_on_gke_a3_mega_gets_the_plugin_profile_settings(cluster, gateway) -> None:
    for name in ("a3-1", "a3-2"):
        cluster.add_node(name, {**H100_ONE_LEAF, "node.kubernetes.io/instance-type": "a3-megagpu-8g"})

    gateway.job_bind(request=_gang("a3-1", "a3-2"))

    for pod in _pods(cluster).values():
        env = _env(pod)
        # nccl-env-profile.sh's exports (gpudirect-tcpxo/README.md, NCCL configs), the plugin mounted here.
        assert env["NCCL_LIB_DIR"] == "/usr/local/nvidia/lib64"
        assert env["NCCL_FASTRAK_IFNAME"] == ",".join(f"eth{n}" for n in range(1, 9))
        assert env["NCCL_FASTRAK_CTRL_DEV"] == env["NCCL_SOCKET_IFNAME"] == "eth0"
        assert env["NCCL_PROTO"] == "Simple,LL128" and env["NCCL_NVLSTREE_MAX_CHUNKSIZE"] == "131072"
        assert env["NCCL_TUNER_CONFIG_PATH"] == "/usr/local/nvidia/lib64/a3plus_tuner_config.textproto"
        assert env["NCCL_SHIMNET_GUEST_CONFIG_CHECKER_CONFIG_FILE"].endswith("/a3plus_guest_config.textproto")
        assert (env["NCCL_FASTRAK_USE_LLCM"], env["NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY"]) == (
            "1",
            "/dev/aperture_devices",
        )
        assert env["NCCL_BUFFSIZE"] == "8388608" and env["NCCL_FASTRAK_NUM_FLOWS"] == "2"
    # The profile step Google's README asks of the workload is documented with the variable the pods carry.
    deploy = (Path(__file__).resolve().parents[4] / "docs" / "deploy.md").read_text(encoding="utf-8")
    (command,) = re.findall(r"```json\n\s*(\[\"bash\", \"-c\", \"source .*\])\n\s*```", deploy)
    assert json.loads(command)[2].startswith('source "$NCCL_LIB_DIR/nccl-env-profile.sh" && exec ')


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
