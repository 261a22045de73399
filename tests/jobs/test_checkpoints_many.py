"""Many jobs' checkpoints at once (jobs.services.checkpoints_many): each job gets the outcome
``checkpoint_record`` gives it alone — recorded, already recorded, refused with the same error — in a number of
queries that does not grow with the jobs."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from jobs.errors import CheckpointInvalid, JobStateError
from jobs.models import Job, JobEvent
from jobs.services import CheckpointReport, checkpoint_record
from jobs.services.checkpoints_many import checkpoints_record
from tests.factories import JobFactory, TeamFactory

pytestmark = pytest.mark.django_db

NOW = timezone.now().replace(microsecond=0)
SUBMITTED = NOW - timedelta(hours=2)


BASE = CheckpointReport(
    step=600,
    saved_at=NOW - timedelta(minutes=5),
    size_bytes=2048,
    duration_s=1.23456,
    path="/checkpoints/job/step-600.ckpt",
    replica=1,
    source="manifest",
)


def _report(**fields: Any) -> CheckpointReport:
    return replace(BASE, **fields)


# (case, the job's state, a step recorded before, the report)
CASES = [
    ("new", "running", None, _report()),
    ("already recorded", "running", 600, _report()),
    ("another step recorded", "running", 300, _report()),
    ("negative", "running", None, _report(step=-1, size_bytes=-5)),
    ("from the future", "running", None, _report(saved_at=NOW + timedelta(minutes=5))),
    ("before the submit", "running", None, _report(saved_at=SUBMITTED - timedelta(seconds=1))),
    ("ended", "completed", None, _report()),
    ("pending", "pending", None, _report()),
]


def _job(state: str, recorded: int | None) -> Job:
    ended = {"finished_at": NOW} if state == "completed" else {}
    started = {"started_at": SUBMITTED} if state != "pending" else {}
    job = JobFactory(team=TeamFactory(), state=state, submitted_at=SUBMITTED, **started, **ended)
    if recorded is not None:
        JobEvent.objects.create(job=job, type="checkpointed", at=NOW - timedelta(hours=1), details={"step": recorded})
    return job


def _events(job: Job) -> list[tuple[str, object, object]]:
    return list(job.events.order_by("id").values_list("type", "at", "details"))


def test_each_job_gets_the_outcome_checkpoint_record_gives_it() -> None:
    alone = [(_job(state, recorded), report) for _, state, recorded, report in CASES]
    together = [(_job(state, recorded), report) for _, state, recorded, report in CASES]
    expected = []
    for job, report in alone:
        try:
            _event, created = checkpoint_record(job=job, report=report, now=NOW)
            expected.append(("created" if created else "kept", ""))
        except (CheckpointInvalid, JobStateError) as error:
            expected.append((type(error).__name__, repr(error.args).replace(f"Job {job.pk} ", "Job N ")))

    outcome = checkpoints_record(reports=together, now=NOW)

    actual = []
    for job, _report in together:
        error = outcome.refused.get(job.pk)
        if error is not None:
            actual.append((type(error).__name__, repr(error.args).replace(f"Job {job.pk} ", "Job N ")))
        else:
            actual.append(("created" if job.pk in outcome.created else "kept", ""))
    assert actual == expected
    assert [outcome for outcome, _ in actual] == [
        "created", "kept", "created", "CheckpointInvalid", "CheckpointInvalid", "CheckpointInvalid", "JobStateError",
        "created",
    ]  # fmt: skip
    assert [_events(job) for job, _ in together] == [_events(job) for job, _ in alone]


def test_one_report_per_job() -> None:
    job = _job("running", None)
    with pytest.raises(ValueError, match="one report per job"):
        checkpoints_record(reports=[(job, _report()), (job, _report(step=700))], now=NOW)
    assert not job.events.exists()


@pytest.mark.parametrize("count", [3, 120])
def test_the_queries_do_not_grow_with_the_jobs(count: int, django_assert_num_queries) -> None:
    reports = [(_job("running", 300 if i % 2 else None), _report()) for i in range(count)]
    # A savepoint, the lock, the steps recorded, one insert (under SQLite's 199 rows a statement), the release.
    with django_assert_num_queries(5):
        outcome = checkpoints_record(reports=reports, now=NOW)
    assert outcome.created == {job.pk for job, _ in reports} and not outcome.refused
