"""PCIe-aligned claims on EFA DRA nodes, through the official client against the emulator: nodes whose GPUs and
EFA interfaces the harness drivers publish with ``resource.kubernetes.io/pcieRoot`` (two roots, dra_driver.py
``pcie_root``), the gateway reading them (``KUBE_DRA``), and the API server harness checking a claim's
matchAttribute constraint against its allocation (tests/scheduler/kube_harness/device_constraints.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from scheduler.gateways.kube.dra_claims import PCIE_ROOT, claim_name
from scheduler.gateways.kube.dra_slices import EFA_DEVICE_CLASS, EFA_DRIVER
from scheduler.gateways.kube.gateway import KubeGateway
from scheduler.gateways.protocol import BindRequest, Device, ReplicaPlacement
from tests.scheduler.kube_emulator import cluster_fixture
from tests.scheduler.kube_harness.resource_claims import DraKubelet

NS = "team-nlp"
NODES = ("p5-a", "p5-b")
HIGH = "pci0000:80"

cluster = pytest.fixture(cluster_fixture)


@pytest.fixture
def kubelet(cluster) -> DraKubelet:
    kubelet = DraKubelet(cluster.handler)  # prepares what the nodes' slices publish
    cluster.handler.bind_hooks.append(kubelet.on_bind)
    return kubelet


def _gateway(cluster, *, roots: int = 2) -> KubeGateway:
    cluster.add_device_classes()
    for name in NODES:
        cluster.add_dra_node(name, efa=4, ena=True, pcie_roots=roots)
    gateway = KubeGateway(
        cluster.new_api_client(),
        consistent_reads=True,
        namespace_create=True,
        clock=lambda: 1_800_000_000.0,
        sleep=lambda _s: None,
        request_timeout_s=2.0,
        dra=True,
        dra_fabric_class=EFA_DEVICE_CLASS,
    )
    gateway.namespace_ensure(namespace=NS, team="nlp")
    gateway.observe()  # reads the slices: the DRA nodes the binds use
    return gateway


def _half_gang(gateway: KubeGateway) -> None:
    """A two-node gang whose replicas take GPUs 4–7 of each 8-GPU node: half the node, so half its EFA devices."""
    placements = tuple(ReplicaPlacement(r, n, tuple(Device(i) for i in range(4, 8))) for r, n in enumerate(NODES))
    gateway.job_bind(
        request=BindRequest(job="7", namespace=NS, name="llama", placements=placements, image="ghcr.io/acme/t:1")
    )


def _claim(cluster, name: str) -> dict[str, Any]:
    return next(c for c in cluster.resource_claims(NS) if c["metadata"]["name"] == name)


def _roots(cluster) -> dict[tuple[str, str], str]:
    """Every published device's pcieRoot by (pool, device)."""
    found = {}
    listed = client.ResourceV1Api(cluster.api_client).list_resource_slice(_preload_content=False)
    for raw in json.loads(listed.data)["items"]:
        for device in raw["spec"].get("devices") or []:
            root = (device.get("attributes") or {}).get(PCIE_ROOT)
            found[(raw["spec"]["pool"]["name"], device["name"])] = root["string"] if root else ""
    return found


def test_a_half_node_gang_replica_gets_the_efa_devices_on_its_gpus_root_and_says_so(cluster, kubelet) -> None:
    gateway = _gateway(cluster)
    _half_gang(gateway)
    roots = _roots(cluster)
    for replica, node in enumerate(NODES):
        claim = _claim(cluster, claim_name("7", replica))
        requests = [r["name"] for r in claim["spec"]["devices"]["requests"]]
        assert requests == ["gpu-0", "gpu-1", "gpu-2", "gpu-3", "fabric"]
        assert claim["spec"]["devices"]["constraints"] == [{"requests": requests, "matchAttribute": PCIE_ROOT}]
        results = claim["status"]["allocation"]["devices"]["results"]
        fabric = [r for r in results if r["request"] == "fabric"]
        assert len(fabric) == 2 and all(r["driver"] == EFA_DRIVER for r in fabric)
        assert {r["pool"] for r in results} == {node}
        assert {roots[(r["pool"], r["device"])] for r in results} == {HIGH}  # GPUs 4–7 and EFA 2–3: one root
    assert kubelet.refused == []
    assert {p["status"]["phase"] for p in cluster.pods(NS)} == {"Running"}


def test_without_published_roots_the_claim_has_no_constraint(cluster, kubelet) -> None:
    gateway = _gateway(cluster, roots=0)
    _half_gang(gateway)
    claim = _claim(cluster, claim_name("7", 0))
    assert "constraints" not in claim["spec"]["devices"]
    assert len([r for r in claim["status"]["allocation"]["devices"]["results"] if r["request"] == "fabric"]) == 2
    assert kubelet.refused == []


def _refusal(call) -> tuple[int, str]:
    with pytest.raises(ApiException) as caught:
        call()
    return caught.value.status, json.loads(caught.value.body)["message"]


def test_the_api_server_harness_refuses_an_allocation_that_breaks_the_constraint(cluster) -> None:
    _gateway(cluster)
    api = client.ResourceV1Api(cluster.api_client)
    requests = [
        {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}},
        {"name": "fabric", "exactly": {"deviceClassName": EFA_DEVICE_CLASS}},
    ]
    bad_spec = {"devices": {"requests": requests, "constraints": [{"requests": ["nic"], "matchAttribute": PCIE_ROOT}]}}
    code, message = _refusal(
        lambda: api.create_namespaced_resource_claim(NS, {"metadata": {"name": "bad"}, "spec": bad_spec})
    )
    assert code == 422 and 'constraints[0].requests[0]: Invalid value: "nic"' in message
    spec = {"devices": {"requests": requests, "constraints": [{"requests": [], "matchAttribute": PCIE_ROOT}]}}
    claim = json.loads(
        api.create_namespaced_resource_claim(NS, {"metadata": {"name": "c"}, "spec": spec}, _preload_content=False).data
    )
    efa = sorted((pool, name) for (pool, name), root in _roots(cluster).items() if pool == "p5-a" and "pci-" in name)
    low_efa = next(name for pool, name in efa if _roots(cluster)[(pool, name)] == "pci0000:00")
    high_efa = next(name for pool, name in efa if _roots(cluster)[(pool, name)] == HIGH)

    def allocate(nic: str) -> dict[str, Any]:
        results = [
            {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "p5-a", "device": "gpu-6"},
            {"request": "fabric", "driver": EFA_DRIVER, "pool": "p5-a", "device": nic},
        ]
        body = {**claim, "status": {"allocation": {"devices": {"results": results}}}}
        return json.loads(api.replace_namespaced_resource_claim_status("c", NS, body, _preload_content=False).data)

    code, message = _refusal(lambda: allocate(low_efa))
    assert code == 422 and f'results[1]: Invalid value: "{low_efa}": its {PCIE_ROOT}' in message
    assert "differs from 'pci0000:80' of results[0]" in message
    assert allocate(high_efa)["status"]["allocation"]["devices"]["results"][1]["device"] == high_efa
