"""The record step writes the waiting jobs' queue fields set-based: its queries do not grow with the queue, it
writes only what changed, only for jobs still pending, and (PostgreSQL) it does not wait for a row another
transaction holds. Runs on the configured database; the last test needs PostgreSQL (DATABASE_URL=postgres://…)."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

import pytest
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from jobs.models import Job
from jobs.services import job_cancel
from jobs.services.queue_fields import QUEUE_FIELDS, QueueFields
from scheduler.bridge.vocabulary import FENCE_NAME
from scheduler.core import Plan
from scheduler.core.model.plan import Waiting
from scheduler.gateways.protocol import Observation
from scheduler.loop.record import _waiting_read, record_plan
from scheduler.models import SchedulerFence
from teams.models import Team
from tests.scheduler.loop_helpers import team_seed

pytestmark = pytest.mark.django_db


@pytest.fixture
def team(db) -> Team:
    SchedulerFence.objects.create(name=FENCE_NAME)  # as after the first cycle: its creation is not counted
    return team_seed()


def _waiting_jobs(team: Team, count: int, at: datetime) -> list[Job]:
    return Job.objects.bulk_create(
        Job(team=team, name=f"job-{i}", kind="training", gpus=1, submitted_at=at, rank=i) for i in range(count)
    )


def _plan(jobs: list[Job], shift: int = 0) -> Plan:
    """Every job of ``jobs`` waiting, in order, its position moved ``shift`` places and its ETA with it."""
    return Plan(
        waiting=tuple(
            Waiting(
                job=str(job.pk),
                position=i + 1 + shift,
                team_position=i + 1,
                reason=f"waiting for 1 GPU; {i + shift} jobs ahead",
                eta_s=60.0 * (i + shift) + 0.25,
            )
            for i, job in enumerate(jobs)
        )
    )


def _record(plan: Plan, at: datetime) -> CaptureQueriesContext:
    observation = Observation(observed_at=at.timestamp(), nodes=(), jobs={})
    with CaptureQueriesContext(connection) as queries:
        record_plan(plan, observation, at=at, fence_token=None)
    return queries


def _updates(queries: CaptureQueriesContext) -> list[str]:
    """The statements that update jobs (an ``executemany`` is logged once, as "N times: UPDATE …")."""
    return [q["sql"] for q in queries.captured_queries if 'UPDATE "jobs_job"' in q["sql"]]


def test_the_record_costs_as_many_queries_for_200_waiting_jobs_as_for_5(team) -> None:
    at = timezone.now()
    few, many = _waiting_jobs(team, 5, at), _waiting_jobs(team, 200, at)

    counts = [len(_record(_plan(jobs), at)) for jobs in (few, many)]
    moved = [len(_record(_plan(jobs, shift=1), at)) for jobs in (few, many)]

    assert counts[0] == counts[1] and moved[0] == moved[1]
    job = Job.objects.get(pk=many[199].pk)
    eta = at + timedelta(seconds=60.0 * 200 + 0.25)
    assert (job.queue_position, job.team_queue_position, job.eta_at, job.state_reason) == (
        201,
        200,
        eta,
        "waiting for 1 GPU; 200 jobs ahead",
    )


def test_a_record_that_changes_no_waiting_job_writes_no_update(team) -> None:
    at = timezone.now()
    jobs = _waiting_jobs(team, 20, at)
    assert len(_updates(_record(_plan(jobs), at))) == 1  # every row at once

    queries = _record(_plan(jobs), at)

    assert _updates(queries) == []


def test_only_the_changed_and_still_pending_jobs_are_written(team) -> None:
    at = timezone.now()
    jobs = _waiting_jobs(team, 4, at)
    _record(_plan(jobs), at)
    job_cancel(job=jobs[1], actor=None)  # cancelled after the snapshot: its fields stay cleared
    plan = _plan(jobs)
    changed = Waiting(job=str(jobs[2].pk), position=9, team_position=9, reason="moved", eta_s=None)
    plan = Plan(waiting=(plan.waiting[0], plan.waiting[1], changed, plan.waiting[3]))

    _record(plan, at)

    rows = dict(Job.objects.values_list("pk", "queue_position"))
    assert [rows[job.pk] for job in jobs] == [1, None, 9, 4]
    assert Job.objects.get(pk=jobs[2].pk).eta_at is None


@pytest.mark.skipif(
    connection.vendor != "postgresql",
    reason="a row held by another transaction needs PostgreSQL's row locks: run with DATABASE_URL=postgres://…",
)
@pytest.mark.django_db(transaction=True)
def test_on_postgresql_a_waiting_row_held_by_another_transaction_is_skipped_not_waited_for(team) -> None:
    at = timezone.now()
    jobs = _waiting_jobs(team, 3, at)
    held, release = threading.Event(), threading.Event()

    def hold() -> None:  # a cancel under way: the row is locked until its transaction ends
        try:
            with transaction.atomic():
                Job.objects.select_for_update().get(pk=jobs[1].pk)
                held.set()
                release.wait(10)
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(10)
        _record(_plan(jobs), at)  # would block until release if it waited for the row
    finally:
        release.set()
        holder.join(10)

    rows = dict(Job.objects.values_list("pk", "queue_position"))
    assert [rows[job.pk] for job in jobs] == [1, None, 3]  # the held row is written by the next cycle
    _record(_plan(jobs), at)
    assert Job.objects.get(pk=jobs[1].pk).queue_position == 2


def _plain_waiting_read(plan: Plan) -> dict[str, tuple[object, ...]]:
    """The waiting rows as the record read them before: by the plan's ids as parameters, every row converted."""
    columns = ("pk", "state", "priority", "rank", "team__namespace", *QUEUE_FIELDS)
    rows = Job.objects.filter(pk__in=[int(w.job) for w in plan.waiting]).values_list(*columns)
    return {
        str(pk): (state, priority, rank, namespace, QueueFields(*fields))
        for pk, state, priority, rank, namespace, *fields in rows
    }


def test_the_waiting_rows_read_by_state_and_kept_are_those_read_by_id(team) -> None:
    at = timezone.now()
    jobs = _waiting_jobs(team, 6, at)
    plan = _plan(jobs[:5])  # the sixth was submitted after the snapshot: pending, but not the plan's
    assert _waiting_read(plan) == _plain_waiting_read(plan) and len(_waiting_read(plan)) == 5
    _record(plan, at)
    job_cancel(job=jobs[1], actor=None)  # no longer pending: read by its id
    jobs[2].delete()  # gone: missing
    Job.objects.filter(pk=jobs[3].pk).update(rank=7, queue_position=None)  # changed since the last read

    read = _waiting_read(plan)

    assert read == _plain_waiting_read(plan)
    assert read[str(jobs[1].pk)].state == "cancelled" and str(jobs[2].pk) not in read
    assert (read[str(jobs[3].pk)].rank, read[str(jobs[3].pk)].fields.queue_position) == (7, None)
    assert _waiting_read(Plan()) == {}
