"""A whole scheduling cycle (scheduler.loop.cycle.cycle_run) driving the Kubernetes gateway against the emulator:
GPU-Operator-labelled nodes → a submitted gang ends up bound pod by pod with the right resource names; a spot
taint → drain and eviction within the notice → requeue onto other capacity, resumed."""

from __future__ import annotations

import time

import pytest

from jobs.models import Job
from jobs.services import job_submit
from scheduler.gateways import gateway_override
from scheduler.gateways.kube.gateway import KubeGateway
from scheduler.loop.apply import Retry
from scheduler.loop.cycle import cycle_run
from scheduler.models import Node
from scheduler.services.fleet import gpu_models_sync
from scheduler.services.sync import cluster_sync
from scheduler.tasks import interruptions_handle_task
from tests.scheduler.kube_emulator import H100_ONE_LEAF as H100
from tests.scheduler.kube_emulator import cluster_fixture, iso
from tests.scheduler.loop_helpers import Clock, team_seed

pytestmark = pytest.mark.django_db
cluster = pytest.fixture(cluster_fixture)
NO_WAIT = Retry(attempts=3, backoff_s=0.0, sleep=lambda _s: None)


def test_a_submitted_gang_is_bound_pod_by_pod_then_requeued_when_its_node_goes(cluster) -> None:
    cluster.add_node(
        "p5-od-1", {**H100, "karpenter.sh/capacity-type": "on-demand"}, allocatable={"nvidia.com/gpu": "8"}
    )
    gateway = KubeGateway(cluster.new_api_client(), consistent_reads=True, namespace_create=True, sleep=lambda _s: None)
    gpu_models_sync()
    cluster_sync(observation=gateway.observe())
    team = team_seed()
    clock = Clock()
    job = job_submit(
        team=team,
        spec={"kind": "training", "gpus": 4, "replicas": 2, "image": "ghcr.io/acme/train:1", "duration_s": 3600},
        actor=None,
        now=clock.now,
    )

    report = cycle_run(gateway=gateway, retry=NO_WAIT)

    assert report.applied == [f"bind {job.pk}"], report.failed
    pods = sorted(cluster.pods(team.namespace), key=lambda p: p["metadata"]["name"])
    assert [p["metadata"]["name"] for p in pods] == [f"mc-{job.pk}-0", f"mc-{job.pk}-1"]
    assert {p["spec"]["nodeName"] for p in pods} == {"p5-od-1"}
    assert {p["spec"]["schedulerName"] for p in pods} == {"microcosm"}
    host = ("cpu", "memory")  # host resources: tests/scheduler/gateways/kube/test_kube_pod_resources.py
    limits = [p["spec"]["containers"][0]["resources"]["limits"] for p in pods]
    assert [{k: v for k, v in lim.items() if k not in host} for lim in limits] == [{"nvidia.com/gpu": "4"}] * 2
    binds = [path for _m, path in cluster.requests("POST", "/binding$")]
    assert binds == [f"/api/v1/namespaces/{team.namespace}/pods/mc-{job.pk}-{r}/binding" for r in range(2)]
    job.refresh_from_db()
    assert job.state == "running"

    cluster.clear_log()
    cycle_run(gateway=gateway, retry=NO_WAIT)  # nothing new: the bound gang is left alone
    assert cluster.requests("POST") == []

    cluster.delete_node("p5-od-1")
    cycle_run(gateway=gateway, retry=NO_WAIT)

    job.refresh_from_db()
    assert job.state == "pending"  # lost with its node: back in the queue
    assert Job.objects.get(pk=job.pk).state == "pending"


def test_a_spot_taint_drains_the_node_and_its_job_resumes_on_other_capacity(cluster, settings, tmp_path) -> None:
    """Spot notice (aws-node-termination-handler's taint) → no new work there; the interruption task runs a cycle
    that marks the job draining and deletes its pod with a grace inside the notice (SIGTERM: checkpoint now) →
    once the pod is gone the job is requeued whole (spot-reclaim) → it binds on the on-demand node ahead of newer
    work of its team and resumes from its checkpoint directory."""
    settings.SCHEDULER = {**settings.SCHEDULER, "lock_backend": "file"}  # the task's cycle takes the lock
    settings.SCHEDULER_LOCK_FILE = tmp_path / "scheduler.lock"
    cluster.add_node("p5-spot-1", {**H100, "karpenter.sh/capacity-type": "spot"}, allocatable={"nvidia.com/gpu": "8"})
    gateway = KubeGateway(cluster.new_api_client(), consistent_reads=True, namespace_create=True, sleep=lambda _s: None)
    gpu_models_sync()
    cluster_sync(observation=gateway.observe())
    team = team_seed(guaranteed=16, burst=16)
    clock = Clock()
    spec = {
        "kind": "training",
        "gpus": 8,
        "tier": "spot-ok",
        "image": "ghcr.io/acme/train:1",
        "duration_s": 36_000,
        "checkpoint_interval_s": 600,
    }
    job = job_submit(team=team, spec=spec, actor=None, now=clock.now)
    assert cycle_run(gateway=gateway, retry=NO_WAIT).applied == [f"bind {job.pk}"]
    (pod,) = cluster.pods(team.namespace)
    assert pod["spec"]["nodeName"] == "p5-spot-1"
    cluster.set_pod_phase(team.namespace, pod["metadata"]["name"], "Running")

    # The interruption notice: AWS Node Termination Handler taints the node (docs/gpu-facts.md, Spot and preemption
    # signals).
    noticed_at = time.time()
    taint = {"key": "aws-node-termination-handler/spot-itn", "value": "true", "effect": "NoSchedule"}
    cluster.patch_node("p5-spot-1", {"spec": {"taints": [{**taint, "timeAdded": iso(noticed_at)}]}})
    (node,) = gateway.observe().nodes
    assert node.interruption is not None and node.interruption.source == "spot-itn" and not node.schedulable
    assert node.interruption.deadline_at == pytest.approx(noticed_at + 120, abs=1)
    with gateway_override(gateway):
        result = interruptions_handle_task.run()
    assert [d["job"] for d in result["draining"]] == [str(job.pk)]
    assert result["cycle"]["repairs"]["drained"] == [str(job.pk)]
    assert f"evict {job.pk} (spot-reclaim)" in result["cycle"]["applied"]
    assert f"mc-{job.pk}-0" not in {p["metadata"]["name"] for p in cluster.pods(team.namespace)}
    draining = job.events.get(type="draining")
    # 2 minutes of notice leave room for the loop's whole 30 s grace.
    assert draining.details["node"] == "p5-spot-1" and draining.details["grace_s"] == 30.0
    assert Node.objects.get(name="p5-spot-1").state == "draining"
    job.refresh_from_db()
    assert job.state == "running"  # until its pods are gone: a checkpoint it reports meanwhile counts for this run

    # Replacement capacity joins, and newer work of the team with it; the drained job's pod is gone.
    cluster.add_node(
        "p5-od-1", {**H100, "karpenter.sh/capacity-type": "on-demand"}, allocatable={"nvidia.com/gpu": "8"}
    )
    cluster_sync(observation=gateway.observe())
    other = job_submit(team=team, spec=spec, actor=None, now=clock.now)
    report = cycle_run(gateway=gateway, retry=NO_WAIT)

    assert report.repairs["requeued"] == [str(job.pk)] and report.repairs["lost"] == []
    assert report.applied == [f"bind {job.pk}"]  # at the head of its priority: ahead of the newer job
    job.refresh_from_db()
    assert job.state == "running" and Job.objects.get(pk=other.pk).state == "pending"
    assert list(job.events.values_list("type", flat=True)) == [
        "submitted",
        "bound",
        "draining",
        "preempted",
        "requeued",
        "bound",
    ]
    assert job.events.get(type="preempted").details == {"reason": "spot-reclaim", "by": None}
    assert set(job.allocations.exclude(ended_at=None).values_list("end_reason", flat=True)) == {"spot-reclaim"}
    (pod,) = [p for p in cluster.pods(team.namespace) if p["metadata"]["name"] == f"mc-{job.pk}-0"]
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert pod["spec"]["nodeName"] == "p5-od-1" and env["CHECKPOINT_DIR"] != ""
    # No checkpoint was reported: the run resumes, from no step (RESUME_FROM is the bind request's business).
    bound = job.events.filter(type="bound").order_by("id").last()
    assert bound.details["resumed"] is True and bound.details["resumed_from_step"] is None
    assert bound.details["nodes"] == ["p5-od-1"]
