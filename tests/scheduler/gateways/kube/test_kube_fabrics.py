"""A node's fabric from its raw API object, and what a multi-node job's pod gets for it (pure, no API)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from scheduler.core.model.vocabulary import Fabric
from scheduler.errors import GatewayConflict
from scheduler.gateways.kube.fabrics import (
    EFA_ENV,
    EFA_RESOURCE,
    FabricSettings,
    NodeFabric,
    fabric_apply,
    fabric_requests,
    fabric_share,
    gang_fabric,
    node_fabric,
    replica_fabric,
)
from scheduler.gateways.kube.nodes import node_observation
from scheduler.gateways.kube.pods import pod_manifest
from scheduler.gateways.protocol import BindRequest, Device, NodeObservation, ReplicaPlacement

RDMA = "rdma/rdma_shared_device_a"
SETTINGS = FabricSettings(
    rdma_resource=RDMA,
    placement_group_label="microcosm.example/placement-group",
    nccl_ib_hca="mlx5_0,mlx5_1",
    tcpx_daemon_image="registry.example/tcpx-rxdm:1",
    tcpxo_daemon_image="registry.example/tcpxo-rxdm:1",
)
H100_LABELS = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"}


def _node(labels: dict[str, str] | None = None, allocatable: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "n", "labels": {**H100_LABELS, **(labels or {})}},
        "status": {"allocatable": allocatable or {}, "conditions": [{"type": "Ready", "status": "True"}]},
    }


@pytest.mark.parametrize(
    ("labels", "allocatable", "expected"),
    [
        ({}, {EFA_RESOURCE: "32"}, NodeFabric(Fabric.EFA, 32)),
        ({}, {EFA_RESOURCE: "4", RDMA: "63"}, NodeFabric(Fabric.EFA, 4)),  # what a pod can get wins
        ({}, {RDMA: "63"}, NodeFabric(Fabric.INFINIBAND, 63)),
        ({"node.kubernetes.io/instance-type": "a3-highgpu-8g"}, {}, NodeFabric(Fabric.TCPX, 4)),
        ({"node.kubernetes.io/instance-type": "a3-megagpu-8g"}, {}, NodeFabric(Fabric.TCPXO, 8)),
        ({"node.kubernetes.io/instance-type": "p5.48xlarge"}, {}, NodeFabric(Fabric.TCP, 0)),
        ({}, {}, NodeFabric(Fabric.TCP, 0)),
        ({}, {EFA_RESOURCE: "0"}, NodeFabric(Fabric.TCP, 0)),
        ({}, {EFA_RESOURCE: "lots", RDMA: "-3"}, NodeFabric(Fabric.TCP, 0)),  # damaged: no fabric
        ({}, {EFA_RESOURCE: None}, NodeFabric(Fabric.TCP, 0)),
    ],
)
def test_a_node_fabric_comes_from_its_devices_then_its_machine_type(labels, allocatable, expected) -> None:
    assert node_fabric(_node(labels, allocatable), SETTINGS) == expected


def test_the_rdma_resource_is_read_only_when_a_setting_names_it() -> None:
    assert node_fabric(_node(allocatable={RDMA: "63"})) == NodeFabric(Fabric.TCP, 0)
    assert node_fabric(_node(allocatable={RDMA: "63"}), FabricSettings(rdma_resource="rdma/other")).fabric == "tcp"


def test_the_placement_group_is_the_label_the_settings_name() -> None:
    labelled = _node({"microcosm.example/placement-group": "pg-7"}, {EFA_RESOURCE: "32"})
    assert node_fabric(labelled, SETTINGS).placement_group == "pg-7"
    assert node_fabric(labelled).placement_group == ""  # no label named: unknown
    assert node_fabric(_node(), SETTINGS).placement_group == ""  # named but absent


def test_node_observations_carry_the_fabric() -> None:
    raw = _node({"microcosm.example/placement-group": "pg-7"}, {EFA_RESOURCE: "32", "nvidia.com/gpu": "8"})
    seen = node_observation(raw, now=0.0, topology_labels=(), mig_config_timeout_s=900, fabric_settings=SETTINGS)
    assert seen is not None
    assert (seen.fabric, seen.fabric_devices, seen.placement_group) == ("efa", 32, "pg-7")


def _observed(name: str, fabric: Fabric, devices: int, gpus: int = 8) -> NodeObservation:
    return NodeObservation(
        name=name,
        gpu_model="H100-SXM5-80GB",
        gpu_count=gpus,
        interconnect="nvswitch",
        tier="on-demand",
        fabric=str(fabric),
        fabric_devices=devices,
    )


def _request(*placements: ReplicaPlacement) -> BindRequest:
    return BindRequest(job="42", namespace="team-nlp", name="llama", placements=placements, env={"EPOCHS": "3"})


def _whole(replica: int, node: str, gpus: int = 8) -> ReplicaPlacement:
    return ReplicaPlacement(replica, node, tuple(Device(g) for g in range(gpus)))


def test_a_whole_node_replica_takes_every_device_and_a_partial_one_its_share_at_least_one() -> None:
    node = _observed("a", Fabric.EFA, 32)
    assert fabric_share(_whole(0, "a"), node) == 32
    assert fabric_share(ReplicaPlacement(0, "a", (Device(0), Device(1))), node) == 32 * 2 // 8
    assert fabric_share(ReplicaPlacement(0, "a", (Device(0),)), _observed("a", Fabric.EFA, 4)) == 1  # 4/8 → 1
    mig = ReplicaPlacement(0, "a", (Device(3, "3g.40gb", 0), Device(3, "3g.40gb", 4)))
    assert fabric_share(mig, node) == 32 // 8  # one GPU held, however it is sliced


def test_single_node_jobs_and_nodes_without_a_fabric_get_nothing() -> None:
    efa = _observed("a", Fabric.EFA, 32)
    single = _request(ReplicaPlacement(0, "a", (Device(0),)), ReplicaPlacement(1, "a", (Device(1),)))
    assert replica_fabric(single, single.placements[0], efa, SETTINGS) is None
    gang = _request(_whole(0, "a"), _whole(1, "b"))
    assert replica_fabric(gang, gang.placements[0], _observed("a", Fabric.TCP, 0), SETTINGS) is None


def test_efa_replicas_request_the_devices_and_get_the_provider_env() -> None:
    gang = _request(_whole(0, "a"), _whole(1, "b"))
    fabric = replica_fabric(gang, gang.placements[1], _observed("b", Fabric.EFA, 32), SETTINGS)
    pod = pod_manifest(gang, gang.placements[1], team="nlp", image="img", grace_s=30, fabric=fabric)
    container = pod["spec"]["containers"][0]
    # AWS's EFA manifests (EKS user guide node-efa; aws-samples/aws-efa-eks nccl-tests): huge pages with the devices.
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "8", EFA_RESOURCE: "32", "hugepages-2Mi": "5120Mi"}
    assert container["resources"]["requests"] == {**container["resources"]["limits"], "memory": "8000Mi"}
    env = {e["name"]: e["value"] for e in container["env"]}
    assert {name: env[name] for name, _ in EFA_ENV} == dict(EFA_ENV)
    assert "securityContext" not in container and "initContainers" not in pod["spec"]
    assert fabric_requests(pod, [EFA_RESOURCE]) == {EFA_RESOURCE: 32}


def test_a_memory_request_or_limit_the_pod_has_is_kept_beside_the_huge_pages() -> None:
    gang = _request(_whole(0, "a"), _whole(1, "b"))
    fabric = replica_fabric(gang, gang.placements[0], _observed("a", Fabric.EFA, 32), SETTINGS)
    for kind in ("requests", "limits"):
        pod = {"metadata": {}, "spec": {"containers": [{"name": "main", "resources": {kind: {"memory": "900Gi"}}}]}}
        resources = fabric_apply(pod, fabric)["spec"]["containers"][0]["resources"]
        assert resources[kind]["memory"] == "900Gi"
        assert "memory" not in resources["limits" if kind == "requests" else "requests"]
        assert resources["limits"]["hugepages-2Mi"] == resources["requests"]["hugepages-2Mi"] == "5120Mi"


def test_the_job_env_wins_over_the_fabric_defaults() -> None:
    gang = _request(_whole(0, "a"), _whole(1, "b"))
    gang = dataclasses.replace(gang, env={"NCCL_SOCKET_IFNAME": "eth0"})
    fabric = replica_fabric(gang, gang.placements[0], _observed("a", Fabric.EFA, 32), SETTINGS)
    pod = pod_manifest(gang, gang.placements[0], team="nlp", image="img", grace_s=30, fabric=fabric)
    names = [e["name"] for e in pod["spec"]["containers"][0]["env"]]
    assert names.count("NCCL_SOCKET_IFNAME") == 1
    assert {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}["NCCL_SOCKET_IFNAME"] == "eth0"


def test_infiniband_replicas_get_ipc_lock_and_the_hca_of_the_settings() -> None:
    gang = _request(_whole(0, "a"), _whole(1, "b"))
    node = _observed("a", Fabric.INFINIBAND, 63)
    fabric = replica_fabric(gang, gang.placements[0], node, SETTINGS)
    pod = pod_manifest(gang, gang.placements[0], team="nlp", image="img", grace_s=30, fabric=fabric)
    container = pod["spec"]["containers"][0]
    assert container["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
    assert container["resources"]["limits"][RDMA] == "63"
    assert {e["name"]: e["value"] for e in container["env"]}["NCCL_IB_HCA"] == "mlx5_0,mlx5_1"
    unset = replica_fabric(gang, gang.placements[0], node, FabricSettings(rdma_resource=RDMA))
    assert unset is not None and dict(unset.env) == {}  # no HCA set: NCCL picks them itself


@pytest.mark.parametrize(
    ("fabric", "nics", "daemon_devices"),
    [(Fabric.TCPX, 4, ["/dev/nvidiactl", "/dev/nvidia-uvm"]), (Fabric.TCPXO, 8, ["/dev/dmabuf_import_helper"])],
)
def test_gke_a3_replicas_get_the_nics_and_the_receive_datapath_sidecar(fabric, nics, daemon_devices) -> None:
    networks = tuple(f"gpu-net-{n}" for n in range(1, 9))
    settings = FabricSettings(
        tcpx_daemon_image="registry.example/tcpx:2",
        tcpxo_daemon_image="registry.example/tcpxo:1",
        gke_networks=networks,
    )
    gang = _request(_whole(0, "a"), _whole(1, "b"))
    node = _observed("a", fabric, nics)
    pod = pod_manifest(
        gang,
        gang.placements[0],
        team="nlp",
        image="img",
        grace_s=30,
        fabric=replica_fabric(gang, gang.placements[0], node, settings),
    )
    annotations = pod["metadata"]["annotations"]
    assert annotations["networking.gke.io/default-interface"] == "eth0"
    assert json.loads(annotations["networking.gke.io/interfaces"]) == [
        {"interfaceName": "eth0", "network": "default"},
        *({"interfaceName": f"eth{n}", "network": f"gpu-net-{n}"} for n in range(1, nics + 1)),
    ]
    (sidecar,) = pod["spec"]["initContainers"]
    assert sidecar["restartPolicy"] == "Always"  # a native sidecar: the pod ends with the job
    assert sidecar["image"] == (settings.tcpx_daemon_image if fabric == Fabric.TCPX else settings.tcpxo_daemon_image)
    assert "NET_ADMIN" in sidecar["securityContext"]["capabilities"]["add"]
    listed = annotations[f"devices.gke.io/container.{sidecar['name']}"].splitlines()
    assert listed[:8] == [f"- path: /dev/nvidia{g}" for g in range(8)]
    assert all(f"- path: {device}" in listed for device in daemon_devices)
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    libraries = next(
        v for v in volumes.values() if v.get("hostPath", {}).get("path") == "/home/kubernetes/bin/nvidia/lib64"
    )
    main = pod["spec"]["containers"][0]
    assert {"name": libraries["name"], "mountPath": "/usr/local/nvidia/lib64"} in main["volumeMounts"]
    assert {"name": libraries["name"], "mountPath": "/usr/local/nvidia/lib64"} in sidecar["volumeMounts"]
    assert {e["name"]: e["value"] for e in main["env"]}["LD_LIBRARY_PATH"] == "/usr/local/nvidia/lib64"
    assert main["resources"]["limits"] == {"nvidia.com/gpu": "8"}  # the NICs come by annotation, not resource
    expected = ["IPC_LOCK"] if fabric == Fabric.TCPX else []
    assert main.get("securityContext", {}).get("capabilities", {}).get("add", []) == expected


@pytest.mark.parametrize(
    ("fabric", "setting"), [(Fabric.TCPX, "KUBE_TCPX_DAEMON_IMAGE"), (Fabric.TCPXO, "KUBE_TCPXO_DAEMON_IMAGE")]
)
def test_gke_a3_without_a_daemon_image_is_refused_naming_the_setting(fabric, setting) -> None:
    gang = _request(_whole(0, "a"), _whole(1, "b"))
    with pytest.raises(GatewayConflict, match=setting):
        replica_fabric(gang, gang.placements[0], _observed("a", fabric, 8), FabricSettings())


def test_too_few_gke_networks_for_the_nics_is_refused() -> None:
    gang = _request(_whole(0, "a"), _whole(1, "b"))
    settings = FabricSettings(tcpxo_daemon_image="registry.example/tcpxo:1", gke_networks=("vpc1", "vpc2"))
    with pytest.raises(GatewayConflict, match="KUBE_GKE_NETWORKS names 2 networks"):
        replica_fabric(gang, gang.placements[0], _observed("a", Fabric.TCPXO, 8), settings)


def test_a_gang_over_different_fabrics_is_refused() -> None:
    gang = _request(_whole(0, "a"), _whole(1, "b"))
    same = {"a": _observed("a", Fabric.EFA, 32), "b": _observed("b", Fabric.EFA, 32)}
    assert gang_fabric(gang, same) == Fabric.EFA
    with pytest.raises(GatewayConflict, match="a: efa, b: tcp"):
        gang_fabric(gang, {**same, "b": _observed("b", Fabric.TCP, 0)})


def test_applying_no_fabric_changes_nothing() -> None:
    gang = _request(_whole(0, "a"), _whole(1, "b"))
    plain = pod_manifest(gang, gang.placements[0], team="nlp", image="img", grace_s=30)
    assert fabric_apply(json.loads(json.dumps(plain)), None) == plain
