"""The waiting jobs' queue fields written in bulk (jobs.services.queue_fields) are stored as the ORM reads them back,
on SQLite and on PostgreSQL alike: PostgreSQL takes the rows as one JSON document typed by the statement's casts, so
an estimate's instant and microseconds, any text a reason holds, and a missing value each come back unchanged."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from jobs.models import Job
from jobs.services.queue_fields import QueueFields, job_queue_fields_write_bulk
from tests.factories import JobFactory, TeamFactory

pytestmark = pytest.mark.django_db

REASONS = (
    'waiting for capacity: 12 ahead, "H100" ≥ 2 GPUs',
    "quota: team's burst of 8 GPUs is used \\ back at 100 %",
    "",
    "línea\nnueva\tand a tab; emoji \U0001f680",
)


def test_every_field_comes_back_as_written() -> None:
    jobs = JobFactory.create_batch(len(REASONS), team=TeamFactory())
    # An estimate with microseconds and another offset than UTC: stored as the same instant.
    eta = datetime(2026, 12, 6, 15, 4, 5, 123456, tzinfo=timezone(timedelta(hours=-5)))
    written = job_queue_fields_write_bulk(
        [
            (job.pk, QueueFields(n, n % 2 or None, eta + timedelta(seconds=n) if n % 3 else None, reason))
            for n, (job, reason) in enumerate(zip(jobs, REASONS, strict=True), start=1)
        ]
    )
    assert written == len(REASONS)
    for n, (job, reason) in enumerate(zip(jobs, REASONS, strict=True), start=1):
        job.refresh_from_db()
        assert job.queue_position == n
        assert job.team_queue_position == (n % 2 or None)
        assert job.eta_at == (eta + timedelta(seconds=n) if n % 3 else None)
        assert job.state_reason == reason


def test_only_the_named_jobs_that_are_still_pending_are_written() -> None:
    team = TeamFactory()
    pending, running, untouched = JobFactory.create_batch(3, team=team)
    at = datetime(2026, 12, 6, tzinfo=UTC)
    Job.objects.filter(pk=running.pk).update(state="running", started_at=running.submitted_at)
    written = job_queue_fields_write_bulk(
        [(pending.pk, QueueFields(1, 1, at, "first")), (running.pk, QueueFields(2, 2, at, "second"))]
    )
    assert written == 1
    for job in (pending, running, untouched):
        job.refresh_from_db()
    assert (pending.queue_position, pending.state_reason) == (1, "first")
    assert running.state_reason != "second" and running.queue_position != 2
    assert untouched.state_reason != "first" and untouched.queue_position is None


def test_an_estimate_without_a_time_zone_is_refused_and_nothing_is_written() -> None:
    first, second = JobFactory.create_batch(2, team=TeamFactory())
    aware = datetime(2026, 12, 6, 15, tzinfo=UTC)
    with pytest.raises(ValueError, match=f"job {second.pk}: a start estimate must be aware"):
        job_queue_fields_write_bulk(
            [(first.pk, QueueFields(1, 1, aware, "first")), (second.pk, QueueFields(2, 2, datetime(2026, 12, 6), "x"))]
        )
    assert not Job.objects.filter(pk__in=[first.pk, second.pk], queue_position__isnull=False).exists()
