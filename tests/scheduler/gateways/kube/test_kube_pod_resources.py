"""Pods a platform team can run: CPU and memory with requests = limits (Guaranteed), /dev/shm inside the memory
limit, and refusals by ResourceQuota, Pod Security, webhooks and RBAC diagnosed for what they are.

The cluster is kmock's emulator driven by the unmodified official client; the admission plugins are the harness
modules under tests/scheduler/kube_harness/, each following its upstream source."""

from __future__ import annotations

import json
from typing import Any

import pytest

from scheduler.core.model.vocabulary import Fabric
from scheduler.errors import GatewayConflict, GatewayError, GatewayRetryable
from scheduler.gateways.kube.fabrics import DAEMON_CONTAINER, ReplicaFabric
from scheduler.gateways.kube.gateway import KubeGateway
from scheduler.gateways.kube.host_resources import (
    GIB,
    MIB,
    HostResources,
    HostSettings,
    cpu_milli,
    pod_qos_class,
    replica_host_resources,
)
from scheduler.gateways.kube.pods import pod_manifest
from scheduler.gateways.kube.refusals import RefusalKind, diagnose
from scheduler.gateways.kube.shared_memory import quantity_bytes
from scheduler.gateways.protocol import BindRequest, Device, ReplicaPlacement
from tests.scheduler.kube_emulator import H100_ONE_LEAF, cluster_fixture, status_response
from tests.scheduler.kube_harness.authorization import RbacDenial
from tests.scheduler.kube_harness.resource_quota import QuotaAdmission
from tests.scheduler.kube_harness.webhooks import DenyingWebhook

cluster = pytest.fixture(cluster_fixture)
NAMESPACE = "team-nlp"
# An 8 × H100 server as a DGX H100 reports itself: 2 TiB, 224 threads; allocatable after the kubelet's reserve.
CAPACITY = {"nvidia.com/gpu": "8", "cpu": "224", "memory": "2113464960Ki"}
ALLOCATABLE = {"nvidia.com/gpu": "8", "cpu": "220", "memory": "2080000000Ki"}


@pytest.fixture
def gateway(cluster) -> KubeGateway:
    gateway = KubeGateway(
        cluster.new_api_client(), namespace_create=True, clock=lambda: 1_800_000_000.0, sleep=lambda s: None
    )
    gateway.namespace_ensure(namespace=NAMESPACE, team="nlp")
    cluster.add_node("gpu-a", H100_ONE_LEAF, capacity=CAPACITY, allocatable=ALLOCATABLE)
    return gateway


@pytest.fixture
def quota(cluster) -> QuotaAdmission:
    admission = QuotaAdmission()
    cluster.handler.interceptors.append(admission)
    return admission


def _request(*devices: Device, job: str = "42", **fields: Any) -> BindRequest:
    placement = ReplicaPlacement(0, "gpu-a", devices or (Device(0),))
    return BindRequest(job=job, namespace=NAMESPACE, name="train", placements=(placement,), image="acme/t:1", **fields)


def _main(pod: dict[str, Any]) -> dict[str, Any]:
    return pod["spec"]["containers"][0]


def _shm_bytes(pod: dict[str, Any]) -> int:
    (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == "dshm"]
    return quantity_bytes(volume["emptyDir"]["sizeLimit"]) or 0


# -- the manifest: Guaranteed, shm inside the limit ----------------------------------------------------------


def test_a_bound_pod_is_guaranteed_with_per_gpu_defaults_and_its_shm_inside_the_memory_limit(cluster, gateway) -> None:
    gateway.job_bind(request=_request(Device(0), Device(1)))

    (pod,) = cluster.pods(NAMESPACE)
    resources = _main(pod)["resources"]
    assert resources["requests"] == resources["limits"]
    assert pod_qos_class(pod) == "Guaranteed"  # BestEffort before: only nvidia.com/gpu was requested
    assert cpu_milli(resources["limits"]["cpu"]) == 16_000  # 8 cores per GPU
    memory = quantity_bytes(resources["limits"]["memory"]) or 0
    shm = _shm_bytes(pod)
    assert shm > 0 and memory == 2 * 64 * GIB + shm  # the process's own 64 GiB per GPU, shm on top


def test_a_mig_slice_counts_as_its_compute_fraction() -> None:
    host = replica_host_resources(
        cpu=None,
        host_memory_gib=None,
        model="H100-SXM5-80GB",
        devices=(Device(0, "3g.40gb", 4),),
        gpu_count=8,
        allocatable=ALLOCATABLE,
        shm_bytes=None,
        shm_fraction=0.5,
    )
    assert host.cpu_milli == -(-8_000 * 3 // 7)  # 3 of 7 compute slices of 8 cores, rounded up to a millicore
    process = int(64 * GIB * 3 / 7) // MIB * MIB
    assert host.memory_bytes == process + host.shm_bytes and host.shm_bytes == int(64 * GIB * 3 / 7 * 0.5) // MIB * MIB


def test_the_jobs_own_cpu_and_host_memory_win_over_the_defaults(cluster, gateway) -> None:
    gateway.job_bind(request=_request(Device(0), cpu=2.5, host_memory_gib=20))

    (pod,) = cluster.pods(NAMESPACE)
    limits = _main(pod)["resources"]["limits"]
    assert limits["cpu"] == "2500m"
    assert quantity_bytes(limits["memory"]) == 20 * GIB + _shm_bytes(pod)


def test_defaults_shrink_to_the_replicas_share_of_a_small_node(cluster) -> None:
    small = {"nvidia.com/gpu": "4", "cpu": "32", "memory": "256Gi"}
    cluster.add_node("gpu-a", {**H100_ONE_LEAF, "nvidia.com/gpu.count": "4"}, capacity=small, allocatable=small)
    gateway = KubeGateway(
        cluster.new_api_client(),
        namespace_create=True,
        sleep=lambda s: None,
        host=HostSettings(cpu_per_gpu=16, host_memory_gib_per_gpu=64),
    )
    gateway.namespace_ensure(namespace=NAMESPACE, team="nlp")

    gateway.job_bind(request=_request(Device(0)))

    (pod,) = cluster.pods(NAMESPACE)
    limits = _main(pod)["resources"]["limits"]
    # A quarter of the node: 8 cores (not 16) and 64 GiB in all, shm included, so the kubelet admits it.
    assert cpu_milli(limits["cpu"]) == 8_000
    assert quantity_bytes(limits["memory"]) <= 64 * GIB
    assert _shm_bytes(pod) < (quantity_bytes(limits["memory"]) or 0)


def test_a_fabric_sidecar_gets_its_own_requests_equal_to_limits_so_the_pod_stays_guaranteed() -> None:
    sidecar = {"name": DAEMON_CONTAINER, "image": "rxdm:1", "restartPolicy": "Always"}
    fabric = ReplicaFabric(Fabric.TCPXO, sidecars=(sidecar,))
    host = HostResources(cpu_milli=8000, memory_bytes=96 * GIB, shm_bytes=32 * GIB)
    request = _request(Device(0))
    pod = pod_manifest(request, request.placements[0], team="nlp", image="i", grace_s=30, fabric=fabric, host=host)

    (daemon,) = pod["spec"]["initContainers"]
    assert daemon["resources"]["requests"] == daemon["resources"]["limits"] == {"cpu": "1", "memory": "1024Mi"}
    assert pod_qos_class(pod) == "Guaranteed"
    assert _shm_bytes(pod) == 32 * GIB and quantity_bytes(_main(pod)["resources"]["limits"]["memory"]) == 96 * GIB


def test_qos_class_follows_upstream() -> None:
    def pod(*containers: dict[str, Any], init: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
        return {"spec": {"containers": list(containers), "initContainers": list(init)}}

    both = {"cpu": "1", "memory": "1Gi"}
    assert pod_qos_class(pod({"resources": {"limits": {"nvidia.com/gpu": "1"}}})) == "BestEffort"
    assert pod_qos_class(pod({"resources": {"limits": both}})) == "Guaranteed"  # requests default to limits
    assert pod_qos_class(pod({"resources": {"limits": both, "requests": {"cpu": "500m"}}})) == "Burstable"
    assert pod_qos_class(pod({"resources": {"limits": {"cpu": "1"}}})) == "Burstable"  # no memory limit
    assert pod_qos_class(pod({"resources": {"limits": both}}, init=({"resources": {}},))) == "Burstable"
    assert pod_qos_class(pod({"resources": {"limits": both}}, init=({"resources": {"limits": both}},))) == "Guaranteed"


# -- ResourceQuota -------------------------------------------------------------------------------------------


def test_a_namespace_quota_on_cpu_and_memory_admits_microcosms_pods(cluster, gateway, quota) -> None:
    quota.add(NAMESPACE, "compute", {"requests.cpu": "64", "requests.memory": "1Ti", "limits.memory": "1Ti"})

    gateway.job_bind(request=_request(Device(0)))  # before: 403 on every pod, reported as "apply deploy/rbac.yaml"

    assert len(cluster.pods(NAMESPACE)) == 1


def test_the_quota_harness_refuses_a_pod_without_requests_in_upstreams_words(cluster, quota) -> None:
    quota.add(NAMESPACE, "compute", {"requests.cpu": "64", "requests.memory": "1Ti"})
    cluster.handler.namespaces[NAMESPACE] = {"metadata": {"name": NAMESPACE}}
    from kubernetes.client.exceptions import ApiException

    pod = {"metadata": {"name": "bare"}, "spec": {"containers": [{"name": "main", "image": "i"}]}}
    with pytest.raises(ApiException) as caught:
        cluster.core.create_namespaced_pod(NAMESPACE, pod)
    assert caught.value.status == 403
    assert json.loads(caught.value.body)["message"] == (
        'pods "bare" is forbidden: failed quota: compute: must specify requests.cpu for: main; '
        "requests.memory for: main"
    )


def test_a_pod_over_the_quota_is_a_conflict_that_names_the_quota_and_undoes_the_bind(cluster, gateway, quota) -> None:
    quota.add(NAMESPACE, "gpu-team", {"requests.cpu": "20"})

    with pytest.raises(GatewayConflict) as caught:
        gateway.job_bind(request=_request(Device(0), Device(1), Device(2)))  # 24 cores

    message = str(caught.value)
    assert "exceeded quota: gpu-team, requested: requests.cpu=24, used: requests.cpu=0, limited: requests.cpu=20" in (
        message
    )
    assert f"namespace {NAMESPACE}'s ResourceQuota gpu-team has no room" in message
    assert "rbac" not in message
    assert cluster.pods(NAMESPACE) == []


def test_a_quota_refusal_requeues_the_job_instead_of_stopping_the_loop(cluster, gateway, quota) -> None:
    from scheduler.loop.apply import BindOp, Retry, apply_ops

    quota.add(NAMESPACE, "gpu-team", {"requests.memory": "10Gi"})
    op = BindOp(request=_request(Device(0)), team="nlp")

    result = apply_ops(gateway, [op], grace_s=30, retry=Retry(sleep=lambda s: None))

    assert result.failed == [] and [o for o, _ in result.refused] == [op]  # the loop requeues it with the reason
    assert "ResourceQuota gpu-team" in result.refused[0][1]


def test_a_quota_that_requires_requests_names_the_settings_to_set() -> None:
    message = (
        'pods "mc-42-0" is forbidden: failed quota: compute: must specify limits.cpu for: main; requests.cpu for: main'
    )
    refusal = diagnose(403, message, what="create pod team-nlp/mc-42-0")
    assert refusal.kind is RefusalKind.QUOTA and refusal.conflict
    assert "namespace team-nlp's ResourceQuota compute requires cpu/memory requests" in refusal.message
    assert "KUBE_CPU_PER_GPU" in refusal.message and "rbac" not in refusal.message


# -- Pod Security, webhooks, RBAC ------------------------------------------------------------------------------


def test_a_pod_security_refusal_is_a_conflict_not_a_permission(cluster, gateway) -> None:
    async def pod_security(emulator, raw):  # the message of staging/src/k8s.io/pod-security-admission
        if raw.method == "POST" and raw.path.endswith("/pods"):
            message = (
                'pods "mc-42-0" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != '
                'false (container "main" must set securityContext.allowPrivilegeEscalation=false)'
            )
            return status_response(403, "Forbidden", message, name="mc-42-0", kind="pods")
        return None

    cluster.handler.interceptors.append(pod_security)

    with pytest.raises(GatewayConflict) as caught:
        gateway.job_bind(request=_request(Device(0)))

    assert "Pod Security level 'restricted:latest' forbids this pod" in str(caught.value)
    assert "rbac" not in str(caught.value)
    assert cluster.pods(NAMESPACE) == []


def test_a_webhook_denial_names_the_webhook_whatever_its_status_code(cluster, gateway) -> None:
    cluster.handler.interceptors.append(
        DenyingWebhook("policy.example.com", "images must come from registry.example.com", code=400)
    )

    with pytest.raises(GatewayConflict) as caught:
        gateway.job_bind(request=_request(Device(0)))

    message = str(caught.value)
    assert 'admission webhook "policy.example.com" denied the request: images must come from' in message
    assert "the cluster's admission webhook 'policy.example.com' denied it" in message


def test_only_rbac_says_apply_the_rbac_file(cluster, gateway) -> None:
    cluster.handler.interceptors.append(RbacDenial("create", "pods"))

    with pytest.raises(GatewayError) as caught:
        gateway.job_bind(request=_request(Device(0)))

    assert not isinstance(caught.value, GatewayConflict | GatewayRetryable)
    assert 'User "system:serviceaccount:microcosm:microcosm" cannot create resource "pods"' in str(caught.value)
    assert "apply deploy/rbac.yaml" in str(caught.value)


@pytest.mark.parametrize(
    ("status", "message", "kind"),
    [
        (403, 'pods "p" is forbidden: maximum cpu usage per Container is 4, but limit is 8', RefusalKind.LIMIT_RANGE),
        (422, 'Pod "p" is invalid: spec.containers[0].image: Required value', RefusalKind.INVALID),
        (403, 'pods "p" is forbidden: some plugin said no', RefusalKind.ADMISSION),
        (401, "Unauthorized", RefusalKind.UNAUTHORIZED),
    ],
)
def test_other_refusals_are_told_apart(status: int, message: str, kind: RefusalKind) -> None:
    refusal = diagnose(status, message, what="create pod team-nlp/p")
    assert refusal.kind is kind
    assert ("deploy/rbac.yaml" in refusal.message) is False
    assert refusal.conflict is (kind is not RefusalKind.UNAUTHORIZED)


def test_a_reads_403_is_authorization_whatever_its_words() -> None:
    refusal = diagnose(403, "forbidden", what="list nodes")
    assert refusal.kind is RefusalKind.RBAC and not refusal.conflict
