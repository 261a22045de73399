"""Reconcile reads each kind of row once and writes each kind of record in one batch
(scheduler.loop.reconcile): its number of queries does not grow with the number of running jobs reporting a
checkpoint, nor with the number of binds it applies again."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.models import Allocation, Job, JobEvent
from scheduler.gateways.protocol import JobObservation, NodeObservation, Observation, ReplicaObservation, ReplicaPhase
from scheduler.loop import reconcile as reconcile_module
from scheduler.loop.apply import BindOp, MoveOp
from scheduler.loop.reconcile import reconcile
from tests.factories import GpuModelFactory, NodeFactory, TeamFactory
from tests.portal.fleet import running_job

pytestmark = pytest.mark.django_db

NOW = timezone.now().replace(microsecond=0)
STEP_RECORDED = 100
# Reconcile's savepoint and its release, the running jobs, their allocations, their last checkpoints, the
# drains (nodes noticed, draining events: no bound events to read when none drains), the nodes held, and the events
# without a step (one insert); checkpoints with steps: their service's savepoint, lock, recorded steps, insert and
# release instead.
QUERIES = {False: 9, True: 13}  # by whether the checkpoints have steps
# The jobs that are not quiet (scheduler.loop.reconcile, _quiet), however many: their rows and their allocations as
# model instances, which the services and the operations take. A quiet job costs none (every job above is quiet).
RESTLESS = 2


def _running(count: int) -> list[Job]:
    """``count`` running jobs, each on its own GPU of as many 8-GPU nodes as that takes, each with a checkpoint
    (step 100) recorded an hour ago."""
    team = TeamFactory(slug="busy")
    model = GpuModelFactory(name="A100-SXM4-80GB", gpu_class="A100", memory_mib=81920, mig_capable=True)
    nodes = [NodeFactory(name=f"n-{i:03d}", gpu_model=model) for i in range(-(-count // 8))]
    jobs = [running_job(team, nodes[i // 8], name=f"r-{i}", gpu_index=i % 8) for i in range(count)]
    at = NOW - timedelta(hours=1)
    JobEvent.objects.bulk_create(
        JobEvent(job=job, type="checkpointed", at=at, details={"step": STEP_RECORDED}) for job in jobs
    )
    return jobs


def _view(jobs: Sequence[Job], step: int | None, *, seen: Sequence[Job] | None = None) -> Observation:
    """The cluster with every job of ``seen`` (default: all of them) running, each reporting a checkpoint a minute
    ago at ``step`` (None: a backend that knows only the time)."""
    nodes = sorted({a.node.name for a in Allocation.objects.select_related("node")})
    return Observation(
        observed_at=NOW.timestamp(),
        nodes=tuple(
            NodeObservation(name=n, gpu_model="A100-SXM4-80GB", gpu_count=8, interconnect="nvswitch", tier="reserved")
            for n in nodes
        ),
        jobs={
            str(job.pk): JobObservation(
                job=str(job.pk),
                namespace="ns-busy",
                replicas=(ReplicaObservation(replica=0, phase=ReplicaPhase.RUNNING, node=nodes[0], ready=True),),
                last_checkpoint_at=(NOW - timedelta(minutes=1)).timestamp(),
                last_checkpoint_step=step,
            )
            for job in (jobs if seen is None else seen)
        },
    )


# SQLite takes at most 999 parameters a statement, so Django inserts at most 199 events at once there
# (django.db.backends.sqlite3.operations.bulk_batch_size): the counts below stay under that.
@pytest.mark.parametrize("count", [5, 150])
@pytest.mark.parametrize("step", [600, None])
def test_the_queries_do_not_grow_with_the_jobs_reporting_checkpoints(count, step, django_assert_num_queries) -> None:
    jobs = _running(count)
    view = _view(jobs, step)
    with django_assert_num_queries(QUERIES[step is not None]):
        repairs = reconcile(view, at=NOW)
    assert repairs.checkpointed == [str(job.pk) for job in jobs]
    assert repairs.rebound == [] and repairs.ops == []
    assert JobEvent.objects.filter(type="checkpointed").count() == 2 * count


@pytest.mark.parametrize("count", [2, 6])
def test_binds_applied_again_read_the_requeued_jobs_once(count, django_assert_num_queries, monkeypatch) -> None:
    jobs = _running(count)
    requeued = jobs[::2]
    JobEvent.objects.bulk_create(JobEvent(job=job, type="requeued", at=NOW - timedelta(hours=3)) for job in requeued)
    resumed: dict[str, bool] = {}

    def start_op(job: Job, allocations: Sequence[Allocation], *, resume: bool) -> BindOp | MoveOp:
        resumed[str(job.pk)] = resume
        return BindOp(request=None, team=job.team.slug)  # type: ignore[arg-type]  # only the resume flag is read

    monkeypatch.setattr(reconcile_module, "start_op", start_op)
    # No pods for any of them (the crash between record and apply): every bind is applied again. Nothing reports a
    # checkpoint (no read of the last ones, no insert); the requeued jobs are read once for all of them, and so are
    # the jobs that are not quiet, as model instances with their allocations (RESTLESS).
    view = _view(jobs, None, seen=[])
    with django_assert_num_queries(QUERIES[False] - 2 + 1 + RESTLESS):
        repairs = reconcile(view, at=NOW)
    assert repairs.rebound == [str(job.pk) for job in jobs]
    assert resumed == {str(job.pk): job in requeued for job in jobs}
