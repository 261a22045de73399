"""The record step writes a cycle's binds set-based (:mod:`jobs.services.binds`): the same rows as one bind at a
time, in statements that do not grow with the binds, and nothing at all when any part fails. Runs on the
configured database (DATABASE_URL=postgres://… for PostgreSQL)."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from jobs.errors import JobStateError
from jobs.models import Allocation, Job, JobEvent
from jobs.services import job_bind_record_many
from scheduler.bridge.vocabulary import FENCE_NAME
from scheduler.core import Bind, Plan, Slot
from scheduler.core.model.vocabulary import EventType, JobState
from scheduler.gateways.protocol import Observation
from scheduler.loop import apply as apply_module
from scheduler.loop.apply import BindOp
from scheduler.loop.record import record_plan
from scheduler.models import Node, SchedulerFence
from teams.models import Team
from tests.scheduler.loop_helpers import fleet_seed, team_seed

pytestmark = pytest.mark.django_db

RESERVED, SPOT = "a100-res-1", "pcie-spot-1"  # 8 GPUs at 2.2295 an hour; 4 GPUs at 0.6650 (fleet_seed)


@pytest.fixture
def team(db) -> Team:
    fleet_seed()
    SchedulerFence.objects.create(name=FENCE_NAME, token=1)
    return team_seed()


@pytest.fixture
def at() -> datetime:
    return timezone.now().replace(microsecond=0)


def _jobs(team: Team, count: int, at: datetime, **fields: object) -> list[Job]:
    return [
        Job.objects.create(team=team, name=f"job-{i}", kind="training", gpus=1, submitted_at=at, **fields)
        for i in range(count)
    ]


def _one_gpu(job: Job, node: str, gpu: int) -> Bind:
    return Bind(job=str(job.pk), slots=((Slot(node=node, gpu=gpu),),))


def _record(plan: Plan, at: datetime, token: int = 2) -> tuple[list[BindOp], int]:
    """Record ``plan``; its bind operations and the statements the record sent."""
    with CaptureQueriesContext(connection) as queries:
        recorded = record_plan(
            plan, Observation(observed_at=at.timestamp(), nodes=(), jobs={}), at=at, fence_token=token
        )
    return [op for op in recorded.ops if isinstance(op, BindOp)], len(queries.captured_queries)


def _written() -> tuple[int, int, list[str]]:
    """What binds write: open allocations, ``bound`` events, the jobs' states."""
    return (
        Allocation.objects.count(),
        JobEvent.objects.filter(type=EventType.BOUND).count(),
        sorted(Job.objects.values_list("state", flat=True)),
    )


def test_each_bind_writes_the_rows_one_bind_did(team, at, monkeypatch) -> None:
    """Allocations at the node's tier and price, one per slot of each replica; the job running from the bind (or
    from its submission when that is later), its queue fields cleared; a ``bound`` event with its placements and,
    for a requeued job, the step it resumes from."""
    plain, later, gang, requeued = _jobs(team, 4, at, queue_position=3, team_queue_position=2, state_reason="waits")
    Job.objects.filter(pk=later.pk).update(submitted_at=at + timedelta(seconds=5))
    later.refresh_from_db()
    Job.objects.filter(pk=gang.pk).update(gpus=2, replicas=2)
    gang.refresh_from_db()
    Job.objects.filter(pk=requeued.pk).update(checkpoint_interval_s=600)
    requeued.refresh_from_db()
    JobEvent.objects.create(job=requeued, type=EventType.REQUEUED, at=at - timedelta(minutes=9))
    directory = f"/checkpoints/job-{requeued.pk}"
    for step in (100, 300):
        JobEvent.objects.create(
            job=requeued,
            type=EventType.CHECKPOINTED,
            at=at - timedelta(minutes=30 - step // 100),
            details={"step": step, "path": f"{directory}/step-{step:09d}.ckpt"},
        )
    gang_slots = (
        (Slot(node=RESERVED, gpu=2), Slot(node=RESERVED, gpu=3)),
        (Slot(node=SPOT, gpu=0), Slot(node=SPOT, gpu=1)),
    )
    plan = Plan(
        binds=(
            _one_gpu(plain, RESERVED, 0),
            _one_gpu(later, RESERVED, 1),
            Bind(job=str(gang.pk), slots=gang_slots),
            _one_gpu(requeued, SPOT, 2),
        )
    )

    def unread(job: Job) -> None:
        raise AssertionError(f"job {job.pk}'s newest checkpoint read again for its bind request")

    monkeypatch.setattr(apply_module, "checkpoint_latest", unread)
    ops, _ = _record(plan, at)

    assert [op.request.job for op in ops] == [str(j.pk) for j in (plain, later, gang, requeued)]
    rows = {
        (a.job_id, a.replica, a.node.name, a.gpu_index): (
            a.tier,
            a.price_per_gpu_hour,
            a.started_at,
            a.ended_at,
            a.generation,
        )
        for a in Allocation.objects.select_related("node")
    }
    reserved = ("reserved", Decimal("2.2295"), at, None, 0)
    spot = ("spot", Decimal("0.6650"), at, None, 0)
    assert rows == {
        (plain.pk, 0, RESERVED, 0): reserved,
        (later.pk, 0, RESERVED, 1): reserved,
        (gang.pk, 0, RESERVED, 2): reserved,
        (gang.pk, 0, RESERVED, 3): reserved,
        (gang.pk, 1, SPOT, 0): spot,
        (gang.pk, 1, SPOT, 1): spot,
        (requeued.pk, 0, SPOT, 2): spot,
    }
    jobs = {j.pk: j for j in Job.objects.all()}
    for job in (plain, later, gang, requeued):
        row = jobs[job.pk]
        assert (row.state, row.state_reason, row.queue_position, row.team_queue_position, row.eta_at) == (
            JobState.RUNNING,
            "",
            None,
            None,
            None,
        )
        assert row.started_at == (at + timedelta(seconds=5) if job == later else at)
    events = {e.job_id: e.details for e in JobEvent.objects.filter(type=EventType.BOUND)}
    assert events[gang.pk] == {
        "placements": [
            [{"node": RESERVED, "gpu": g, "mig_profile": None, "mig_start": None} for g in (2, 3)],
            [{"node": SPOT, "gpu": g, "mig_profile": None, "mig_start": None} for g in (0, 1)],
        ],
        "nodes": [RESERVED, SPOT],
    }
    assert events[requeued.pk] == {
        "placements": [[{"node": SPOT, "gpu": 2, "mig_profile": None, "mig_start": None}]],
        "nodes": [SPOT],
        "resumed": True,
        "resumed_from_step": 300,
    }
    assert "resumed" not in events[plain.pk]
    # The bind request resumes from the newest checkpoint the batch read, not read again per job.
    resume = {op.request.job: op.request.resume_from for op in ops}
    assert resume == {str(requeued.pk): f"{directory}/step-000000300.ckpt"} | {
        str(j.pk): "" for j in (plain, later, gang)
    }
    assert [op.request.placements[1].node for op in ops if op.request.job == str(gang.pk)] == [SPOT]


def test_the_statements_do_not_grow_with_the_binds(team, at) -> None:
    few, many = _jobs(team, 2, at), _jobs(team, 10, at)
    _, for_few = _record(Plan(binds=tuple(_one_gpu(job, RESERVED, i) for i, job in enumerate(few))), at)
    binds = [_one_gpu(job, RESERVED, 2 + i) for i, job in enumerate(many[:6])]
    binds += [_one_gpu(job, SPOT, i) for i, job in enumerate(many[6:])]
    _, for_many = _record(Plan(binds=tuple(binds)), at, token=3)

    assert for_many == for_few
    assert Allocation.objects.filter(ended_at__isnull=True).count() == 12


def test_a_double_booking_in_the_batch_writes_nothing(team, at) -> None:
    """The third bind's GPU is held already: the insert of every allocation fails, and with it the whole record —
    no allocation, no state, no event for the binds before it, the fence not raised."""
    holder, *jobs = _jobs(team, 4, at)
    Allocation.objects.create(
        job=holder,
        replica=0,
        node=Node.objects.get(name=RESERVED),
        gpu_index=2,
        tier="reserved",
        price_per_gpu_hour=Decimal("2.2295"),
        started_at=at,
    )
    Job.objects.filter(pk=holder.pk).update(state=JobState.RUNNING, started_at=at)
    before = _written()

    with pytest.raises(IntegrityError):
        _record(Plan(binds=tuple(_one_gpu(job, RESERVED, i) for i, job in enumerate(jobs))), at)

    assert _written() == before
    assert SchedulerFence.objects.get(name=FENCE_NAME).token == 1


def test_a_failure_at_the_last_statement_undoes_the_earlier_ones(team, at, monkeypatch) -> None:
    """The events' insert, the batch's last write, fails after the allocations and the states were written: none
    of them stays."""
    jobs = _jobs(team, 3, at)
    before = _written()

    def fail(*args: object, **kwargs: object) -> None:
        raise IntegrityError("the database refused the events")

    monkeypatch.setattr(JobEvent.objects, "bulk_create", fail)
    with pytest.raises(IntegrityError, match="refused the events"):
        _record(Plan(binds=tuple(_one_gpu(job, RESERVED, i) for i, job in enumerate(jobs))), at)

    assert _written() == before
    assert SchedulerFence.objects.get(name=FENCE_NAME).token == 1


def test_a_job_no_longer_pending_fails_the_whole_batch(team, at) -> None:
    """The service's own guard, for a caller that did not lock and check the jobs as the record step does: one job
    cancelled meanwhile and nothing of the batch is written."""
    jobs = _jobs(team, 3, at)
    Job.objects.filter(pk=jobs[1].pk).update(state=JobState.CANCELLED, finished_at=at)
    nodes = {node.name: node for node in Node.objects.all()}
    before = _written()

    with pytest.raises(JobStateError, match="1 of 3 jobs to bind are no longer pending"), transaction.atomic():
        job_bind_record_many(
            binds=[(job, ((Slot(node=RESERVED, gpu=i),),)) for i, job in enumerate(jobs)], nodes=nodes, at=at
        )

    assert _written() == before


def test_a_cancelled_job_is_skipped_by_the_record(team, at) -> None:
    """The record step reads the jobs locked and binds only those still pending, as one bind at a time did."""
    jobs = _jobs(team, 3, at)
    Job.objects.filter(pk=jobs[0].pk).update(state=JobState.CANCELLED, finished_at=at)

    ops, _ = _record(Plan(binds=tuple(_one_gpu(job, RESERVED, i) for i, job in enumerate(jobs))), at)

    assert [op.request.job for op in ops] == [str(jobs[1].pk), str(jobs[2].pk)]
    assert set(Allocation.objects.values_list("job_id", flat=True)) == {jobs[1].pk, jobs[2].pk}
