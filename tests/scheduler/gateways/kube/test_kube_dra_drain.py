"""The relabel flow's drain on a static-MIG DRA node: a pod holding its MIG device through a ResourceClaim goes only
when its claim holds a device of a GPU being reconfigured (scheduler/gateways/kube/mig_drain.py). The claim's
allocation results name the devices (kubernetes staging/src/k8s.io/api/resource/v1/types.go,
DeviceRequestAllocationResult) and the node's ResourceSlices say whose GPU each is
(tests/scheduler/kube_harness/dra_driver.py, as the NVIDIA DRA driver publishes static MIG:
cmd/gpu-kubelet-plugin/nvlib.go); through the official client against the emulator."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.core.sizing.layouts import named_layout
from scheduler.gateways.kube.dra_devices import DraDevice, DraDeviceKind, DraNode
from scheduler.gateways.kube.gateway import KubeGateway
from scheduler.gateways.kube.mig_drain import claim_gpus, pod_claim_names, pod_in_the_way
from scheduler.gateways.protocol import BindRequest, Device, ReplicaPlacement
from tests.scheduler.kube_emulator import cluster_fixture
from tests.scheduler.kube_harness.dra_driver import A100
from tests.scheduler.kube_harness.resource_claims import DraKubelet

NS = "team-nlp"
MODEL = "A100-SXM4-80GB"
HALVES = named_layout(MODEL, "all-3g.40gb")  # (3g.40gb at 0, 3g.40gb at 4)
GFD = {  # the GPU Operator's labels beside the DRA driver: MIG Manager runs the relabel flow on a static-MIG node
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
    "nvidia.com/gpu.count": "2",
    "nvidia.com/gpu.memory": "81920",
    "nvidia.com/mig.capable": "true",
    "nvidia.com/mig.strategy": "mixed",
    "nvidia.com/mig.config": "all-3g.40gb",
    "nvidia.com/mig.config.state": "success",
    "nvidia.com/mig-3g.40gb.count": "4",
}
cluster = pytest.fixture(cluster_fixture)


@pytest.fixture
def gateway(cluster) -> KubeGateway:
    cluster.add_device_classes()
    cluster.add_dra_node("dra-a100", GFD, gpus=2, board=A100, mig=[list(HALVES), list(HALVES)])
    kubelet = DraKubelet(cluster.handler)
    cluster.handler.bind_hooks.append(kubelet.on_bind)
    gateway = KubeGateway(
        cluster.new_api_client(),
        consistent_reads=True,
        namespace_create=True,
        clock=lambda: 1_800_000_000.0,
        sleep=lambda _s: None,
        request_timeout_s=2.0,
        dra=True,
    )
    gateway.namespace_ensure(namespace=NS, team="nlp")
    gateway.observe()
    return gateway


def _bind(gateway: KubeGateway, job: str, gpu: int, start: int) -> None:
    placement = ReplicaPlacement(0, "dra-a100", (Device(gpu, "3g.40gb", start),))
    gateway.job_bind(
        request=BindRequest(job=job, namespace=NS, name="serve", placements=(placement,), image="ghcr.io/acme/s:1")
    )


def _live(cluster) -> set[str]:
    return {p["metadata"]["name"] for p in cluster.pods(NS) if not p["metadata"].get("deletionTimestamp")}


def test_a_reconfiguration_of_one_gpu_drains_only_the_pods_whose_claims_hold_it(cluster, gateway) -> None:
    _bind(gateway, "1", 0, 0)  # GPU 0
    _bind(gateway, "2", 1, 4)  # GPU 1
    assert _live(cluster) == {"mc-1-0", "mc-2-0"}

    # GPU 1 becomes seven 1g.10gb instances; GPU 0 keeps its halves.
    gateway.node_reconfigure(node="dra-a100", layouts=(HALVES, named_layout(MODEL, "all-1g.10gb")))

    # Only the pod on GPU 1 goes (it was every claim-holding pod of the node: both).
    assert _live(cluster) == {"mc-1-0"}
    assert cluster.node("dra-a100")["spec"].get("unschedulable") is True  # the relabel flow has begun


def test_a_reconfiguration_of_both_gpus_drains_both(cluster, gateway) -> None:
    _bind(gateway, "1", 0, 0)
    _bind(gateway, "2", 1, 4)
    gateway.node_reconfigure(node="dra-a100", layouts=(named_layout(MODEL, "all-1g.10gb"),) * 2)
    assert _live(cluster) == set()


# -- the pure reading ----------------------------------------------------------------------------------------------

NODE = DraNode(
    "n",
    (
        DraDevice("gpu.nvidia.com", "n", "gpu-0-mig-3g40gb-9-0", DraDeviceKind.MIG, 0, "3g.40gb", 0),
        DraDevice("gpu.nvidia.com", "n", "gpu-1-mig-3g40gb-9-0", DraDeviceKind.MIG, 1, "3g.40gb", 0),
        DraDevice("dra.net", "n", "pci-0000-10-00-0", DraDeviceKind.FABRIC),
    ),
)


def _pod(*claims: dict[str, str], statuses: list[dict[str, str]] | None = None) -> dict[str, Any]:
    pod: dict[str, Any] = {"metadata": {"name": "p", "namespace": NS}, "spec": {"resourceClaims": list(claims)}}
    if statuses is not None:
        pod["status"] = {"resourceClaimStatuses": statuses}
    return pod


def _claim(*devices: tuple[str, str]) -> dict[str, Any]:
    results = [{"request": "r", "driver": d, "pool": "n", "device": name} for d, name in devices]
    return {"status": {"allocation": {"devices": {"results": results}}}}


def test_the_gpus_a_pod_s_claims_hold_are_read_from_their_allocation_results() -> None:
    direct = _pod({"name": "devices", "resourceClaimName": "c1"})
    templated = _pod(
        {"name": "gpu", "resourceClaimTemplateName": "t"}, statuses=[{"name": "gpu", "resourceClaimName": "c2"}]
    )
    claims = {
        (NS, "c1"): _claim(("gpu.nvidia.com", "gpu-1-mig-3g40gb-9-0"), ("dra.net", "pci-0000-10-00-0")),
        (NS, "c2"): _claim(("gpu.nvidia.com", "gpu-0-mig-3g40gb-9-0")),
    }
    assert pod_claim_names(templated) == ["c2"]
    assert claim_gpus(direct, claims, NODE) == frozenset({1})  # the EFA interface holds no GPU
    assert claim_gpus(templated, claims, NODE) == frozenset({0})
    # What cannot be told: a template's claim not recorded yet, a claim missing or unallocated, a GPU device the
    # node does not publish, a node with no published devices.
    assert claim_gpus(_pod({"name": "gpu", "resourceClaimTemplateName": "t"}), claims, NODE) is None
    assert claim_gpus(_pod({"name": "d", "resourceClaimName": "gone"}), claims, NODE) is None
    assert claim_gpus(direct, {(NS, "c1"): {"status": {}}}, NODE) is None
    assert claim_gpus(direct, {(NS, "c1"): _claim(("gpu.nvidia.com", "gpu-7"))}, NODE) is None
    assert claim_gpus(direct, claims, None) is None


def test_a_claim_holding_pod_goes_when_its_gpu_changes_or_when_that_cannot_be_told() -> None:
    pod = _pod({"name": "devices", "resourceClaimName": "c1"})
    mig = frozenset({"nvidia.com/mig-3g.40gb"})
    assert pod_in_the_way(pod, mig, frozenset({1}), lambda _p: frozenset({1}))
    assert not pod_in_the_way(pod, mig, frozenset({1}), lambda _p: frozenset({0}))
    assert pod_in_the_way(pod, mig, frozenset({1}), lambda _p: None)  # unknown: taken, as before
    assert pod_in_the_way(pod, mig, frozenset({1}))  # no reader (a gateway without DRA): taken
    assert not pod_in_the_way(pod, frozenset(), frozenset(), lambda _p: None)  # nothing drains
