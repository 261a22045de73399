"""A move on Kubernetes, with the unmodified official client over HTTP against kmock's emulator: the next
generation's pods are created beside the running ones, named and labelled with their generation, bound to the new
node with the new devices as a bind binds them; readiness is the pod's Ready condition as the kubelet writes it;
a release deletes the old generation's pods within their grace, an abandon the new ones."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client

from jobs.models import Allocation
from jobs.services import job_submit
from scheduler.core import Slot
from scheduler.errors import GatewayConflict, GatewayRetryable
from scheduler.gateways.kube.gateway import KubeGateway
from scheduler.gateways.protocol import BindRequest, ClusterGateway, Device, ReplicaPhase, ReplicaPlacement
from scheduler.loop.apply import Retry
from scheduler.loop.cycle import cycle_run
from scheduler.services.fleet import gpu_models_sync
from scheduler.services.sync import cluster_sync
from tests.scheduler.kube_emulator import H100_ONE_LEAF, cluster_fixture
from tests.scheduler.loop_helpers import plan_with_move, team_seed

cluster = pytest.fixture(cluster_fixture)

NAMESPACE = "team-nlp"
H100 = {
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.memory": "81559",
    "nvidia.com/mig.capable": "true",
    "nvidia.com/mig.strategy": "mixed",
}
# One GPU partitioned 1g.10gb ×2, 2g.20gb, 3g.40gb by the GPU Operator (the "all-balanced" config).
MIG_NODE = {
    **H100,
    "nvidia.com/gpu.count": "1",
    "nvidia.com/mig.config": "all-balanced",
    "nvidia.com/mig.config.state": "success",
    "nvidia.com/mig-1g.10gb.count": "2",
    "nvidia.com/mig-2g.20gb.count": "1",
    "nvidia.com/mig-3g.40gb.count": "1",
}
# What the kubelet's status manager writes once every container is ready (kubernetes pkg/kubelet/status/
# generate.go GeneratePodReadyCondition): the Ready condition True.
READY = [{"type": "ContainersReady", "status": "True"}, {"type": "Ready", "status": "True"}]
NOT_READY = [
    {"type": "ContainersReady", "status": "False", "reason": "ContainersNotReady"},
    {"type": "Ready", "status": "False", "reason": "ContainersNotReady"},
]


@pytest.fixture
def gateway(cluster) -> KubeGateway:
    gateway = KubeGateway(
        cluster.new_api_client(),
        consistent_reads=True,
        namespace_create=True,
        clock=lambda: 1_800_000_000.0,
        sleep=lambda _s: None,
        request_timeout_s=1.0,
    )
    cluster.add_node("gpu-a", H100, allocatable={"nvidia.com/gpu": "8"})
    cluster.add_node("mig-1", MIG_NODE)
    gateway.namespace_ensure(namespace=NAMESPACE, team="nlp")
    return gateway


def _request(*placements: ReplicaPlacement) -> BindRequest:
    return BindRequest(job="42", namespace=NAMESPACE, name="llama-serve", placements=placements, image="acme/vllm:1")


def _slice(gateway: KubeGateway) -> Device:
    layout = {n.name: n for n in gateway.observe().nodes}["mig-1"].mig[0]
    return Device(0, "3g.40gb", dict(layout)["3g.40gb"])


def _running(gateway: KubeGateway) -> KubeGateway:
    """Job 42 serving one replica on a whole GPU of gpu-a, its pod running and ready."""
    gateway.job_bind(request=_request(ReplicaPlacement(0, "gpu-a", (Device(0),))))
    return gateway


def _pods(cluster) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in cluster.pods(NAMESPACE) if not p["metadata"].get("deletionTimestamp")}


def _events(cluster) -> list[dict[str, Any]]:
    found = client.EventsV1Api(cluster.api_client).list_namespaced_event(NAMESPACE)
    return [cluster.api_client.sanitize_for_serialization(e) for e in found.items]


def test_it_is_a_cluster_gateway_that_moves(gateway) -> None:
    assert isinstance(gateway, ClusterGateway)


def test_a_move_starts_the_next_generation_beside_the_running_pods(cluster, gateway) -> None:
    _running(gateway)
    cluster.set_pod_phase(NAMESPACE, "mc-42-0", "Running", conditions=READY)
    device = _slice(gateway)

    gateway.job_move(request=_request(ReplicaPlacement(0, "mig-1", (device,))), generation=1)

    pods = _pods(cluster)
    assert sorted(pods) == ["mc-42-0", "mc-42-g1-0"]
    new = pods["mc-42-g1-0"]
    assert new["spec"]["nodeName"] == "mig-1" and pods["mc-42-0"]["spec"]["nodeName"] == "gpu-a"
    assert new["metadata"]["labels"]["microcosm.io/generation"] == "1"
    assert new["metadata"]["labels"]["microcosm.io/replica"] == "0"
    assert new["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/mig-3g.40gb"] == "1"
    assert "nvidia.com/gpu" not in new["spec"]["containers"][0]["resources"]["limits"]
    assert json.loads(new["metadata"]["annotations"]["microcosm.io/devices"]) == [[0, "3g.40gb", device.mig_start]]
    assert "microcosm.io/generation" not in pods["mc-42-0"]["metadata"]["labels"]  # a bind's: generation 0
    scheduled = [e["note"] for e in _events(cluster) if e["reason"] == "Scheduled"]
    assert f"Successfully assigned {NAMESPACE}/mc-42-g1-0 to mig-1" in scheduled

    replicas = gateway.observe().jobs["42"].replicas
    assert [(r.generation, r.replica, r.phase, r.node, r.ready) for r in replicas] == [
        (0, 0, ReplicaPhase.RUNNING, "gpu-a", True),
        (1, 0, ReplicaPhase.BOUND, "mig-1", False),
    ]


def test_a_new_pod_is_ready_only_when_the_kubelet_says_so(cluster, gateway) -> None:
    _running(gateway)
    gateway.job_move(request=_request(ReplicaPlacement(0, "mig-1", (_slice(gateway),))), generation=1)

    cluster.set_pod_phase(NAMESPACE, "mc-42-g1-0", "Running", conditions=NOT_READY)  # loading its weights
    new = gateway.observe().jobs["42"].replicas[-1]
    assert (new.phase, new.ready) == (ReplicaPhase.RUNNING, False)

    cluster.set_pod_phase(NAMESPACE, "mc-42-g1-0", "Running", conditions=READY)
    assert gateway.observe().jobs["42"].replicas[-1].ready


def test_moving_again_changes_nothing(cluster, gateway) -> None:
    _running(gateway)
    request = _request(ReplicaPlacement(0, "mig-1", (_slice(gateway),)))
    gateway.job_move(request=request, generation=1)
    cluster.clear_log()

    gateway.job_move(request=request, generation=1)

    assert [m for m, _p in cluster.requests()] == ["GET"]  # one look at the job's pods, nothing written
    assert sorted(_pods(cluster)) == ["mc-42-0", "mc-42-g1-0"]


def test_a_move_onto_a_device_the_old_pods_hold_is_refused(cluster, gateway) -> None:
    _running(gateway)
    cluster.clear_log()

    with pytest.raises(GatewayConflict, match="held by another job"):
        gateway.job_move(request=_request(ReplicaPlacement(0, "gpu-a", (Device(0),))), generation=1)

    assert sorted(_pods(cluster)) == ["mc-42-0"] and not cluster.requests("POST")


def test_a_failed_move_undoes_only_its_own_pods(cluster, gateway) -> None:
    gateway.job_bind(
        request=_request(ReplicaPlacement(0, "gpu-a", (Device(0),)), ReplicaPlacement(1, "gpu-a", (Device(1),)))
    )
    cluster.fail("POST", r"/pods/mc-42-g1-1/binding$", 503, times=4)  # every attempt

    with pytest.raises(GatewayRetryable):
        gateway.job_move(
            request=_request(ReplicaPlacement(0, "gpu-a", (Device(2),)), ReplicaPlacement(1, "gpu-a", (Device(3),))),
            generation=1,
        )

    assert sorted(_pods(cluster)) == ["mc-42-0", "mc-42-1"]  # the old gang serves on, whole


def test_a_release_deletes_the_old_generation_within_its_grace_and_keeps_the_new(cluster, gateway) -> None:
    _running(gateway)
    gateway.job_move(request=_request(ReplicaPlacement(0, "mig-1", (_slice(gateway),))), generation=1)
    cluster.clear_log()

    gateway.job_release(job="42", namespace=NAMESPACE, generation=1, grace_s=45.0)
    gateway.job_release(job="42", namespace=NAMESPACE, generation=1, grace_s=45.0)  # idempotent

    assert sorted(_pods(cluster)) == ["mc-42-g1-0"]
    deletes = [(p, q) for m, p, q in cluster.handler.log if m == "DELETE"]
    # One delete, of the old pod; 45 s is no deadline shorter than its own 30 s: its own grace applies.
    assert deletes == [(f"/api/v1/namespaces/{NAMESPACE}/pods/mc-42-0", "")]
    (moved,) = [e for e in _events(cluster) if e["reason"] == "Moved"]
    assert moved["regarding"]["name"] == "mc-42-0" and "right-sized" in moved["note"]
    assert [(r.generation, r.node) for r in gateway.observe().jobs["42"].replicas] == [(1, "mig-1")]


def test_an_abandoned_move_deletes_the_new_generation_and_keeps_the_old(cluster, gateway) -> None:
    _running(gateway)
    gateway.job_move(request=_request(ReplicaPlacement(0, "mig-1", (_slice(gateway),))), generation=1)

    gateway.job_move_abandon(job="42", namespace=NAMESPACE, generation=1, grace_s=30.0)

    assert sorted(_pods(cluster)) == ["mc-42-0"]
    assert any(e["reason"] == "MoveAbandoned" and e["regarding"]["name"] == "mc-42-g1-0" for e in _events(cluster))


def test_a_bind_is_refused_while_a_moves_pods_still_run(cluster, gateway) -> None:
    _running(gateway)
    gateway.job_move(request=_request(ReplicaPlacement(0, "mig-1", (_slice(gateway),))), generation=1)
    gateway.job_release(job="42", namespace=NAMESPACE, generation=1, grace_s=30.0)

    with pytest.raises(GatewayConflict, match="of a move still runs"):
        gateway.job_bind(request=_request(ReplicaPlacement(0, "gpu-a", (Device(5),))))


def test_the_log_of_a_moved_replica_is_its_new_pods(cluster, gateway) -> None:
    _running(gateway)
    gateway.job_move(request=_request(ReplicaPlacement(0, "mig-1", (_slice(gateway),))), generation=1)
    gateway.job_release(job="42", namespace=NAMESPACE, generation=1, grace_s=30.0)
    cluster.seed_log(NAMESPACE, "mc-42-g1-0", "serving on 3g.40gb\n")

    log = gateway.job_logs(job="42", namespace=NAMESPACE, replica=0, tail_lines=10)

    assert log.text == "serving on 3g.40gb\n"


# -- the loop driving a move on the emulator -------------------------------------------------------------------


@pytest.mark.django_db
def test_the_loop_carries_a_move_through_on_the_emulator(cluster) -> None:
    """What a platform team sees: the job's pod serves on while ``mc-<job>-g1-0`` is bound to the MIG slice; once
    the kubelet marks the new pod Ready, the next cycle deletes the old one (a Moved Event) and the job runs on
    the slice."""
    no_wait = Retry(attempts=3, backoff_s=0.0, sleep=lambda _s: None)
    cluster.add_node("p5-od-1", {**H100_ONE_LEAF, "karpenter.sh/capacity-type": "reserved"})
    cluster.add_node("mig-od-1", {**MIG_NODE, "karpenter.sh/capacity-type": "reserved"})
    gateway = KubeGateway(cluster.new_api_client(), consistent_reads=True, namespace_create=True, sleep=lambda _s: None)
    gpu_models_sync()
    cluster_sync(observation=gateway.observe())
    team = team_seed()
    spec = {"kind": "inference", "gpus": 1, "gpu_model": "H100-SXM5-80GB", "image": "acme/vllm:1"}
    job = job_submit(team=team, spec=spec, actor=None)
    assert cycle_run(gateway=gateway, retry=no_wait).applied == [f"bind {job.pk}"]
    ns, old, new = team.namespace, f"mc-{job.pk}-0", f"mc-{job.pk}-g1-0"
    cluster.set_pod_phase(ns, old, "Running", conditions=READY)
    start = dict({n.name: n for n in gateway.observe().nodes}["mig-od-1"].mig[0])["3g.40gb"]
    slice_ = ((Slot(node="mig-od-1", gpu=0, mig_profile="3g.40gb", mig_start=start),),)

    with plan_with_move(job, slice_):
        report = cycle_run(gateway=gateway, retry=no_wait)

    assert report.applied == [f"move {job.pk} (generation 1)"], report.failed
    pods = {p["metadata"]["name"]: p for p in cluster.pods(ns)}
    assert sorted(pods) == [old, new] and pods[new]["spec"]["nodeName"] == "mig-od-1"
    cluster.set_pod_phase(ns, new, "Running", conditions=NOT_READY)
    assert cycle_run(gateway=gateway, retry=no_wait).repairs["moving"] == [str(job.pk)]
    assert sorted(p["metadata"]["name"] for p in cluster.pods(ns)) == [old, new]  # the old one serves meanwhile

    cluster.set_pod_phase(ns, new, "Running", conditions=READY)
    report = cycle_run(gateway=gateway, retry=no_wait)

    assert report.repairs["moved"] == [str(job.pk)]
    assert report.applied == [f"release {job.pk} (older than generation 1)"]
    assert [p["metadata"]["name"] for p in cluster.pods(ns)] == [new]
    assert [e["regarding"]["name"] for e in _events(cluster) if e["reason"] == "Moved"] == [old]
    live = Allocation.objects.get(job=job, ended_at__isnull=True)
    assert (live.node.name, live.mig_profile, live.generation) == ("mig-od-1", "3g.40gb", 1)
    cluster.clear_log()
    assert not cycle_run(gateway=gateway, retry=no_wait).applied and not cluster.requests("POST")
