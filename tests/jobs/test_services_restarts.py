"""The restart budget (jobs.services.restarts): an application failure restarts the whole job while
``restarts < restart_limit`` and fails it with the last exit reason once the budget is spent; a restart is no
preemption, so the ledger bills its hours and reports no lost work."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from billing.models import LostWork
from billing.services import ledger_close_due
from jobs.errors import JobStateError
from jobs.models import Allocation, Job, JobEvent
from jobs.services import job_fail_or_restart, job_requeue
from jobs.services.restarts import UNKNOWN_EXIT, budget_spent
from scheduler.core.model.vocabulary import EvictionReason
from scheduler.core.sizing.bounds import DEFAULT_RESTART_LIMIT
from tests.factories import JobFactory
from tests.portal.fleet import fleet, running_job

pytestmark = pytest.mark.django_db

OOM = "container main exited with code 137 OOMKilled"


@pytest.fixture
def node(db):
    return fleet()


def _rerun(job: Job, node, at) -> None:  # type: ignore[no-untyped-def]
    """What the next bind does for a requeued job: running again on a fresh allocation."""
    job.state, job.started_at, job.state_reason = "running", max(job.started_at or at, at), ""
    job.save(update_fields=["state", "started_at", "state_reason"])
    Allocation.objects.create(
        job=job, replica=0, node=node, gpu_index=1, tier=node.tier, price_per_gpu_hour="2.1", started_at=at
    )


def test_failures_restart_the_job_until_the_budget_is_spent_then_fail_it(team, node) -> None:
    job = running_job(team, node, name="trainer")
    assert (job.restart_limit, job.restarts) == (DEFAULT_RESTART_LIMIT, 0)
    at = timezone.now()
    for n in range(1, job.restart_limit + 1):
        outcome = job_fail_or_restart(job=job, exit_reason=f"container main exited with code {n}", at=at)
        job.refresh_from_db()
        assert outcome.restarted and outcome.restarts == n == job.restarts
        assert job.state == "pending" and job.last_exit_reason == f"container main exited with code {n}"
        assert f"restart {n} of {job.restart_limit}" in job.state_reason
        assert not Allocation.objects.filter(job=job, ended_at__isnull=True).exists()
        at += timedelta(minutes=5)
        _rerun(job, node, at)
        at += timedelta(minutes=5)

    outcome = job_fail_or_restart(job=job, exit_reason=OOM, at=at)
    job.refresh_from_db()
    assert not outcome.restarted and outcome.restarts == job.restart_limit
    assert job.state == "failed" and job.finished_at == at
    assert job.state_reason == f"{OOM}; restart budget of {job.restart_limit} spent"
    assert job.last_exit_reason == OOM
    failed = JobEvent.objects.get(job=job, type="failed")
    assert failed.details == {"reason": job.state_reason}
    assert not Allocation.objects.filter(job=job, ended_at__isnull=True).exists()


def test_the_requeue_event_carries_the_exit_reason_and_the_count(team, node) -> None:
    job = running_job(team, node, name="trainer", restart_limit=5, restarts=1)
    at = timezone.now()
    job_fail_or_restart(job=job, exit_reason=f"  {OOM} ", at=at)
    event = JobEvent.objects.get(job=job, type="requeued")
    assert event.at == at and event.actor is None
    assert event.details == {
        "reason": "app-failure",
        "exit_reason": OOM,
        "restart": 2,
        "restart_limit": 5,
        "message": "restart 2 of 5",
    }
    # A restart is not a preemption: no ``preempted`` event, and the allocation ends as an application failure.
    assert not JobEvent.objects.filter(job=job, type="preempted").exists()
    assert set(Allocation.objects.filter(job=job).values_list("end_reason", flat=True)) == {"app-failure"}


def test_a_restart_limit_of_zero_fails_at_the_first_failure(team, node) -> None:
    job = running_job(team, node, name="trainer", restart_limit=0)
    outcome = job_fail_or_restart(job=job, exit_reason="", at=timezone.now())
    job.refresh_from_db()
    assert not outcome.restarted and job.state == "failed" and job.restarts == 0
    assert job.state_reason == f"{UNKNOWN_EXIT}; no restarts allowed (restart_limit 0)"
    assert budget_spent(0) in job.state_reason


def test_infrastructure_losses_never_spend_the_budget(team, node) -> None:
    job = running_job(team, node, name="trainer", restart_limit=1)
    for reason in (EvictionReason.NODE_LOST, EvictionReason.RECLAIM, EvictionReason.PRIORITY, "bind-refused"):
        job_requeue(job=job, reason=reason, by=None, at=timezone.now())
        job.refresh_from_db()
        assert (job.state, job.restarts, job.last_exit_reason) == ("pending", 0, "")
        _rerun(job, node, timezone.now())
    outcome = job_fail_or_restart(job=job, exit_reason=OOM, at=timezone.now())
    assert outcome.restarted and outcome.restarts == 1  # the budget is whole for the first application failure


def test_an_app_failure_restart_is_billed_and_not_lost_work(team, node) -> None:
    """docs/billing.md, Lost work: the scheduler took nothing away, so nothing is reported lost; a node loss of
    the same job's next run is."""
    started = timezone.now() - timedelta(hours=3)
    job = running_job(team, node, name="trainer", started_at=started)
    failed_at = started + timedelta(hours=1)
    job_fail_or_restart(job=job, exit_reason=OOM, at=failed_at)
    job.refresh_from_db()
    _rerun(job, node, failed_at)
    job_requeue(job=job, reason=EvictionReason.NODE_LOST, by=None, at=failed_at + timedelta(hours=1))

    summary = ledger_close_due(now=timezone.now())
    assert summary.allocations == 2 and summary.gpu_hours > 0  # both runs are billed
    (lost,) = LostWork.objects.filter(job=job)
    assert lost.reason == "node-lost" and lost.preempted_at == failed_at + timedelta(hours=1)


def test_only_a_running_job_can_fail_and_restart(team) -> None:
    now = timezone.now()
    for state in ("pending", "completed"):
        job = JobFactory(team=team, state=state, submitted_at=now, finished_at=now if state == "completed" else None)
        with pytest.raises(JobStateError, match=f"is {state}, not running"):
            job_fail_or_restart(job=job, exit_reason=OOM, at=timezone.now())
        job.refresh_from_db()
        assert (job.state, job.restarts) == (state, 0)


def test_the_database_keeps_the_count_within_the_limit(team) -> None:
    for fields in ({"restart_limit": 101}, {"restart_limit": 2, "restarts": 3}):
        with pytest.raises(IntegrityError), transaction.atomic():
            JobFactory(team=team, **fields)
    assert JobFactory(team=team, restart_limit=100, restarts=100).restarts == 100
