"""A job that has lived a long time: many runs, each bound, checkpointed a few times and preempted by a spot
reclaim, then requeued and resumed; its live run on ``node``. The job page tests and the layout checks fold its
history."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from django.utils import timezone

from jobs.models import Allocation, Job, JobEvent
from scheduler.models import Node
from teams.models import Team
from tests.portal.fleet import running_job

CHECKPOINTS_PER_RUN = 3


def long_job(team: Team, node: Node, *, runs: int, name: str = "long-pretrain", gpu_index: int = 1) -> Job:
    """A running job whose ``runs`` earlier runs each left a bound, checkpoints, preempted and requeued event
    and an ended allocation; ``running_job``'s submitted and bound events and live allocation come last."""
    now = timezone.now()
    first = now - timedelta(hours=runs + 1)
    job = running_job(team, node, name=name, gpu_index=gpu_index, started_at=now - timedelta(minutes=30))
    Job.objects.filter(pk=job.pk).update(submitted_at=first, checkpoint_interval_s=600)
    JobEvent.objects.filter(job=job, type="submitted").delete()
    events = [JobEvent(job=job, type="submitted", at=first)]
    allocations = []
    step = 0
    for run in range(runs):
        start = first + timedelta(hours=run, minutes=1)
        resumed = {"resumed": True, "resumed_from_step": step} if run else {}
        events.append(JobEvent(job=job, type="bound", at=start, details={"nodes": [node.name], **resumed}))
        for c in range(CHECKPOINTS_PER_RUN):
            step += 100
            at = start + timedelta(minutes=10 * (c + 1))
            events.append(JobEvent(job=job, type="checkpointed", at=at, details={"step": step, "path": f"ckpt/{step}"}))
        end = start + timedelta(minutes=50)
        events.append(JobEvent(job=job, type="preempted", at=end, details={"reason": "spot-reclaim"}))
        events.append(JobEvent(job=job, type="requeued", at=end + timedelta(seconds=1)))
        allocations.append(
            Allocation(
                job=job,
                replica=0,
                node=node,
                gpu_index=gpu_index,
                tier=node.tier,
                price_per_gpu_hour=Decimal("2.1000"),
                started_at=start,
                ended_at=end,
                end_reason="spot-reclaim",
            )
        )
    JobEvent.objects.bulk_create(events)
    Allocation.objects.bulk_create(allocations)
    job.refresh_from_db()
    return job
