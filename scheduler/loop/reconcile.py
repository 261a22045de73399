"""Make the database and the cluster agree before planning (DESIGN.md §1: "a crash between any two steps
leaves the database and the cluster reconcilable by the next cycle").

Decisions are recorded before they are applied, so the database is the intent and the observation the fact.
For each job, comparing the two gives one of:

========================================  ======================================================
database says / cluster shows             repair
========================================  ======================================================
running / reports a checkpoint later than record a ``checkpointed`` event at the checkpoint's time
the last one recorded                     (first, so a loss recorded below starts from it)
running / every replica succeeded         record ``completed``; clean up its pods
running / a replica failed                an application failure: restart the whole job while its
                                          restart budget lasts, else record ``failed`` with the
                                          pod's message (jobs.services.restarts); clean up
running / a replica gone, or a node       requeue (``node-lost``): its work since the last
of its allocations no longer reported     checkpoint is lost; clean up what is left
running / no pods, or fewer than its      the bind was recorded but never (fully) applied:
replicas, its nodes all present           apply it again (idempotent)
pending, ended, or unknown / pods         an eviction, cancel or clean-up was recorded but not
                                          applied: evict the pods
========================================  ======================================================

The ``checkpointed`` events feed the ledger's lost-work rule (docs/billing.md: the work lost to a preemption is
counted from the job's last checkpoint). They are recorded only when the cluster reports a checkpoint strictly
later than the job's last recorded one and no later than the observation, so re-running a cycle on the same
view records nothing twice.

Nothing here binds twice: a re-applied bind uses the job's own live allocations, which the database's
constraints keep exclusive.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.db import transaction
from django.db.models import Max

from jobs.models import Allocation, Job, JobEvent
from jobs.services import job_fail_or_restart, job_finish, job_requeue
from scheduler.core.vocabulary import EventType, EvictionReason, JobState
from scheduler.gateways.protocol import Observation, ReplicaPhase
from scheduler.loop.apply import BindOp, EvictOp, Op, bind_request


@dataclass
class Repairs:
    ops: list[Op] = field(default_factory=list)
    completed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    rebound: list[str] = field(default_factory=list)
    cleaned: list[str] = field(default_factory=list)
    checkpointed: list[str] = field(default_factory=list)
    restarted: list[str] = field(default_factory=list)  # application failures within the restart budget

    def as_json(self) -> dict[str, list[str]]:
        return {
            "checkpointed": self.checkpointed,
            "completed": self.completed,
            "failed": self.failed,
            "lost": self.lost,
            "rebound": self.rebound,
            "cleaned": self.cleaned,
            "restarted": self.restarted,
        }


def reconcile(observation: Observation, *, at: datetime) -> Repairs:
    """Record what the cluster did since the last cycle and list the operations that bring it in line.

    One transaction; the returned ``ops`` are applied by the caller after it commits.
    """
    repairs = Repairs()
    present = {node.name for node in observation.nodes}
    with transaction.atomic():
        running = {
            str(job.pk): job
            for job in Job.objects.select_for_update().filter(state=JobState.RUNNING).select_related("team")
        }
        allocations: dict[int, list[Allocation]] = {}
        for allocation in Allocation.objects.filter(job__state=JobState.RUNNING, ended_at__isnull=True).select_related(
            "node"
        ):
            allocations.setdefault(allocation.job_id, []).append(allocation)
        _checkpoints_record(running, observation, at, repairs)
        for _job_id, job in sorted(running.items(), key=lambda item: int(item[0])):
            _running_job(job, allocations.get(job.pk, []), observation, present, repairs, at)
        others = [job_id for job_id in observation.jobs if job_id not in running]
        states = dict(Job.objects.filter(pk__in=[int(j) for j in others if j.isdigit()]).values_list("pk", "state"))
        for job_id in sorted(others):
            observed = observation.jobs[job_id]
            state = states.get(int(job_id)) if job_id.isdigit() else None
            reason = (
                "completed"
                if state == JobState.COMPLETED
                else "cancelled"
                if state == JobState.CANCELLED
                else (
                    "failed"
                    if state in (JobState.FAILED, JobState.REJECTED)
                    else "requeued"
                    if state
                    else "unknown-job"
                )
            )
            repairs.ops.append(EvictOp(job=job_id, namespace=observed.namespace, reason=reason))
            repairs.cleaned.append(job_id)
    return repairs


def _checkpoints_record(running: dict[str, Job], observation: Observation, at: datetime, repairs: Repairs) -> None:
    """A ``checkpointed`` event for every running job whose reported checkpoint advanced (module doc)."""
    reported: dict[int, datetime] = {}
    for job_id, job in running.items():
        observed = observation.jobs.get(job_id)
        if observed is None or observed.last_checkpoint_at is None:
            continue
        checkpoint_at = datetime.fromtimestamp(observed.last_checkpoint_at, tz=UTC)
        if checkpoint_at <= at:  # a checkpoint "from the future" is a clock problem, not a checkpoint
            reported[job.pk] = checkpoint_at
    if not reported:
        return
    recorded = dict(
        JobEvent.objects.filter(job_id__in=reported, type=EventType.CHECKPOINTED)
        .values("job_id")
        .annotate(last=Max("at"))
        .values_list("job_id", "last")
    )
    new = []
    for job_pk, checkpoint_at in sorted(reported.items()):
        last = recorded.get(job_pk)
        if last is None or checkpoint_at > last:
            new.append(JobEvent(job_id=job_pk, type=EventType.CHECKPOINTED, at=checkpoint_at, details={}))
            repairs.checkpointed.append(str(job_pk))
    JobEvent.objects.bulk_create(new)


def _running_job(
    job: Job, allocations: list[Allocation], observation: Observation, present: set[str], repairs: Repairs, at: datetime
) -> None:
    job_id = str(job.pk)
    observed = observation.jobs.get(job_id)
    phases = observed.phases() if observed is not None else frozenset()
    lost_nodes = sorted({a.node.name for a in allocations} - present)
    if (
        observed is not None
        and phases
        and phases <= {ReplicaPhase.SUCCEEDED}
        and len(observed.replicas) >= job.replicas
    ):
        job_finish(job=job, state=JobState.COMPLETED, at=at)
        repairs.completed.append(job_id)
        repairs.ops.append(EvictOp(job=job_id, namespace=observed.namespace, reason="completed"))
        return
    if ReplicaPhase.FAILED in phases:
        # An application failure (a non-zero exit, an OOM kill): the restart budget decides between a restart
        # of the whole job and failing it. Either way its pods go; a restart binds new ones from the queue.
        assert observed is not None
        message = next((r.message for r in observed.replicas if r.phase == ReplicaPhase.FAILED and r.message), "")
        outcome = job_fail_or_restart(job=job, exit_reason=message, at=at)
        (repairs.restarted if outcome.restarted else repairs.failed).append(job_id)
        reason = EvictionReason.APP_FAILURE if outcome.restarted else EvictionReason.FAILED
        repairs.ops.append(EvictOp(job=job_id, namespace=observed.namespace, reason=reason))
        return
    if ReplicaPhase.GONE in phases or lost_nodes or not allocations:
        message = f"node {', '.join(lost_nodes)} is gone" if lost_nodes else ""
        if observed is not None:
            gone = [r for r in observed.replicas if r.phase == ReplicaPhase.GONE]
            message = message or (gone[0].message if gone else "")
            repairs.ops.append(EvictOp(job=job_id, namespace=observed.namespace, reason=EvictionReason.NODE_LOST))
        job_requeue(job=job, reason=EvictionReason.NODE_LOST, by=None, at=at, message=message)
        repairs.lost.append(job_id)
        return
    if observed is None or len(observed.replicas) < job.replicas:
        # Recorded, not (fully) applied: the crash-between-record-and-apply case. Apply the same bind again.
        resumed = job.events.filter(type=EventType.REQUEUED).exists()
        repairs.ops.append(BindOp(request=bind_request(job, allocations, resume=resumed), team=job.team.slug))
        repairs.rebound.append(job_id)
