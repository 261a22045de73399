"""jobs.services.job_list_reorder and job_cancel_bulk: many jobs of a team in one transaction, one event with
its actor per job changed, nothing written on any error. (Who may call them: test_services_roles.py.)"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.errors import JobNotFound, JobSpecInvalid, JobStateError
from jobs.models import Allocation, Job, JobEvent
from jobs.selectors.jobs import resuming_jobs
from jobs.services import job_cancel_bulk, job_list_reorder, team_order_key
from tests.factories import AllocationFactory, JobFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def pending(team):
    a, b, c = (JobFactory(team=team, name=n, state="pending") for n in "abc")
    urgent = JobFactory(team=team, name="u", state="pending", priority="high")
    return a, b, c, urgent


def test_reorder_writes_only_changed_ranks_within_priorities(team, lead, pending) -> None:
    a, b, c, urgent = pending
    at = timezone.now() - timedelta(minutes=5)
    changed = job_list_reorder(team=team, order=[urgent.pk, c.pk, a.pk, b.pk], actor=lead, now=at)
    # The ranks end at 0 (b keeps it; urgent is alone in its priority): a job submitted later, at rank 0, queues
    # behind them all. (The reorder used to write 0, 1, 2, and every later job then ran before a and b.)
    assert sorted(j.name for j in changed) == ["a", "c"]
    jobs = list(Job.objects.filter(team=team))
    assert [j.name for j in sorted(jobs, key=team_order_key)] == ["u", "c", "a", "b"]
    events = list(JobEvent.objects.order_by("job__name").values_list("job__name", "type", "actor", "at", "details"))
    assert events == [
        ("a", "rank_changed", lead.pk, at, {"old": 0, "new": -1}),
        ("c", "rank_changed", lead.pk, at, {"old": 0, "new": -2}),
    ]
    assert job_list_reorder(team=team, order=[urgent.pk, c.pk, a.pk, b.pk], actor=lead) == []  # same order: no-op
    assert JobEvent.objects.count() == 2


def test_reorder_ignores_running_jobs_and_other_teams(team, lead, pending, outsider) -> None:
    a, b, c, urgent = pending
    JobFactory(team=team, state="running", submitted_at=timezone.now() - timedelta(hours=1), started_at=timezone.now())
    JobFactory(team=outsider.memberships.get().team, state="pending")
    changed = job_list_reorder(team=team, order=[c.pk, b.pk, a.pk, urgent.pk], actor=lead)
    assert {j.name for j in changed} == {"c", "b"}  # a, last, keeps rank 0 (ranks -2, -1, 0: see above)


@pytest.mark.parametrize(
    ("order", "messages"),
    [
        (lambda a, b, c, u, x: [a, a, b, c, u], ["order: job {a} listed more than once; list each exactly once"]),
        (lambda a, b, c, u, x: [a, b, c], ["order: pending job {u} of team nlp missing"]),
        (lambda a, b, c, u, x: [a, b, c, u, x], ["order: job {x} is not a pending job of team nlp"]),
        (
            lambda a, b, c, u, x: [a, a, x],
            ["listed more than once", "job {x} is not a pending job", "pending job {b}, {c}, {u} of team nlp missing"],
        ),
    ],
)
def test_reorder_needs_each_pending_job_exactly_once(team, lead, pending, outsider, order, messages) -> None:
    a, b, c, u = (j.pk for j in pending)
    x = JobFactory(team=outsider.memberships.get().team, state="pending").pk
    with pytest.raises(JobSpecInvalid) as caught:
        job_list_reorder(team=team, order=order(a, b, c, u, x), actor=lead)
    wanted = [m.format(a=a, b=b, c=c, u=u, x=x) for m in messages]
    assert all(any(w in error for error in caught.value.errors) for w in wanted), caught.value.errors
    assert len(caught.value.errors) == len(messages)
    assert set(Job.objects.values_list("rank", flat=True)) == {0} and not JobEvent.objects.exists()


def test_reorder_refuses_an_order_made_before_a_job_started(team, lead, pending) -> None:
    a, b, c, urgent = pending
    Job.objects.filter(pk=a.pk).update(state="running", started_at=timezone.now())
    with pytest.raises(JobSpecInvalid, match=f"job {a.pk} is not a pending job of team nlp .*reload the queue"):
        job_list_reorder(team=team, order=[c.pk, b.pk, a.pk, urgent.pk], actor=lead)
    assert not JobEvent.objects.exists()


def test_reorder_is_one_transaction(team, lead, pending, monkeypatch) -> None:
    a, b, c, urgent = pending
    create = JobEvent.objects.create
    calls = []

    def failing_second(**kwargs):
        calls.append(kwargs)
        if len(calls) == 2:
            raise RuntimeError("database went away")
        return create(**kwargs)

    monkeypatch.setattr(JobEvent.objects, "create", failing_second)
    with pytest.raises(RuntimeError):
        job_list_reorder(team=team, order=[c.pk, b.pk, a.pk, urgent.pk], actor=lead)
    assert set(Job.objects.values_list("rank", flat=True)) == {0} and not JobEvent.objects.exists()


def test_bulk_cancel_closes_allocations_and_records_each_job(team, lead) -> None:
    now = timezone.now()
    waiting = JobFactory(
        team=team,
        state="pending",
        submitted_at=now - timedelta(hours=1),
        queue_position=3,
        team_queue_position=1,
        eta_at=now,
    )
    running = JobFactory(team=team, state="running", submitted_at=now - timedelta(hours=1), started_at=now)
    allocation = AllocationFactory(job=running, started_at=now - timedelta(minutes=30))
    cancelled = job_cancel_bulk(jobs=[running, waiting, running], actor=lead, reason="budget cut", now=now)
    assert [j.pk for j in cancelled] == [running.pk, waiting.pk]  # duplicates once, in the given order
    waiting.refresh_from_db()
    assert (waiting.state, waiting.state_reason, waiting.finished_at) == ("cancelled", "budget cut", now)
    assert (waiting.queue_position, waiting.team_queue_position, waiting.eta_at) == (None, None, None)
    allocation.refresh_from_db()
    assert (allocation.ended_at, allocation.end_reason) == (now, "cancelled")
    assert list(JobEvent.objects.order_by("id").values_list("job", "type", "actor", "details")) == [
        (running.pk, "cancelled", lead.pk, {"reason": "budget cut"}),
        (waiting.pk, "cancelled", lead.pk, {"reason": "budget cut"}),
    ]
    assert job_cancel_bulk(jobs=[], actor=lead) == []


def test_bulk_cancel_is_all_or_nothing_and_names_every_ended_job(team, lead) -> None:
    now = timezone.now()
    live = JobFactory(team=team, state="pending")
    running = JobFactory(team=team, state="running", submitted_at=now - timedelta(hours=1), started_at=now)
    allocation = AllocationFactory(job=running, started_at=now - timedelta(minutes=30))
    ended = [
        JobFactory(team=team, state=state, submitted_at=now - timedelta(hours=1), finished_at=now)
        for state in ("cancelled", "completed")
    ]
    with pytest.raises(JobStateError) as caught:
        job_cancel_bulk(jobs=[live, running, *ended], actor=lead)
    assert str(caught.value) == (
        f"job {ended[0].pk} is already cancelled, job {ended[1].pk} is already completed; only pending or running "
        "jobs can be cancelled: leave them out of the selection"
    )
    assert (
        list(Job.objects.filter(pk__in=[live.pk, running.pk]).values_list("state", flat=True)).count("cancelled") == 0
    )
    assert Allocation.objects.get(pk=allocation.pk).ended_at is None and not JobEvent.objects.exists()


def test_bulk_cancel_of_a_deleted_job_says_so(team, lead) -> None:
    live = JobFactory(team=team, state="pending")
    gone = JobFactory(team=team, state="pending")
    Job.objects.filter(pk=gone.pk).delete()
    with pytest.raises(JobNotFound, match=f"job {gone.pk} no longer exists"):
        job_cancel_bulk(jobs=[live, gone], actor=lead)
    live.refresh_from_db()
    assert live.state == "pending"


def test_team_order_puts_a_job_resuming_after_an_infrastructure_loss_first_within_its_priority(team, pending) -> None:
    """The manage page's order is the engine's (scheduler.core.rules.fairshare.job_key): priority, then resuming."""
    a, b, c, urgent = pending
    JobEvent.objects.create(job=c, type="preempted", at=timezone.now(), details={"reason": "spot-reclaim"})
    JobEvent.objects.create(job=b, type="preempted", at=timezone.now(), details={"reason": "priority"})
    resuming = resuming_jobs(j.pk for j in (a, b, c, urgent))
    assert resuming == {c.pk}  # a preemption by priority is the scheduler's decision, not a loss to resume from
    ordered = sorted([a, b, c, urgent], key=lambda job: team_order_key(job, resuming))
    assert [j.name for j in ordered] == ["u", "c", "a", "b"]
    assert [j.name for j in sorted([a, b, c, urgent], key=team_order_key)] == ["u", "a", "b", "c"]
