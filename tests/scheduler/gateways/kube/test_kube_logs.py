"""A replica's log through the Kubernetes gateway: the pod log API with the official client, over HTTP, against
the emulator (its ``pods/log`` route serves what a test seeded)."""

from __future__ import annotations

import pytest

from scheduler.errors import GatewayError, GatewayRetryable
from scheduler.gateways.kube.gateway import KubeGateway
from scheduler.gateways.kube.pods import pod_name
from scheduler.gateways.protocol import BindRequest, Device, LogSource, ReplicaPlacement
from tests.scheduler.kube_emulator import Sleeps, cluster_fixture

cluster = pytest.fixture(cluster_fixture)

H100 = {
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.memory": "81559",
    "nvidia.com/mig.capable": "true",
    "nvidia.com/mig.strategy": "mixed",
}
NAMESPACE = "team-nlp"
LINES = [f"epoch {i // 10} step {i} loss {1 / (i + 1):.4f}\n" for i in range(500)]


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
def gateway(cluster, sleeps) -> KubeGateway:
    return KubeGateway(
        cluster.new_api_client(),
        namespace_create=True,
        clock=lambda: 1_800_000_000.0,
        sleep=sleeps,
        request_timeout_s=1.0,
    )


@pytest.fixture
def bound(cluster, gateway) -> str:
    """Job 42 with two replicas bound on gpu-a; returns the job id."""
    cluster.add_node("gpu-a", H100, allocatable={"nvidia.com/gpu": "8"})
    gateway.namespace_ensure(namespace=NAMESPACE, team="nlp")
    placements = tuple(ReplicaPlacement(r, "gpu-a", (Device(r),)) for r in range(2))
    request = BindRequest(job="42", namespace=NAMESPACE, name="train", placements=placements, image="acme/train:1")
    gateway.job_bind(request=request)
    return "42"


def test_the_last_lines_of_the_replicas_container_log(cluster, gateway, bound) -> None:
    cluster.seed_log(NAMESPACE, pod_name(bound, 1), "".join(LINES))
    cluster.seed_log(NAMESPACE, pod_name(bound, 0), "replica zero\n")
    cluster.clear_log()

    log = gateway.job_logs(job=bound, namespace=NAMESPACE, replica=1, tail_lines=200)

    assert log.text == "".join(LINES[-200:])
    assert (log.replica, log.source, log.truncated, log.note) == (1, LogSource.KUBERNETES, False, "")
    assert gateway.job_logs(job=bound, namespace=NAMESPACE, replica=0, tail_lines=200).text == "replica zero\n"
    _method, path, query = cluster.handler.log[0]
    assert path == f"/api/v1/namespaces/{NAMESPACE}/pods/mc-42-1/log"
    assert "container=main" in query and "tailLines=200" in query and "limitBytes=" in query


def test_the_byte_limit_cuts_the_tail_and_says_so(cluster, gateway, bound) -> None:
    cluster.seed_log(NAMESPACE, pod_name(bound, 0), "".join(LINES))
    limit = 1000

    log = gateway.job_logs(job=bound, namespace=NAMESPACE, replica=0, tail_lines=200, limit_bytes=limit)

    assert log.truncated and len(log.text.encode()) == limit
    assert log.text == "".join(LINES[-200:])[:limit]  # the first bytes of the tail, as the API server cuts it


def test_a_pod_that_is_gone_has_an_empty_log_not_an_error(cluster, gateway, bound) -> None:
    log = gateway.job_logs(job=bound, namespace=NAMESPACE, replica=7, tail_lines=200)
    assert log.text == "" and not log.truncated
    assert "mc-42-7 is gone" in log.note


def test_a_container_that_has_not_started_has_an_empty_log_with_the_clusters_reason(cluster, gateway) -> None:
    cluster.add_node("gpu-a", H100)
    gateway.namespace_ensure(namespace=NAMESPACE, team="nlp")
    cluster.core.create_namespaced_pod(
        NAMESPACE, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "mc-9-0"}, "spec": {"containers": []}}
    )
    log = gateway.job_logs(job="9", namespace=NAMESPACE, replica=0, tail_lines=10)
    assert log.text == "" and "does not have a host assigned" in log.note


def test_transient_failures_are_retried_then_raised_as_retryable(cluster, gateway, bound, sleeps) -> None:
    cluster.seed_log(NAMESPACE, pod_name(bound, 0), "ok\n")
    cluster.fail("GET", r"/pods/mc-42-0/log$", 503)
    assert gateway.job_logs(job=bound, namespace=NAMESPACE, replica=0, tail_lines=5).text == "ok\n"
    assert len(sleeps) == 1

    cluster.fail("GET", r"/pods/mc-42-0/log$", 503, times=5)
    with pytest.raises(GatewayRetryable, match="read the log of pod team-nlp/mc-42-0 failed 2 times"):
        gateway.job_logs(job=bound, namespace=NAMESPACE, replica=0, tail_lines=5)


def test_a_missing_permission_names_the_rbac_file(cluster, gateway, bound) -> None:
    cluster.fail("GET", r"/pods/mc-42-0/log$", 403)
    with pytest.raises(GatewayError, match=r"deploy/rbac\.yaml") as raised:
        gateway.job_logs(job=bound, namespace=NAMESPACE, replica=0, tail_lines=5)
    assert not isinstance(raised.value, GatewayRetryable)
