"""A spot interruption of a checkpointed 2-replica gang, end to end on the Kubernetes API emulator (the official client
over HTTP): the gang reports a checkpoint through its own credential (refused for any other job), its spot node
gets a notice, both pods are asked to stop with a grace inside the notice, the checkpoint saved on that SIGTERM is
recorded while they stop, the job is requeued whole and bound on another node whose pods carry the checkpoint
volume and RESUME_FROM, and the ledger's lost work equals the time since the last report
(docs/checkpointing.md, Spot notices, requeue and resume)."""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any
from urllib.parse import parse_qs

import pytest
from rest_framework.test import APIClient

from billing.models import LostWork
from billing.services import ledger_close_due
from jobs.credentials import job_token
from jobs.models import Job
from jobs.services import job_cancel, job_submit
from scheduler.gateways.kube.gateway import KubeGateway
from scheduler.loop.apply import Retry
from scheduler.loop.cycle import cycle_run
from scheduler.services.fleet import gpu_models_sync
from scheduler.services.sync import cluster_sync
from tests.scheduler.kube_emulator import H100_ONE_LEAF as H100
from tests.scheduler.kube_emulator import KUBELET_FINALIZER, MERGE_PATCH, Cluster, cluster_fixture, iso
from tests.scheduler.loop_helpers import Clock, team_seed

pytestmark = pytest.mark.django_db
cluster = pytest.fixture(cluster_fixture)
NO_WAIT = Retry(attempts=3, backoff_s=0.0, sleep=lambda _s: None)
GANG = {
    "kind": "training",
    "gpus": 4,
    "replicas": 2,
    "tier": "spot-ok",
    "image": "ghcr.io/acme/train:1",
    "duration_s": 36_000,
    "checkpoint_interval_s": 600,
}


def _report(job: Job, *, step: int, saved_at: datetime, credential: str | None = None) -> Any:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {credential or job_token(job.pk)}")
    body = {
        "step": step,
        "saved_at": saved_at.isoformat(),
        "size_bytes": 4096,
        "duration_s": 2.5,
        "path": f"/checkpoints/job-{job.pk}/step-{step:09d}.ckpt",
        "replica": 0,
    }
    return client.post(f"/api/v1/jobs/{job.pk}/checkpoints/", body, format="json")


def _env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0]["env"]}


def _rendezvous(pod: dict[str, Any]) -> tuple[str, str, dict[str, str]]:
    names = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "NNODES", "NODE_RANK", "NPROC_PER_NODE")
    return pod["spec"]["hostname"], pod["spec"]["subdomain"], {name: _env(pod)[name] for name in names}


def _kubelet_holds(cluster: Cluster, namespace: str, name: str) -> None:
    """The kubelet's part: a deleted pod stays (terminating) until its process has stopped."""
    cluster.core.patch_namespaced_pod(
        name, namespace, {"metadata": {"finalizers": [KUBELET_FINALIZER]}}, _content_type=MERGE_PATCH
    )


def test_a_spot_interruption_of_a_checkpointed_gang_resumes_it_elsewhere_and_bills_the_lost_work(
    cluster, settings
) -> None:
    # The loop's usual grace is longer than AWS's notice, so the notice has to cut it.
    settings.SCHEDULER = {**settings.SCHEDULER, "evict_grace_s": 300.0}
    cluster.add_node("p5-spot-1", {**H100, "karpenter.sh/capacity-type": "spot"}, allocatable={"nvidia.com/gpu": "8"})
    # The pods' own grace is the loop's, as gateway_from_settings makes it: the notice's deadline is shorter.
    gateway = KubeGateway(
        cluster.new_api_client(),
        consistent_reads=True,
        namespace_create=True,
        sleep=lambda _s: None,
        eviction_grace_s=300,
    )
    gpu_models_sync()
    cluster_sync(observation=gateway.observe())
    team = team_seed(guaranteed=16, burst=16)
    clock = Clock(datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=30))
    other = job_submit(team=team, spec=GANG, actor=None, now=clock.now)
    job_cancel(job=other, actor=None)  # another job of the team, only for its id: its credential is not the gang's
    job = job_submit(team=team, spec=GANG, actor=None, now=clock.now)

    # The gang starts on the spot node, both replicas there.
    assert cycle_run(gateway=gateway, retry=NO_WAIT).applied == [f"bind {job.pk}"]
    names = [f"mc-{job.pk}-0", f"mc-{job.pk}-1"]
    rendezvous = {p["metadata"]["name"]: _rendezvous(p) for p in cluster.pods(team.namespace)}
    assert rendezvous[names[1]][2]["MASTER_ADDR"] == f"mc-{job.pk}-0.mc-{job.pk}.{team.namespace}.svc"
    for name in names:
        cluster.set_pod_phase(team.namespace, name, "Running")
        _kubelet_holds(cluster, team.namespace, name)

    # A periodic checkpoint, reported through the job's own credential: accepted for this job, refused (403)
    # when the same credential names any other job.
    periodic_at = datetime.now(UTC)
    assert _report(job, step=1200, saved_at=periodic_at).status_code == 201
    refused = APIClient()
    refused.credentials(HTTP_AUTHORIZATION=f"Bearer {job_token(job.pk)}")
    answer = refused.post(
        f"/api/v1/jobs/{other.pk}/checkpoints/", {"step": 1, "saved_at": periodic_at.isoformat()}, format="json"
    )
    assert answer.status_code == 403
    assert not other.events.filter(type="checkpointed").exists()

    # The notice: aws-node-termination-handler taints the node (docs/gpu-facts.md, Spot and preemption signals):
    # two minutes before it goes.
    noticed_at = time.time()
    taint = {"key": "aws-node-termination-handler/spot-itn", "value": "true", "effect": "NoSchedule"}
    cluster.patch_node("p5-spot-1", {"spec": {"taints": [{**taint, "timeAdded": iso(noticed_at)}]}})
    cluster.add_node(
        "p5-od-1", {**H100, "karpenter.sh/capacity-type": "on-demand"}, allocatable={"nvidia.com/gpu": "8"}
    )
    cluster_sync(observation=gateway.observe())
    cluster.clear_log()
    report = cycle_run(gateway=gateway, retry=NO_WAIT)

    # Both pods asked to stop (SIGTERM) with a grace that ends inside the notice; the job still runs while they stop.
    assert report.repairs["drained"] == [str(job.pk)]
    deletes = {path.rsplit("/", 1)[1]: query for method, path, query in cluster.handler.log if method == "DELETE"}
    assert sorted(deletes) == names
    graces = {int(parse_qs(query)["gracePeriodSeconds"][0]) for query in deletes.values()}
    (grace,) = graces
    draining = job.events.get(type="draining")
    assert draining.details["node"] == "p5-spot-1" and grace == math.ceil(draining.details["grace_s"])
    assert 100 < grace <= 115  # the notice's 120 s less the loop's margin, not the usual 300 s
    assert all(p["metadata"].get("deletionTimestamp") for p in cluster.pods(team.namespace))
    assert report.applied == [f"evict {job.pk} (spot-reclaim)"]
    job.refresh_from_db()
    assert job.state == "running"

    # Within the grace, the job saves on its SIGTERM and reports it; the loop waits for the stopping pods.
    final_at = datetime.now(UTC)
    assert _report(job, step=1260, saved_at=final_at).status_code == 201
    report = cycle_run(gateway=gateway, retry=NO_WAIT)
    assert report.repairs["stopping"] == [str(job.pk)]
    job.refresh_from_db()
    assert job.state == "running"

    # The pods have stopped: the gang is requeued whole and bound elsewhere, resuming from the last checkpoint.
    for name in names:
        cluster.release_pod(team.namespace, name)
    report = cycle_run(gateway=gateway, retry=NO_WAIT)
    assert report.repairs["requeued"] == [str(job.pk)] and report.applied == [f"bind {job.pk}"]
    job.refresh_from_db()
    assert job.state == "running"
    assert job.events.get(type="preempted").details == {"reason": "spot-reclaim", "by": None}
    pods = {p["metadata"]["name"]: p for p in cluster.pods(team.namespace) if p["metadata"]["name"] in names}
    assert sorted(pods) == names
    for pod in pods.values():
        env = _env(pod)
        assert pod["spec"]["nodeName"] == "p5-od-1"
        assert env["RESUME_FROM"] == f"/checkpoints/job-{job.pk}/step-000001260.ckpt"  # every replica: one step
        assert env["CHECKPOINT_DIR"] == f"/checkpoints/job-{job.pk}"
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        assert volumes["checkpoints"]["persistentVolumeClaim"]["claimName"] == "microcosm-checkpoints"
        mounts = {m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]}
        assert "/checkpoints" in mounts
    # The same rendezvous again, through the Service that stayed (docs/distributed-training.md).
    assert {name: _rendezvous(pod) for name, pod in pods.items()} == rendezvous
    assert set(cluster.services(team.namespace)) == {f"mc-{job.pk}"}
    resumed = job.events.filter(type="bound").order_by("id").last()
    assert resumed.details["resumed_from_step"] == 1260 and resumed.details["nodes"] == ["p5-od-1"]

    # The ledger: the spot run's lost work is the time from the last reported checkpoint to the requeue.
    ledger_close_due(now=datetime.now(UTC) + timedelta(minutes=5), settle_s=0)
    spot_runs = job.allocations.filter(node__name="p5-spot-1")
    lost = LostWork.objects.filter(job=job)
    assert lost.count() == spot_runs.count() == 8  # one per GPU the two replicas held there
    for row in lost:
        assert row.last_checkpoint_at == final_at
        assert float(row.lost_s) == pytest.approx((row.preempted_at - final_at).total_seconds(), abs=1e-6)
        assert row.reason == "spot-reclaim"


SINGLE = {"kind": "training", "gpus": 8, "tier": "spot-ok", "image": "ghcr.io/acme/train:1", "duration_s": 36_000}


@pytest.mark.parametrize(
    ("labels", "condition", "notice_s"),
    [
        # GKE: the kubelet's graceful node shutdown on a spot VM's preemption (Ready False, "node is shutting
        # down": kubernetes pkg/kubelet/nodestatus/setters.go); ordinary pods get 15 s of the VM's 30 (GKE docs).
        (
            {"cloud.google.com/gke-spot": "true"},
            {"type": "Ready", "status": "False", "reason": "KubeletNotReady", "message": "node is shutting down"},
            15.0,
        ),
        # AKS: the Node Problem Detector's PreemptionScheduled for an Azure Preempt event; its NotBefore (filled in
        # below, 30 s after the notice) is the deadline (Azure/karpenter-provider-azure reads it so).
        (
            {"kubernetes.azure.com/scalesetpriority": "spot"},
            {"type": "PreemptionScheduled", "status": "True", "reason": "SpotEvictionIncoming"},
            30.0,
        ),
    ],
    ids=["gke-graceful-shutdown", "aks-preempt"],
)
def test_a_gke_or_aks_notice_drains_the_node_with_a_grace_inside_its_budget(
    cluster, labels, condition, notice_s
) -> None:
    """The loop's usual 30 s grace is longer than either budget: the notice's deadline must cut it, so the job's
    SIGTERM save ends before the kubelet's own kill (or Azure's eviction)."""
    cluster.add_node("spot-1", {**H100, **labels}, allocatable={"nvidia.com/gpu": "8"})
    gateway = KubeGateway(cluster.new_api_client(), consistent_reads=True, namespace_create=True, sleep=lambda _s: None)
    gpu_models_sync()
    cluster_sync(observation=gateway.observe())
    team = team_seed(guaranteed=8, burst=8)
    job = job_submit(team=team, spec=SINGLE, actor=None, now=datetime.now(UTC))
    assert cycle_run(gateway=gateway, retry=NO_WAIT).applied == [f"bind {job.pk}"]
    name = f"mc-{job.pk}-0"
    cluster.set_pod_phase(team.namespace, name, "Running")
    _kubelet_holds(cluster, team.namespace, name)

    noticed_at = time.time()
    conditions = [{**condition, "lastTransitionTime": iso(noticed_at)}]
    if condition["type"] != "Ready":
        not_before = format_datetime(datetime.fromtimestamp(noticed_at + notice_s, UTC), usegmt=True)
        conditions[0]["message"] = f"Preempt Scheduled: {not_before}. EventId: A1B2C3D4-E5F6-4A7B-8C9D-0E1F2A3B4C5D"
        conditions.append({"type": "Ready", "status": "True", "reason": "KubeletReady"})
    cluster.patch_node("spot-1", {"status": {"conditions": conditions}})
    cluster_sync(observation=gateway.observe())
    cluster.clear_log()
    report = cycle_run(gateway=gateway, retry=NO_WAIT)

    assert report.repairs["drained"] == [str(job.pk)]
    (query,) = [query for method, path, query in cluster.handler.log if method == "DELETE" and path.endswith(name)]
    grace = int(parse_qs(query)["gracePeriodSeconds"][0])
    draining = job.events.get(type="draining")
    assert draining.details["source"] == ("node-shutdown" if condition["type"] == "Ready" else "azure-preempt")
    assert 3 <= grace <= notice_s - 5 + 1  # inside the budget less the loop's margin (rounded up), never 30
