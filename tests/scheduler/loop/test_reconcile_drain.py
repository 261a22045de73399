"""Reconciliation of drained jobs and reported checkpoints, one case at a time, on observations written by hand
(scheduler.loop.reconcile, scheduler.loop.notice): what the database says against what the cluster shows."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from jobs.models import Job, JobEvent
from jobs.selectors.jobs import resuming_jobs
from jobs.services import job_submit
from scheduler.gateways.protocol import (
    Interruption,
    JobObservation,
    Observation,
    ReplicaObservation,
    ReplicaPhase,
)
from scheduler.loop.apply import BindOp, EvictOp
from scheduler.loop.cycle import cycle_run
from scheduler.loop.notice import MIN_GRACE_S, NOTICE_MARGIN_S, notice_grace_s
from scheduler.loop.reconcile import reconcile
from tests.scheduler.loop_helpers import Clock, fleet, fleet_seed, team_seed

pytestmark = pytest.mark.django_db

SPOT = {"kind": "training", "gpus": 2, "gpu_model": "A100-PCIE-40GB", "tier": "spot-ok", "duration_s": 100_000}


@pytest.mark.parametrize(
    ("deadline_in_s", "evict_grace_s", "expected"),
    [
        (120.0, 30.0, 30.0),  # AWS's 2 minutes: the usual grace fits
        (30.0, 30.0, 30.0 - NOTICE_MARGIN_S),  # GKE's 30 s: cut to end before the node goes
        (2.0, 30.0, MIN_GRACE_S),  # nearly over: still a few seconds to try
        (None, 30.0, 30.0),  # no deadline known
        (None, 0.0, MIN_GRACE_S),
    ],
)
def test_the_grace_fits_inside_the_notice(deadline_in_s, evict_grace_s, expected) -> None:
    deadline = None if deadline_in_s is None else 1000.0 + deadline_in_s
    assert notice_grace_s(deadline_at=deadline, now=1000.0, evict_grace_s=evict_grace_s) == expected


@pytest.fixture
def running(db, clock):
    """A 2-replica gang running on the spot server, bound by a real cycle."""
    fleet_seed()
    team = team_seed()
    job = job_submit(team=team, spec={**SPOT, "gpus": 1, "replicas": 2}, actor=None, now=clock.now)
    cycle_run(gateway=fleet(clock))
    job.refresh_from_db()
    assert job.state == "running"
    return job


def _view(clock: Clock, job: Job | None, *phases: ReplicaPhase, notice: bool = True, **observed) -> Observation:
    """The fleet as it is, with ``job``'s replicas in ``phases`` (none: no pods) and, unless told otherwise, a
    notice on the spot server that ends in 2 minutes."""
    base = fleet(clock).observe()
    nodes = tuple(
        replace(
            n, interruption=Interruption(noticed_at=base.observed_at, deadline_at=base.observed_at + 120, source="t")
        )
        if notice and n.name == "pcie-spot-1"
        else n
        for n in base.nodes
    )
    jobs = dict(base.jobs)
    if job is not None:
        jobs.pop(str(job.pk), None)
        if phases:
            replicas = tuple(
                ReplicaObservation(replica=i, phase=phase, node="pcie-spot-1") for i, phase in enumerate(phases)
            )
            jobs[str(job.pk)] = JobObservation(job=str(job.pk), namespace="team-nlp", replicas=replicas, **observed)
    return Observation(observed_at=base.observed_at, nodes=nodes, jobs=jobs, clock_speed=base.clock_speed)


def _at(observation: Observation) -> datetime:
    return datetime.fromtimestamp(observation.observed_at, tz=UTC)


def test_a_running_job_on_a_noticed_node_is_drained_once_and_evicted_with_the_fitted_grace(running, clock):
    view = _view(clock, running, ReplicaPhase.RUNNING, ReplicaPhase.RUNNING)
    repairs = reconcile(view, at=_at(view), evict_grace_s=20.0)
    assert repairs.drained == [str(running.pk)]
    assert repairs.ops == [EvictOp(job=str(running.pk), namespace="team-nlp", reason="spot-reclaim", grace_s=20.0)]
    again = reconcile(view, at=_at(view), evict_grace_s=20.0)  # the eviction did not apply: asked again
    assert again.drained == [str(running.pk)] and len(again.ops) == 1
    assert running.events.filter(type="draining").count() == 1


def test_a_drained_job_whose_replicas_are_stopping_is_waited_for(running, clock):
    reconcile(_view(clock, running, ReplicaPhase.RUNNING, ReplicaPhase.RUNNING), at=clock.now)
    clock.advance(1)
    view = _view(clock, running, ReplicaPhase.STOPPING, ReplicaPhase.STOPPING)
    repairs = reconcile(view, at=_at(view))
    assert repairs.stopping == [str(running.pk)] and repairs.ops == [] and repairs.requeued == []
    running.refresh_from_db()
    assert running.state == "running"


def test_a_drained_job_still_stopping_after_the_deadline_and_its_grace_is_requeued(running, clock):
    reconcile(_view(clock, running, ReplicaPhase.RUNNING, ReplicaPhase.RUNNING), at=clock.now)
    clock.advance(120 + 30 + 1)  # the notice's deadline plus the 30 s grace
    view = _view(clock, running, ReplicaPhase.STOPPING, ReplicaPhase.GONE, notice=False)
    repairs = reconcile(view, at=_at(view))
    assert repairs.requeued == [str(running.pk)]
    assert repairs.ops == [EvictOp(job=str(running.pk), namespace="team-nlp", reason="spot-reclaim")]  # clean up
    running.refresh_from_db()
    assert running.state == "pending"


def test_a_drained_job_with_a_failed_replica_is_requeued_not_failed(running, clock):
    """A process that exits with an error on the notice's SIGTERM was stopped by the infrastructure."""
    reconcile(_view(clock, running, ReplicaPhase.RUNNING, ReplicaPhase.RUNNING), at=clock.now)
    view = _view(clock, running, ReplicaPhase.FAILED, ReplicaPhase.GONE)
    repairs = reconcile(view, at=_at(view))
    assert repairs.requeued == [str(running.pk)] and repairs.failed == []


@pytest.mark.parametrize("drained", [True, False])
def test_a_running_job_without_pods_is_requeued_if_drained_and_bound_again_if_not(running, clock, drained):
    if drained:
        reconcile(_view(clock, running, ReplicaPhase.RUNNING, ReplicaPhase.RUNNING), at=clock.now)
    view = _view(clock, running, notice=drained)  # no pods at all
    repairs = reconcile(view, at=_at(view))
    running.refresh_from_db()
    if drained:
        assert repairs.requeued == [str(running.pk)] and repairs.rebound == []
        assert running.state == "pending"
        assert running.events.get(type="preempted").details == {"reason": "spot-reclaim", "by": None}
    else:  # the crash between record and apply: the same bind again
        assert repairs.rebound == [str(running.pk)] and repairs.requeued == []
        assert [type(op) for op in repairs.ops] == [BindOp] and running.state == "running"


def test_a_draining_event_of_an_earlier_run_does_not_drain_the_next_one(running, clock):
    reconcile(_view(clock, running, ReplicaPhase.RUNNING, ReplicaPhase.RUNNING), at=clock.now)
    view = _view(clock, running)  # drained and gone: requeued
    assert reconcile(view, at=_at(view)).requeued == [str(running.pk)]
    # The notice is over (a replacement, or a withdrawn notice): the job binds on the spot server again, and its
    # new run is not drained by the old notice's event, recorded at the same instant as the bind.
    cycle_run(gateway=fleet(clock))
    running.refresh_from_db()
    assert running.state == "running"
    view = _view(clock, running, ReplicaPhase.RUNNING, ReplicaPhase.RUNNING, notice=False)
    repairs = reconcile(view, at=_at(view))
    assert repairs.drained == repairs.stopping == repairs.requeued == repairs.rebound == []


def test_a_pending_job_whose_pods_are_stopping_is_left_to_stop(running, clock):
    Job.objects.filter(pk=running.pk).update(state="pending")
    view = _view(clock, running, ReplicaPhase.STOPPING, ReplicaPhase.STOPPING, notice=False)
    assert reconcile(view, at=_at(view)).ops == []
    view = _view(clock, running, ReplicaPhase.STOPPING, ReplicaPhase.RUNNING, notice=False)
    assert [op.reason for op in reconcile(view, at=_at(view)).ops] == ["requeued"]


def test_a_checkpoint_with_a_step_is_recorded_through_checkpoint_record_once(running, clock):
    saved_at = clock.now + timedelta(seconds=10)
    clock.advance(20)
    observed = {
        "last_checkpoint_at": saved_at.timestamp(),
        "last_checkpoint_step": 600,
        "last_checkpoint_path": "/checkpoints/nlp/job-1/step-000000600.ckpt",
    }
    view = _view(clock, running, ReplicaPhase.RUNNING, ReplicaPhase.RUNNING, notice=False, **observed)
    assert reconcile(view, at=_at(view), checkpoint_source="manifest").checkpointed == [str(running.pk)]
    assert reconcile(view, at=_at(view), checkpoint_source="manifest").checkpointed == []
    event = running.events.get(type="checkpointed")
    assert event.at == saved_at
    assert event.details["step"] == 600 and event.details["source"] == "manifest"
    assert event.details["path"] == observed["last_checkpoint_path"]


def test_a_checkpoint_without_a_step_is_an_event_without_one(running, clock):
    saved_at = clock.now + timedelta(seconds=10)
    clock.advance(20)
    view = _view(clock, running, ReplicaPhase.RUNNING, notice=False, last_checkpoint_at=saved_at.timestamp())
    assert reconcile(view, at=_at(view)).checkpointed == [str(running.pk)]
    assert running.events.get(type="checkpointed").details == {}


def test_a_checkpoint_the_job_reported_itself_is_not_recorded_again(running, clock):
    from jobs.services import CheckpointReport, checkpoint_record

    saved_at = clock.now + timedelta(seconds=10)
    checkpoint_record(job=running, report=CheckpointReport(step=600, saved_at=saved_at), now=saved_at)
    clock.advance(20)
    observed = {"last_checkpoint_at": saved_at.timestamp() - 0.5, "last_checkpoint_step": 600}  # the manifest's
    view = _view(clock, running, ReplicaPhase.RUNNING, notice=False, **observed)
    assert reconcile(view, at=_at(view)).checkpointed == []
    assert running.events.filter(type="checkpointed").count() == 1


def test_the_snapshot_marks_jobs_whose_latest_requeue_was_an_infrastructure_loss(running, clock):
    others = [job_submit(team=running.team, spec=SPOT, actor=None, now=clock.now) for _ in range(3)]
    for job, reasons in zip(
        [running, *others], [["priority", "spot-reclaim"], ["node-lost"], ["spot-reclaim", "priority"], []], strict=True
    ):
        for reason in reasons:
            clock.advance(1)
            JobEvent.objects.create(job=job, type="preempted", at=clock.now, details={"reason": reason, "by": None})
    assert resuming_jobs([running.pk, *(j.pk for j in others)]) == {running.pk, others[0].pk}
