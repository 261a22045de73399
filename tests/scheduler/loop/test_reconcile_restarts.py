"""Reconciliation of a failed replica spends the job's restart budget (jobs.services.restarts): the whole job
(every replica of a gang) is requeued and its pods evicted while the budget lasts, then the job fails with the
pod's message; a lost replica or node is an infrastructure loss and never counts."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.models import Allocation, Job, JobEvent
from scheduler.gateways.protocol import JobObservation, NodeObservation, Observation, ReplicaObservation, ReplicaPhase
from scheduler.loop.apply import EvictOp
from scheduler.loop.reconcile import reconcile
from tests.portal.fleet import fleet, running_job

pytestmark = pytest.mark.django_db

OOM = "container main exited with code 137 OOMKilled"


@pytest.fixture
def node(db):
    return fleet()


def _gang(team, node, **fields: object) -> Job:  # type: ignore[no-untyped-def]
    job = running_job(team, node, name="gang", **fields)
    job.replicas = 2
    job.save(update_fields=["replicas"])
    Allocation.objects.create(
        job=job, replica=1, node=node, gpu_index=2, tier=node.tier, price_per_gpu_hour="2.1", started_at=job.started_at
    )
    return job


def _seen(job: Job, node, *phases: tuple[ReplicaPhase, str]) -> Observation:  # type: ignore[no-untyped-def]
    replicas = tuple(
        ReplicaObservation(replica=i, phase=phase, node=node.name, message=message)
        for i, (phase, message) in enumerate(phases)
    )
    return Observation(
        observed_at=timezone.now().timestamp(),
        nodes=(
            NodeObservation(
                name=node.name, gpu_model="A100-SXM4-80GB", gpu_count=8, interconnect="nvswitch", tier="reserved"
            ),
        ),
        jobs={str(job.pk): JobObservation(job=str(job.pk), namespace="team-nlp", replicas=replicas)},
    )


def test_a_failed_replica_restarts_the_whole_gang_within_the_budget(team, node) -> None:
    job = _gang(team, node)
    at = timezone.now()
    repairs = reconcile(_seen(job, node, (ReplicaPhase.RUNNING, ""), (ReplicaPhase.FAILED, OOM)), at=at)
    job.refresh_from_db()
    assert repairs.restarted == [str(job.pk)] and repairs.failed == [] and repairs.lost == []
    assert repairs.ops == [EvictOp(job=str(job.pk), namespace="team-nlp", reason="app-failure")]
    assert repairs.as_json()["restarted"] == [str(job.pk)]
    assert (job.state, job.restarts, job.last_exit_reason) == ("pending", 1, OOM)
    assert not Allocation.objects.filter(job=job, ended_at__isnull=True).exists()  # both replicas' GPUs freed
    requeued = JobEvent.objects.get(job=job, type="requeued")
    assert requeued.details["exit_reason"] == OOM and requeued.details["message"] == "restart 1 of 3"


def test_the_failure_after_the_last_restart_fails_the_job_with_the_exit_reason(team, node) -> None:
    job = _gang(team, node, restart_limit=3, restarts=3)
    at = timezone.now()
    repairs = reconcile(_seen(job, node, (ReplicaPhase.FAILED, OOM), (ReplicaPhase.RUNNING, "")), at=at)
    job.refresh_from_db()
    assert repairs.failed == [str(job.pk)] and repairs.restarted == []
    assert repairs.ops == [EvictOp(job=str(job.pk), namespace="team-nlp", reason="failed")]
    assert job.state == "failed" and job.restarts == 3
    assert job.state_reason == f"{OOM}; restart budget of 3 spent"


def test_lost_replicas_and_nodes_requeue_without_counting(team, node) -> None:
    job = _gang(team, node, restart_limit=1)
    repairs = reconcile(
        _seen(job, node, (ReplicaPhase.RUNNING, ""), (ReplicaPhase.GONE, "node gone")), at=timezone.now()
    )
    job.refresh_from_db()
    assert repairs.lost == [str(job.pk)] and repairs.restarted == []
    assert (job.state, job.restarts, job.last_exit_reason) == ("pending", 0, "")


def test_a_failure_without_a_message_is_still_named(team, node) -> None:
    job = running_job(team, node, name="quiet")
    reconcile(_seen(job, node, (ReplicaPhase.FAILED, "")), at=timezone.now() + timedelta(seconds=1))
    job.refresh_from_db()
    assert job.last_exit_reason == "a replica failed" and job.state == "pending"
