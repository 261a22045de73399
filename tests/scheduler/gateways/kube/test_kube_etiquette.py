"""Cluster etiquette: bindings name the pod's UID, nothing running is forced out, evictions keep the victim's own
grace unless a deadline is shorter, and the cluster records what Microcosm did (Events), best effort."""

from __future__ import annotations

import uuid
from typing import Any

import kmock
import pytest
from kubernetes import client

from scheduler.core.model.vocabulary import BlockerKind
from scheduler.errors import GatewayRetryable
from scheduler.gateways.kube.events import FINISH_S, WAITING_INTERVAL_S
from scheduler.gateways.kube.gateway import KubeGateway
from scheduler.gateways.protocol import (
    BindRequest,
    Device,
    JobWaiting,
    RecordingGateway,
    ReplicaPlacement,
)
from tests.scheduler.kube_emulator import PODS, cluster_fixture
from tests.scheduler.kube_harness.graceful_delete import GracefulDelete

cluster = pytest.fixture(cluster_fixture)

H100 = {
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.memory": "81559",
    "nvidia.com/mig.capable": "true",
}


@pytest.fixture
def gateway(cluster, clock) -> KubeGateway:
    gateway = KubeGateway(
        cluster.new_api_client(), namespace_create=True, clock=clock, sleep=lambda _s: None, request_timeout_s=2.0
    )
    cluster.add_node("gpu-a", H100)
    gateway.namespace_ensure(namespace="team-nlp", team="nlp")
    return gateway


@pytest.fixture
def deletes(cluster) -> GracefulDelete:
    graceful = GracefulDelete()
    cluster.handler.interceptors.append(graceful)
    return graceful


def _gang(job: str = "42", replicas: int = 3, first_gpu: int = 0) -> BindRequest:
    return BindRequest(
        job=job,
        namespace="team-nlp",
        name="llama-finetune",
        placements=tuple(ReplicaPlacement(r, "gpu-a", (Device(first_gpu + r),)) for r in range(replicas)),
        image="ghcr.io/acme/train:1",
    )


def _events(cluster, namespace: str = "team-nlp") -> list[dict[str, Any]]:
    found = client.EventsV1Api(cluster.api_client).list_namespaced_event(namespace)
    return [cluster.api_client.sanitize_for_serialization(e) for e in found.items]


def test_it_records_on_the_cluster(gateway) -> None:
    assert isinstance(gateway, RecordingGateway)


# -- the Binding names the pod's UID ----------------------------------------------------------------------------


def test_a_pod_recreated_under_the_same_name_is_never_bound_by_a_stale_call(cluster, gateway) -> None:
    bound: list[tuple[str, str, str]] = []
    cluster.handler.bind_hooks.append(lambda ns, pod, node: bound.append((ns, pod, node)))

    async def recreate_before_binding(emulator, raw) -> None:
        # Between our create and our bind, somebody deletes mc-42-0 and creates another pod under its name.
        if raw.method == "POST" and raw.path.endswith("/pods/mc-42-0/binding"):
            stored = emulator.objects[(kmock.resource(PODS), "team-nlp", "mc-42-0")]
            if not stored.get("metadata", {}).get("annotations", {}).get("recreated"):
                again = dict(stored.raw)
                again["metadata"] = {**again["metadata"], "uid": str(uuid.uuid4()), "annotations": {"recreated": "1"}}
                stored.delete()
                stored.create(again)
        return None

    cluster.handler.interceptors.append(recreate_before_binding)

    with pytest.raises(GatewayRetryable, match="was replaced"):
        gateway.job_bind(request=_gang(replicas=1))

    assert bound == []  # the other pod was never bound by our stale Binding


def test_the_binding_carries_the_uid_the_create_returned(cluster, gateway) -> None:
    gateway.job_bind(request=_gang(replicas=1))

    (pod,) = cluster.pods("team-nlp")
    assert pod["metadata"]["uid"] and pod["spec"]["nodeName"] == "gpu-a"
    # The emulator refuses a Binding whose UID is not the pod's, in the API server's words.
    body = client.V1Binding(
        metadata=client.V1ObjectMeta(name="mc-42-0", namespace="team-nlp", uid="not-it"),
        target=client.V1ObjectReference(kind="Node", name="gpu-a"),
    )
    with pytest.raises(client.ApiException) as refused:
        cluster.core.create_namespaced_pod_binding("mc-42-0", "team-nlp", body)
    assert refused.value.status == 409
    assert "Precondition failed: UID in precondition: not-it, UID in object meta: " in (refused.value.body or "")


# -- no force deletes of running pods ---------------------------------------------------------------------------


def test_undoing_a_gang_never_forces_a_bound_pod(cluster, gateway, deletes) -> None:
    cluster.fail("POST", r"/pods/mc-42-2/binding$", 409)  # the last replica was taken by someone else

    with pytest.raises(Exception, match="mc-42-2"):
        gateway.job_bind(request=_gang())

    # Replicas 0 and 1 were bound (they may be running): their own grace. Replica 2 never was: at once.
    assert [(d.name, d.sent, d.grace) for d in deletes.deletions] == [
        ("mc-42-0", None, 30),
        ("mc-42-1", None, 30),
        ("mc-42-2", 0, 0),
    ]


def test_an_eviction_keeps_the_pods_own_grace_unless_a_deadline_is_shorter(cluster, gateway, deletes) -> None:
    gateway.job_bind(request=_gang(replicas=1))
    gateway.job_bind(request=_gang("43", replicas=1, first_gpu=4))

    # The loop's grace is longer than the pod's own (a setting changed since): the pod's own applies.
    gateway.job_evict(job="42", namespace="team-nlp", grace_s=45.5, reason="priority")
    # A spot notice leaves 10 s: that deadline wins.
    gateway.job_evict(job="43", namespace="team-nlp", grace_s=9.2, reason="spot-reclaim")

    assert [(d.name, d.sent, d.grace) for d in deletes.deletions] == [("mc-42-0", None, 30), ("mc-43-0", 10, 10)]


def test_finished_pods_go_at_once(cluster, gateway, deletes) -> None:
    gateway.job_bind(request=_gang(replicas=1))
    cluster.set_pod_phase("team-nlp", "mc-42-0", "Succeeded")
    # The eviction reads the job's pods from the cache: read back at once, the kubelet's report must be in it.
    gateway.client.consistent_reads = True

    gateway.job_evict(job="42", namespace="team-nlp", grace_s=30, reason="completed")

    assert [(d.name, d.sent, d.grace) for d in deletes.deletions] == [("mc-42-0", 0, 0)]


def test_other_owners_pods_are_evicted_with_their_own_grace(cluster, gateway, deletes) -> None:
    cluster.add_pod("ml-infra", "notebook", node="gpu-a", resources={"nvidia.com/gpu": "1"})
    (pod,) = cluster.pods("ml-infra")

    gateway.client.pod_evict(pod, grace_s=300)  # no deadline shorter than its own: no override
    cluster.add_pod("ml-infra", "notebook", node="gpu-a", resources={"nvidia.com/gpu": "1"})
    (pod,) = cluster.pods("ml-infra")
    gateway.client.pod_evict(pod, grace_s=5)  # a deadline: at most 5 s

    assert [(d.evicted, d.sent, d.grace) for d in deletes.deletions] == [(True, None, 30), (True, 5, 5)]


# -- Events --------------------------------------------------------------------------------------------------


def test_a_bind_records_scheduled_on_each_pod(cluster, gateway) -> None:
    gateway.job_bind(request=_gang(replicas=2))

    uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in cluster.pods("team-nlp")}
    events = sorted(_events(cluster), key=lambda e: e["regarding"]["name"])
    assert [(e["reason"], e["action"], e["type"], e["note"]) for e in events] == [
        ("Scheduled", "Binding", "Normal", f"Successfully assigned team-nlp/mc-42-{r} to gpu-a") for r in range(2)
    ]
    for event in events:
        assert event["reportingController"] == "microcosm"
        assert event["reportingInstance"].startswith("microcosm-")
        assert event["regarding"]["kind"] == "Pod"
        assert event["regarding"]["uid"] == uids[event["regarding"]["name"]]


def test_an_eviction_records_the_preemptor_or_the_reason(cluster, gateway) -> None:
    gateway.job_bind(request=_gang("42", replicas=1))
    gateway.job_bind(request=_gang("43", replicas=1, first_gpu=4))

    gateway.job_preempt(job="42", namespace="team-nlp", grace_s=30, reason="priority", by="7")
    gateway.job_evict(job="43", namespace="team-nlp", grace_s=10, reason="spot-reclaim")

    stops = {e["regarding"]["name"]: e for e in _events(cluster) if e["reason"] != "Scheduled"}
    assert (stops["mc-42-0"]["reason"], stops["mc-42-0"]["action"]) == ("Preempted", "Preempting")
    assert stops["mc-42-0"]["note"] == "Preempted by job 7 on node gpu-a"
    assert stops["mc-43-0"]["reason"] == "SpotInterruption"
    assert stops["mc-43-0"]["note"] == "Stopped on node gpu-a for the node's spot interruption notice"


def test_a_failure_to_record_never_fails_the_bind_or_eviction(cluster, gateway) -> None:
    cluster.fail("POST", r"/apis/events\.k8s\.io/v1/namespaces/[^/]+/events", 403, times=100)

    gateway.job_bind(request=_gang(replicas=2))
    gateway.job_evict(job="42", namespace="team-nlp", grace_s=30, reason="priority")

    assert _events(cluster) == []
    assert cluster.pods("team-nlp") == []


def test_a_waiting_job_is_recorded_when_its_explanation_changes_not_every_cycle(cluster, gateway, clock) -> None:
    def wait(kind: str, ahead: int) -> list[JobWaiting]:
        reason = f"waiting for 8 GPUs; {kind}; {ahead} jobs ahead"
        return [JobWaiting(job="42", namespace="team-nlp", reason=reason, kind=kind)]

    gateway.jobs_waiting(waiting=wait("capacity", 3))
    clock.now += 10
    gateway.jobs_waiting(waiting=wait("capacity", 2))  # the same explanation, one place further: nothing new
    clock.now += 10
    gateway.jobs_waiting(waiting=wait("quota", 2))  # changed, but within the interval: not yet

    (event,) = _events(cluster)
    assert event["regarding"] == {"apiVersion": "v1", "kind": "Pod", "namespace": "team-nlp", "name": "mc-42-0"}
    assert (event["reason"], event["note"]) == ("Waiting", "waiting for 8 GPUs; capacity; 3 jobs ahead")
    assert event.get("series") is None

    clock.now += WAITING_INTERVAL_S
    gateway.jobs_waiting(waiting=wait("quota", 1))  # the change is written once the interval has passed

    (event,) = _events(cluster)  # one Event, its series counting the repeat, showing the latest explanation
    assert event["series"]["count"] == 2
    assert event["note"] == "waiting for 8 GPUs; quota; 1 jobs ahead"

    clock.now += FINISH_S + WAITING_INTERVAL_S
    gateway.jobs_waiting(waiting=wait("capacity", 0))  # a series quiet for long has ended: a new Event
    assert len(_events(cluster)) == 2


def test_waiting_events_are_rate_limited_per_call(cluster, gateway) -> None:
    waiting = [
        JobWaiting(job=str(j), namespace="team-nlp", reason="waiting", kind=BlockerKind.CAPACITY) for j in range(5)
    ]

    gateway.jobs_waiting(waiting=waiting, limit=3)
    assert len(_events(cluster)) == 3
    gateway.jobs_waiting(waiting=waiting, limit=3)  # the rest, on a later call
    assert len(_events(cluster)) == 5


# -- a whole cycle ---------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_cycle_records_the_bind_and_why_the_next_job_waits(cluster) -> None:
    from jobs.services import job_submit
    from scheduler.loop.apply import Retry
    from scheduler.loop.cycle import cycle_run
    from scheduler.services.fleet import gpu_models_sync
    from scheduler.services.sync import cluster_sync
    from tests.scheduler.kube_emulator import H100_ONE_LEAF
    from tests.scheduler.loop_helpers import Clock, team_seed

    cluster.add_node(
        "p5-1", {**H100_ONE_LEAF, "karpenter.sh/capacity-type": "on-demand"}, allocatable={"nvidia.com/gpu": "8"}
    )
    gateway = KubeGateway(cluster.new_api_client(), namespace_create=True, sleep=lambda _s: None)
    gpu_models_sync()
    cluster_sync(observation=gateway.observe())
    team, clock = team_seed(), Clock()
    spec = {"kind": "training", "gpus": 8, "image": "ghcr.io/acme/train:1", "duration_s": 3600}
    first = job_submit(team=team, spec=spec, actor=None, now=clock.now)
    second = job_submit(team=team, spec=spec, actor=None, now=clock.now)
    no_wait = Retry(attempts=1, sleep=lambda _s: None)

    cycle_run(gateway=gateway, retry=no_wait)
    cycle_run(gateway=gateway, retry=no_wait)  # the same explanation again: nothing new recorded

    events = {(e["regarding"]["name"], e["reason"]): e for e in _events(cluster, team.namespace)}
    assert sorted(events) == [(f"mc-{first.pk}-0", "Scheduled"), (f"mc-{second.pk}-0", "Waiting")]
    second.refresh_from_db()
    assert events[(f"mc-{second.pk}-0", "Waiting")]["note"] == second.state_reason
    assert events[(f"mc-{second.pk}-0", "Waiting")].get("series") is None
