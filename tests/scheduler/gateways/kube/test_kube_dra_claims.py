"""ResourceClaims on Dynamic Resource Allocation nodes, through the official client against the emulator: the API
server's ResourceClaim rules, the kubelet's DRA admission and the resourceclaim controller
(tests/scheduler/kube_harness/resource_claims.py). The DRA nodes' published devices are built here, as the
gateway's reading of ResourceSlices would give them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from scheduler.errors import GatewayConflict, GatewayRetryable
from scheduler.gateways.kube.dra_claims import GPU_CLASS, MIG_CLASS, claim_name, pod_with_claim, replica_requests
from scheduler.gateways.kube.dra_devices import DraDevice, DraDeviceKind, DraNode
from scheduler.gateways.kube.fabrics import EFA_ENV, EFA_RESOURCE
from scheduler.gateways.kube.gateway import KubeGateway
from scheduler.gateways.protocol import BindRequest, Device, ReplicaPlacement
from tests.scheduler.kube_emulator import KUBELET_FINALIZER, MERGE_PATCH, cluster_fixture
from tests.scheduler.kube_harness.resource_claims import ClaimController, DraKubelet

GPU_DRIVER = "gpu.nvidia.com"
EFA_DRIVER = "efa.example.com"  # the EFA DRA driver's name is the test's: the claim takes the device's driver
NS = "team-nlp"
H100 = {
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.memory": "81559",
    "nvidia.com/mig.capable": "true",
    "nvidia.com/mig.strategy": "mixed",
}
MIG_NODE = {
    **H100,
    "nvidia.com/gpu.count": "1",
    "nvidia.com/mig.config": "all-balanced",
    "nvidia.com/mig.config.state": "success",
    "nvidia.com/mig-1g.10gb.count": "2",
    "nvidia.com/mig-2g.20gb.count": "1",
    "nvidia.com/mig-3g.40gb.count": "1",
}


def _gpus(node: str, count: int = 8) -> tuple[DraDevice, ...]:
    return tuple(
        DraDevice(GPU_DRIVER, node, f"gpu-{i}", DraDeviceKind.GPU, gpu_index=i, uuid=f"GPU-{node}-{i}")
        for i in range(count)
    )


def _efa(node: str, count: int = 4) -> tuple[DraDevice, ...]:
    return tuple(DraDevice(EFA_DRIVER, node, f"efa-{i}", DraDeviceKind.FABRIC) for i in range(count))


cluster = pytest.fixture(cluster_fixture)


@pytest.fixture
def dra() -> dict[str, DraNode]:
    return {}


@pytest.fixture
def kubelet(cluster, dra) -> DraKubelet:
    kubelet = DraKubelet(cluster.handler, nodes=dra)
    cluster.handler.bind_hooks.append(kubelet.on_bind)
    return kubelet


def _efa_class(cluster) -> None:
    """The test's EFA driver's DeviceClass (the claims name the driver when no fabric class is set)."""
    expression = f'device.driver == "{EFA_DRIVER}"'
    cluster.resource.create_device_class(
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": EFA_DRIVER},
         "spec": {"selectors": [{"cel": {"expression": expression}}]}}
    )  # fmt: skip


@pytest.fixture
def gateway(cluster, dra, kubelet) -> KubeGateway:
    cluster.add_device_classes()
    _efa_class(cluster)
    gateway = KubeGateway(
        cluster.new_api_client(),
        consistent_reads=True,
        namespace_create=True,
        clock=lambda: 1_800_000_000.0,
        sleep=lambda _s: None,
        request_timeout_s=2.0,
        dra_nodes=lambda: dra,
    )
    gateway.namespace_ensure(namespace=NS, team="nlp")
    return gateway


def _request(job: str, *placements: ReplicaPlacement) -> BindRequest:
    return BindRequest(job=job, namespace=NS, name="llama", placements=placements, image="ghcr.io/acme/t:1")


def _mig_node(cluster, gateway, dra, name: str = "mig-1") -> dict[str, int]:
    """A one-GPU H100 in the balanced layout on a DRA node: its MIG devices published with their placements."""
    cluster.add_node(name, MIG_NODE)
    layout = next(n for n in gateway.observe().nodes if n.name == name).mig[0]
    dra[name] = DraNode(
        name,
        tuple(
            DraDevice(
                GPU_DRIVER,
                name,
                f"gpu-0-mig-{p.replace('.', '')}-{s}",
                DraDeviceKind.MIG,
                0,
                p,
                s,
                uuid=f"MIG-{name}-{p}-{s}",
                parent_uuid=f"GPU-{name}-0",
            )
            for p, s in layout
        ),
    )
    return {p: s for p, s in layout}


def _claim(cluster, name: str) -> dict[str, Any]:
    return next(c for c in cluster.resource_claims(NS) if c["metadata"]["name"] == name)


def _pod(cluster, name: str) -> dict[str, Any]:
    return next(p for p in cluster.pods(NS) if p["metadata"]["name"] == name)


def claim_lists(cluster) -> list[str]:
    """The queries of the LISTs of every namespace's ResourceClaims the gateway made (its cache's LIST, and a bind's
    LIST if it made one); not the cache's WATCH nor the test's consistent-read probe (``limit=1``)."""
    return [
        query
        for method, path, query in list(cluster.handler.log)
        if method == "GET" and path == "/apis/resource.k8s.io/v1/resourceclaims"
        and "watch=true" not in query and query != "limit=1"
    ]  # fmt: skip


def _writes(cluster, name: str) -> list[str]:
    """The order of the writes that concern one replica: its pod, its claim, the claim's status, the Binding."""
    found = []
    for method, path in cluster.requests():
        if method == "POST" and path.endswith("/pods"):
            found.append("create pod")
        elif method == "POST" and path.endswith("/resourceclaims"):
            found.append("create claim")
        elif method == "PUT" and path.endswith(f"/resourceclaims/{name}-devices/status"):
            found.append("allocate+reserve")
        elif method == "POST" and path.endswith(f"/pods/{name}/binding"):
            found.append("bind")
    return found


# -- binding on DRA nodes ----------------------------------------------------------------------------------------


def test_a_mig_inference_replica_gets_its_claim_allocated_and_reserved_before_it_is_bound(
    cluster, gateway, dra, kubelet
) -> None:
    starts = _mig_node(cluster, gateway, dra)
    device = Device(0, "3g.40gb", starts["3g.40gb"])
    cluster.clear_log()

    gateway.job_bind(request=_request("7", ReplicaPlacement(0, "mig-1", (device,))))

    assert _writes(cluster, "mc-7-0") == ["create pod", "create claim", "allocate+reserve", "bind"]
    pod = _pod(cluster, "mc-7-0")
    claim = _claim(cluster, claim_name("7", 0))
    (request,) = claim["spec"]["devices"]["requests"]
    assert request["name"] == "mig-0" and request["exactly"]["deviceClassName"] == MIG_CLASS
    assert request["exactly"]["count"] == 1
    (selector,) = request["exactly"]["selectors"]
    # Pinned by the instance's uuid: the driver publishes no parentIndex since v25.8 (dra_claims.device_selector).
    assert selector["cel"]["expression"] == (
        f'device.attributes["gpu.nvidia.com"].type == "mig" && '
        f'device.attributes["gpu.nvidia.com"].uuid == "MIG-mig-1-3g.40gb-{starts["3g.40gb"]}"'
    )
    published = dra["mig-1"].device_for(device)
    assert published is not None
    assert claim["status"]["allocation"]["devices"]["results"] == [
        {"request": "mig-0", "driver": GPU_DRIVER, "pool": "mig-1", "device": published.name}
    ]
    terms = claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"]
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["mig-1"]}]}]
    assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": "mc-7-0", "uid": pod["metadata"]["uid"]}]
    owner = claim["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "Pod",
        "mc-7-0",
        pod["metadata"]["uid"],
        True,
    )
    main = pod["spec"]["containers"][0]
    assert not any(k.startswith("nvidia.com/") for k in main["resources"]["limits"])
    assert main["resources"]["claims"] == [{"name": "devices"}]
    assert pod["spec"]["resourceClaims"] == [{"name": "devices", "resourceClaimName": "mc-7-0-devices"}]
    assert pod["spec"]["nodeName"] == "mig-1"
    # The kubelet admitted it at the Binding (it would have refused a claim not yet reserved) and it runs.
    assert kubelet.refused == [] and pod["status"]["phase"] == "Running"
    assert kubelet.prepared[(NS, "mc-7-0")] == {(GPU_DRIVER, "mig-1", published.name)}


def test_a_whole_gpu_training_job_gets_one_request_per_gpu_and_runs(cluster, gateway, dra, kubelet) -> None:
    cluster.add_node("dra-a", H100)
    dra["dra-a"] = DraNode("dra-a", _gpus("dra-a"))

    gateway.job_bind(request=_request("42", ReplicaPlacement(0, "dra-a", tuple(Device(i) for i in range(4, 8)))))

    claim = _claim(cluster, "mc-42-0-devices")
    requests = claim["spec"]["devices"]["requests"]
    assert [r["exactly"]["deviceClassName"] for r in requests] == [GPU_CLASS] * 4
    assert requests[1]["exactly"]["selectors"][0]["cel"]["expression"].endswith('.uuid == "GPU-dra-a-5"')
    assert [r["device"] for r in claim["status"]["allocation"]["devices"]["results"]] == [
        f"gpu-{i}" for i in range(4, 8)
    ]
    assert kubelet.refused == [] and _pod(cluster, "mc-42-0")["status"]["phase"] == "Running"


def test_a_two_node_gang_on_efa_dra_nodes_gets_its_efa_devices_through_its_claims(
    cluster, gateway, dra, kubelet
) -> None:
    for name in ("dra-a", "dra-b"):
        cluster.add_node(name, H100)
        dra[name] = DraNode(name, _gpus(name) + _efa(name))
    gang = _request(
        "9", *(ReplicaPlacement(r, n, tuple(Device(i) for i in range(8))) for r, n in enumerate(("dra-a", "dra-b")))
    )

    cluster.clear_log()
    gateway.job_bind(request=gang)

    # Every claim read from the gateway's cache (its first use: one LIST, then a WATCH), then per replica a create, a
    # read and the status update (docs/deploy.md).
    assert len(claim_lists(cluster)) == 1
    claim_calls = [m for m, _p in cluster.requests(path="/namespaces/.*/resourceclaims")]
    assert sorted(claim_calls) == sorted(["POST", "GET", "PUT"] * 2)
    for replica, node in enumerate(("dra-a", "dra-b")):
        claim = _claim(cluster, claim_name("9", replica))
        fabric = claim["spec"]["devices"]["requests"][-1]
        assert (fabric["name"], fabric["exactly"]["deviceClassName"], fabric["exactly"]["count"]) == (
            "fabric",
            EFA_DRIVER,
            4,
        )
        results = claim["status"]["allocation"]["devices"]["results"]
        assert {(r["pool"], r["device"]) for r in results if r["request"] == "fabric"} == {
            (node, f"efa-{i}") for i in range(4)
        }
        pod = _pod(cluster, f"mc-9-{replica}")
        main = pod["spec"]["containers"][0]
        assert EFA_RESOURCE not in main["resources"]["limits"] and "nvidia.com/gpu" not in main["resources"]["limits"]
        assert main["resources"]["limits"]["hugepages-2Mi"]  # EFA's settings stay: only the devices moved
        assert {e["name"]: e["value"] for e in main["env"]}.items() >= dict(EFA_ENV).items()
        assert pod["status"]["phase"] == "Running"
    assert kubelet.refused == []


def test_a_fabric_class_the_cluster_lacks_is_refused_before_anything_is_written(cluster, gateway, dra) -> None:
    for name in ("dra-a", "dra-b"):
        cluster.add_node(name, H100)
        dra[name] = DraNode(name, _gpus(name) + _efa(name))
    gang = _request(
        "9", *(ReplicaPlacement(r, n, tuple(Device(i) for i in range(8))) for r, n in enumerate(("dra-a", "dra-b")))
    )
    gateway.claims.fabric_class = "efa.wrong.example"  # KUBE_DRA_FABRIC_CLASS naming no installed class
    cluster.clear_log()

    with pytest.raises(GatewayConflict, match=r"no DeviceClass efa\.wrong\.example .*KUBE_DRA_FABRIC_CLASS"):
        gateway.job_bind(request=gang)

    assert (
        cluster.resource_claims(NS) == []
        and [p for p in cluster.pods(NS) if p["metadata"]["name"].startswith("mc-")] == []
    )
    # The classes were read again for the class not among those read before; a known class costs no read.
    assert [m for m, _p in cluster.requests(path="deviceclasses")] == ["GET"]
    gateway.claims.fabric_class = ""
    cluster.clear_log()
    gateway.job_bind(request=gang)
    assert cluster.requests(path="deviceclasses") == []


def test_a_claim_changed_between_its_read_and_its_status_update_is_read_again(cluster, gateway, dra, kubelet) -> None:
    """409 on the status update (another writer was first): read again and retry, as client-go's RetryOnConflict."""
    cluster.add_node("dra-a", H100)
    dra["dra-a"] = DraNode("dra-a", _gpus("dra-a"))
    cluster.fail("PUT", r"/resourceclaims/mc-3-0-devices/status$", 409)

    gateway.job_bind(request=_request("3", ReplicaPlacement(0, "dra-a", (Device(2),))))

    assert len(cluster.requests("PUT", r"/mc-3-0-devices/status$")) == 2
    assert _claim(cluster, "mc-3-0-devices")["status"]["reservedFor"] and kubelet.refused == []


def test_a_device_another_claim_holds_is_refused_before_anything_is_written(cluster, gateway, dra) -> None:
    cluster.add_node("dra-a", H100)
    dra["dra-a"] = DraNode("dra-a", _gpus("dra-a"))
    gateway.job_bind(request=_request("1", ReplicaPlacement(0, "dra-a", (Device(0),))))
    # Another owner's claim (say kube-scheduler's, for a pod it placed) holds GPU 1.
    _foreign_claim(
        cluster, "default", "theirs", {"request": "gpu", "driver": GPU_DRIVER, "pool": "dra-a", "device": "gpu-1"}
    )
    cluster.clear_log()

    with pytest.raises(GatewayConflict, match="allocated to another ResourceClaim"):
        gateway.job_bind(request=_request("2", ReplicaPlacement(0, "dra-a", (Device(1),))))
    with pytest.raises(GatewayConflict, match="held by another job"):  # a Microcosm pod's, as on any node
        gateway.job_bind(request=_request("3", ReplicaPlacement(0, "dra-a", (Device(0),))))
    assert cluster.requests("POST") == [] and cluster.requests("PUT") == []


def test_a_partition_whose_memory_slices_another_claim_holds_is_refused_before_anything_is_written(
    cluster, kubelet
) -> None:
    """Dynamic MIG: a foreign claim holds the 3g.40gb partition at slice 4; the engine's 1g.10gb at slice 5 is
    another device but the same GPU's memory slice (KEP-4815 counters), so no allocator could give it."""
    cluster.add_device_classes()
    cluster.add_dra_node("dyn", gpus=1, dynamic_mig=True)
    gateway = KubeGateway(
        cluster.new_api_client(), consistent_reads=True, namespace_create=True, sleep=lambda _s: None, dra=True
    )
    gateway.namespace_ensure(namespace=NS, team="nlp")
    layout = (("3g.40gb", 0), ("1g.10gb", 4), ("1g.10gb", 5), ("1g.10gb", 6))
    gateway.node_reconfigure(node="dyn", layouts=(layout,))
    gateway.observe()
    _foreign_claim(
        cluster,
        "default",
        "theirs",
        {"request": "gpu", "driver": GPU_DRIVER, "pool": "dyn", "device": "gpu-0-mig-3g40gb-9-4"},
    )
    cluster.clear_log()

    with pytest.raises(GatewayConflict, match="gpu-0-mig-1g10gb-19-5 shares memory slices with gpu-0-mig-3g40gb-9-4"):
        gateway.job_bind(request=_request("5", ReplicaPlacement(0, "dyn", (Device(0, "1g.10gb", 5),))))
    assert cluster.requests("POST") == [] and cluster.requests("PUT") == []
    gateway.job_bind(request=_request("6", ReplicaPlacement(0, "dyn", (Device(0, "3g.40gb", 0),))))  # slices 0-3
    assert kubelet.refused == [] and kubelet.created == [("dyn", "mc-6-0", "gpu-0-mig-3g40gb-9-0")]


def test_a_device_the_node_no_longer_publishes_is_refused(cluster, gateway, dra) -> None:
    cluster.add_node("dra-a", H100)
    dra["dra-a"] = DraNode("dra-a", _gpus("dra-a", 4))
    with pytest.raises(GatewayConflict, match="publishes no GPU 6"):
        gateway.job_bind(request=_request("1", ReplicaPlacement(0, "dra-a", (Device(6),))))
    assert cluster.pods(NS) == []


def test_device_plugin_nodes_keep_the_extended_resources_and_make_no_claim(cluster, gateway, dra) -> None:
    cluster.add_node("dra-a", H100)
    dra["dra-a"] = DraNode("dra-a", _gpus("dra-a"))
    cluster.add_node("plugin-a", H100, allocatable={"nvidia.com/gpu": "8"})
    cluster.clear_log()

    gateway.job_bind(request=_request("5", ReplicaPlacement(0, "plugin-a", (Device(0), Device(1)))))

    pod = _pod(cluster, "mc-5-0")
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert "resourceClaims" not in pod["spec"] and "claims" not in pod["spec"]["containers"][0]["resources"]
    assert cluster.requests(path="resourceclaims") == [] and cluster.resource_claims() == []


def test_a_cluster_without_dra_makes_no_claim_call(cluster) -> None:
    gateway = KubeGateway(cluster.new_api_client(), consistent_reads=True, namespace_create=True, sleep=lambda _s: None)
    gateway.namespace_ensure(namespace=NS, team="nlp")
    cluster.add_node("plugin-a", H100, allocatable={"nvidia.com/gpu": "8"})
    gateway.job_bind(request=_request("5", ReplicaPlacement(0, "plugin-a", (Device(0),))))
    gateway.job_evict(job="5", namespace=NS, grace_s=30, reason="completed")
    gateway.maintain()
    assert cluster.requests(path="resourceclaims") == []


# -- undo, eviction, completion ---------------------------------------------------------------------------------


def test_a_failure_mid_bind_leaves_no_claim_and_no_pod(cluster, gateway, dra, kubelet) -> None:
    for name in ("dra-a", "dra-b"):
        cluster.add_node(name, H100)
        dra[name] = DraNode(name, _gpus(name) + _efa(name))
    gang = _request(
        "9", *(ReplicaPlacement(r, n, tuple(Device(i) for i in range(8))) for r, n in enumerate(("dra-a", "dra-b")))
    )
    cluster.fail("POST", r"/pods/mc-9-1/binding$", 500, times=10)  # replica 0 is bound and running by then

    with pytest.raises(GatewayRetryable):
        gateway.job_bind(request=gang)

    assert cluster.pods(NS) == [] and cluster.resource_claims() == []


def test_a_refused_reservation_leaves_no_claim_and_no_pod(cluster, gateway, dra) -> None:
    cluster.add_node("dra-a", H100)
    dra["dra-a"] = DraNode("dra-a", _gpus("dra-a"))
    cluster.fail("PUT", r"/resourceclaims/mc-4-0-devices/status$", 500, times=10)

    with pytest.raises(GatewayRetryable):
        gateway.job_bind(request=_request("4", ReplicaPlacement(0, "dra-a", (Device(0),))))

    assert cluster.pods(NS) == [] and cluster.resource_claims() == []


def test_eviction_deallocates_and_deletes_the_claims(cluster, gateway, dra) -> None:
    starts = _mig_node(cluster, gateway, dra)
    gateway.job_bind(request=_request("7", ReplicaPlacement(0, "mig-1", (Device(0, "1g.10gb", starts["1g.10gb"]),))))
    assert cluster.resource_claims(NS)

    gateway.job_evict(job="7", namespace=NS, grace_s=30, reason="preempted")

    assert cluster.pods(NS) == [] and cluster.resource_claims() == []
    writes = [(m, p.rsplit("/", 2)[-2:]) for m, p in cluster.requests(path="resourceclaims/mc-7-0-devices")]
    # Deallocated (status cleared), the finalizer dropped, then deleted: kube-scheduler's finalizer order.
    assert [m for m, _p in writes][-3:] == ["PUT", "PATCH", "DELETE"]


def test_completion_deallocates_and_the_devices_are_free_again(cluster, gateway, dra) -> None:
    cluster.add_node("dra-a", H100)
    dra["dra-a"] = DraNode("dra-a", _gpus("dra-a"))
    gateway.job_bind(request=_request("1", ReplicaPlacement(0, "dra-a", (Device(0),))))
    cluster.set_pod_phase(NS, "mc-1-0", "Succeeded")

    gateway.job_evict(job="1", namespace=NS, grace_s=30, reason="completed")

    assert cluster.resource_claims() == []
    gateway.job_bind(request=_request("2", ReplicaPlacement(0, "dra-a", (Device(0),))))  # GPU 0 is free
    assert _claim(cluster, "mc-2-0-devices")["status"]["allocation"]


def test_a_terminating_pod_keeps_its_devices_until_it_is_gone(cluster, gateway, dra) -> None:
    cluster.add_node("dra-a", H100)
    dra["dra-a"] = DraNode("dra-a", _gpus("dra-a"))
    gateway.job_bind(request=_request("1", ReplicaPlacement(0, "dra-a", (Device(0),))))
    cluster.core.patch_namespaced_pod(
        "mc-1-0", NS, {"metadata": {"finalizers": [KUBELET_FINALIZER]}}, _content_type=MERGE_PATCH
    )

    gateway.job_evict(job="1", namespace=NS, grace_s=30, reason="preempted")

    claim = _claim(cluster, "mc-1-0-devices")  # the pod's containers may still run: its devices stay allocated
    assert claim["status"]["allocation"] and claim["status"]["reservedFor"]
    gateway.maintain()  # still terminating: the sweep leaves it
    assert _claim(cluster, "mc-1-0-devices")["status"]["reservedFor"]
    cluster.release_pod(NS, "mc-1-0")
    gateway.maintain()
    assert cluster.resource_claims() == []


def test_a_move_s_release_frees_the_old_generation_s_claims_only(cluster, gateway, dra) -> None:
    cluster.add_node("dra-a", H100)
    dra["dra-a"] = DraNode("dra-a", _gpus("dra-a"))
    gateway.job_bind(request=_request("1", ReplicaPlacement(0, "dra-a", (Device(0),))))
    gateway.job_move(request=_request("1", ReplicaPlacement(0, "dra-a", (Device(1),))), generation=1)
    assert {c["metadata"]["name"] for c in cluster.resource_claims(NS)} == {"mc-1-0-devices", "mc-1-g1-0-devices"}

    gateway.job_release(job="1", namespace=NS, generation=1, grace_s=30)

    assert {c["metadata"]["name"] for c in cluster.resource_claims(NS)} == {"mc-1-g1-0-devices"}


# -- the harness: the API server's rules, the kubelet, the controller ------------------------------------------


def _api(cluster) -> client.ResourceV1Api:
    return client.ResourceV1Api(cluster.api_client)


def _foreign_claim(cluster, namespace: str, name: str, result: dict[str, str] | None = None) -> dict[str, Any]:
    if namespace not in cluster.handler.namespaces:
        cluster.core.create_namespace({"metadata": {"name": namespace}})
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "finalizers": ["resource.kubernetes.io/delete-protection"]},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": GPU_CLASS}}]}},
        "status": {"reservedFor": [{"resource": "pods", "name": "x", "uid": "1"}]},  # dropped on create
    }
    created = _api(cluster).create_namespaced_resource_claim(namespace, body, _preload_content=False)
    claim = json.loads(created.data)
    assert claim["status"] == {}
    if result is not None:
        claim = _put_status(cluster, claim, {"allocation": {"devices": {"results": [result]}}})
    return claim


def _read(cluster, namespace: str, name: str) -> dict[str, Any]:
    return json.loads(_api(cluster).read_namespaced_resource_claim(name, namespace, _preload_content=False).data)


def _put_status(cluster, claim: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    body = {**claim, "status": status}
    meta = claim["metadata"]
    answer = _api(cluster).replace_namespaced_resource_claim_status(
        meta["name"], meta["namespace"], body, _preload_content=False
    )
    return json.loads(answer.data)


def _plain_pod(name: str, limits: dict[str, str] | None = None) -> dict[str, Any]:
    container = {"name": "main", "image": "busybox", "resources": {"limits": limits or {}}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"containers": [container]},
    }


def _bind(cluster, name: str, node: str) -> None:
    """A Binding made by somebody else than Microcosm, as kube-scheduler or ``kubectl`` would post it."""
    binding = client.V1Binding(
        metadata=client.V1ObjectMeta(name=name), target=client.V1ObjectReference(kind="Node", name=node)
    )
    cluster.core.create_namespaced_pod_binding(name, NS, binding, _preload_content=False)


def _refusal(call) -> tuple[int, str]:
    with pytest.raises(ApiException) as caught:
        call()
    return caught.value.status, json.loads(caught.value.body)["message"]


def test_the_api_server_refuses_what_validation_go_refuses(cluster) -> None:
    result = {"request": "gpu", "driver": GPU_DRIVER, "pool": "n", "device": "gpu-0"}
    claim = _foreign_claim(cluster, "default", "c")
    reserved = [{"resource": "pods", "name": "p", "uid": "u1"}]

    code, message = _refusal(lambda: _put_status(cluster, claim, {"reservedFor": reserved}))
    assert code == 422 and "status.reservedFor: Forbidden: may not be specified when `allocated` is not set" in message
    code, message = _refusal(
        lambda: _put_status(cluster, claim, {"allocation": {"devices": {"results": [{**result, "request": "x"}]}}})
    )
    assert code == 422 and "must be the name of a request in the claim" in message
    claim = _put_status(cluster, claim, {"allocation": {"devices": {"results": [result]}}, "reservedFor": reserved})
    stale = dict(claim, metadata={**claim["metadata"], "resourceVersion": "1"})
    code, _message = _refusal(lambda: _put_status(cluster, stale, claim["status"]))
    assert code == 409
    other = {"devices": {"results": [{**result, "device": "gpu-1"}]}}
    code, message = _refusal(lambda: _put_status(cluster, claim, {"allocation": other, "reservedFor": reserved}))
    assert code == 422 and "status.allocation: Invalid value: field is immutable" in message
    # Deallocation only without reservations: clearing the allocation alone leaves a reservation without one.
    code, message = _refusal(lambda: _put_status(cluster, claim, {"reservedFor": reserved}))
    assert code == 422 and "may not be specified when `allocated` is not set" in message
    many = [{"resource": "pods", "name": f"p{i}", "uid": f"u{i}"} for i in range(257)]
    code, message = _refusal(lambda: _put_status(cluster, claim, {**claim["status"], "reservedFor": many}))
    assert code == 422 and "must have at most 256 items" in message
    code, message = _refusal(
        lambda: _api(cluster).patch_namespaced_resource_claim(
            "c", "default", {"spec": {"devices": {"requests": []}}}, _content_type=MERGE_PATCH
        )
    )
    assert code == 422 and "spec: Invalid value: field is immutable" in message
    bad = {
        "metadata": {"name": "bad"},
        "spec": {"devices": {"requests": [{"name": "GPU", "exactly": {"deviceClassName": "x", "count": 0}}]}},
    }
    code, message = _refusal(lambda: _api(cluster).create_namespaced_resource_claim("default", bad))
    assert code == 422 and "lowercase RFC 1123 label" in message and "must be greater than zero" in message


def test_claims_are_listed_by_label_and_watched(cluster, gateway, dra) -> None:
    cluster.add_node("dra-a", H100)
    dra["dra-a"] = DraNode("dra-a", _gpus("dra-a"))
    gateway.job_bind(request=_request("1", ReplicaPlacement(0, "dra-a", (Device(0),))))
    _foreign_claim(cluster, NS, "theirs")
    listed = json.loads(
        _api(cluster)
        .list_namespaced_resource_claim(NS, label_selector="microcosm.io/job=1", _preload_content=False)
        .data
    )
    assert [c["metadata"]["name"] for c in listed["items"]] == ["mc-1-0-devices"]
    # The official client's Watch cannot type a resource.k8s.io/v1 claim (it looks for V1ResourceClaim): read the
    # stream's lines as the gateway reads raw JSON.
    stream = _api(cluster).list_namespaced_resource_claim(NS, watch=True, timeout_seconds=1, _preload_content=False)
    events = [json.loads(line) for line in stream.data.decode().splitlines() if line.strip()]
    assert {(e["type"], e["object"]["metadata"]["name"]) for e in events} == {
        ("ADDED", "mc-1-0-devices"),
        ("ADDED", "theirs"),
    }


def test_a_claim_being_deleted_takes_no_new_reservation_and_goes_once_its_finalizer_does(cluster) -> None:
    claim = _foreign_claim(
        cluster, "default", "c", {"request": "gpu", "driver": GPU_DRIVER, "pool": "n", "device": "g"}
    )
    _api(cluster).delete_namespaced_resource_claim("c", "default")
    claim = _read(cluster, "default", "c")
    assert claim["metadata"]["deletionTimestamp"]
    code, message = _refusal(
        lambda: _put_status(
            cluster, claim, {**claim["status"], "reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}]}
        )
    )
    assert code == 422 and "new entries may not be added" in message
    _api(cluster).patch_namespaced_resource_claim(
        "c", "default", {"metadata": {"finalizers": None}}, _content_type=MERGE_PATCH
    )
    assert cluster.resource_claims("default") == []


def test_the_kubelet_refuses_a_pod_bound_before_its_claim_is_reserved_and_starts_it_once_it_is(
    cluster, gateway, dra, kubelet
) -> None:
    """The order kube-scheduler keeps (reserve in PreBind, then bind) matters: bound first, the pod does not start."""
    cluster.add_node("dra-a", H100)
    dra["dra-a"] = DraNode("dra-a", _gpus("dra-a"))
    manifest = pod_with_claim(_plain_pod("early", {"nvidia.com/gpu": "1"}), "early-devices")
    pod = cluster.core.create_namespaced_pod(NS, manifest)
    claim = _foreign_claim(
        cluster, NS, "early-devices", {"request": "gpu", "driver": GPU_DRIVER, "pool": "dra-a", "device": "gpu-3"}
    )
    _bind(cluster, "early", "dra-a")

    ((namespace, name, message),) = kubelet.refused
    assert (namespace, name) == (NS, "early")
    claim_uid = claim["metadata"]["uid"]
    assert message == f"pod early ({pod.metadata.uid}) is not allowed to use ResourceClaim early-devices ({claim_uid})"
    status = _pod(cluster, "early")["status"]
    assert (
        status["phase"] == "Pending"
        and status["containerStatuses"][0]["state"]["waiting"]["reason"] == "ContainerCreating"
    )
    events = [
        json.loads(e.data)
        for e in [client.EventsV1Api(cluster.api_client).list_namespaced_event(NS, _preload_content=False)]
    ]
    assert any(e["reason"] == "FailedPrepareDynamicResources" for e in events[0]["items"])

    _put_status(
        cluster,
        claim,
        {**claim["status"], "reservedFor": [{"resource": "pods", "name": "early", "uid": pod.metadata.uid}]},
    )
    kubelet.resync()
    assert _pod(cluster, "early")["status"]["phase"] == "Running"


def test_the_kubelet_refuses_a_claim_that_is_missing_or_holds_another_node_s_devices(cluster, kubelet, dra) -> None:
    dra["dra-a"] = DraNode("dra-a", _gpus("dra-a"))
    cluster.core.create_namespace({"metadata": {"name": NS}})
    for name in ("missing", "elsewhere"):
        manifest = pod_with_claim(_plain_pod(name), f"{name}-devices")
        uid = cluster.core.create_namespaced_pod(NS, manifest).metadata.uid
        if name == "elsewhere":
            claim = _foreign_claim(cluster, NS, "elsewhere-devices")
            result = {"request": "gpu", "driver": GPU_DRIVER, "pool": "dra-b", "device": "gpu-0"}
            _put_status(
                cluster,
                claim,
                {
                    "allocation": {"devices": {"results": [result]}},
                    "reservedFor": [{"resource": "pods", "name": name, "uid": uid}],
                },
            )
        _bind(cluster, name, "dra-a")
    messages = [m for _ns, _n, m in kubelet.refused]
    assert (
        messages[0] == 'fetch ResourceClaim missing-devices: resourceclaims.resource.k8s.io "missing-devices" not found'
    )
    assert "NodePrepareResources failed for ResourceClaim elsewhere-devices" in messages[1]


def test_the_controller_clears_reservations_of_gone_pods_deallocates_and_deletes_their_claims(
    cluster, gateway, dra
) -> None:
    """What the cluster does on its own when a pod goes behind Microcosm's back (kubectl delete)."""
    cluster.add_node("dra-a", H100)
    dra["dra-a"] = DraNode("dra-a", _gpus("dra-a"))
    gateway.job_bind(request=_request("1", ReplicaPlacement(0, "dra-a", (Device(0),))))
    other = _foreign_claim(
        cluster, NS, "shared", {"request": "gpu", "driver": GPU_DRIVER, "pool": "dra-a", "device": "gpu-5"}
    )
    uid = _pod(cluster, "mc-1-0")["metadata"]["uid"]
    _put_status(
        cluster, other, {**other["status"], "reservedFor": [{"resource": "pods", "name": "mc-1-0", "uid": uid}]}
    )
    controller = ClaimController(cluster.handler)
    controller.sync()
    assert len(cluster.resource_claims(NS)) == 2  # the pod runs: nothing changes

    cluster.core.delete_namespaced_pod("mc-1-0", NS)
    controller.sync()

    (shared,) = cluster.resource_claims(NS)  # the pod's own claim is deleted; another claim is only deallocated
    assert shared["metadata"]["name"] == "shared"
    assert "allocation" not in shared["status"] and "reservedFor" not in shared["status"]
    assert shared["metadata"].get("finalizers") in (None, [])


# -- the pure parts -------------------------------------------------------------------------------------------------


def test_requests_refuse_too_few_free_fabric_devices() -> None:
    node = DraNode("n", _gpus("n", 2) + _efa("n", 2))
    with pytest.raises(GatewayConflict, match="1 free fabric devices of 2"):
        replica_requests((Device(0),), node, fabric_count=2, taken={(EFA_DRIVER, "n", "efa-0")})
    (gpu, fabric) = replica_requests((Device(1),), node, fabric_count=1, fabric_class="efa.class")
    assert gpu.device_class == GPU_CLASS and fabric.device_class == "efa.class" and fabric.devices[0].name == "efa-0"


def test_pod_with_claim_moves_only_the_device_resources() -> None:
    pod = {
        "spec": {
            "containers": [
                {"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1", EFA_RESOURCE: "4", "cpu": "8"},
                                                "requests": {"nvidia.com/mig-1g.10gb": "1", "memory": "1Gi"}}},
                {"name": "sidecar", "resources": {"limits": {"cpu": "1"}}},
            ],
            "initContainers": [{"name": "init", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        }
    }  # fmt: skip
    out = pod_with_claim(pod, "c")
    main, sidecar = out["spec"]["containers"]
    assert main["resources"] == {"limits": {"cpu": "8"}, "requests": {"memory": "1Gi"}, "claims": [{"name": "devices"}]}
    assert sidecar["resources"] == {"limits": {"cpu": "1"}}
    assert out["spec"]["initContainers"][0]["resources"] == {"limits": {}}
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"  # the input is untouched
