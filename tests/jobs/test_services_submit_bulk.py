"""job_submit_bulk: many submits with the checks of one, all or nothing."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.errors import JobPermissionDenied, JobSpecInvalid, PendingLimitReached
from jobs.models import Job, JobEvent
from jobs.services import JobSubmission, job_submit, job_submit_bulk
from tests.scheduler.loop_helpers import fleet_seed

pytestmark = pytest.mark.django_db

SPECS = [
    {"name": "train", "kind": "training", "gpus": 4, "priority": "high", "duration_s": 3600, "rank": 2},
    {"name": "serve", "kind": "inference", "mig_profile": "3g.40gb"},
    {"name": "sized", "kind": "inference", "memory_gib": 12.5, "tier": "reserved-only"},
]
COMPARED = ("name", "kind", "gpus", "mig_profile", "memory_gib", "priority", "rank", "tier", "duration_s", "state")


def test_each_job_is_what_one_submit_makes_of_its_spec(team, lead) -> None:
    fleet_seed()
    at = timezone.now() - timedelta(hours=1)
    one = [job_submit(team="nlp", spec=spec, actor=lead, now=at) for spec in SPECS]
    many = job_submit_bulk(submissions=[JobSubmission(team="nlp", spec=s, at=at) for s in SPECS], actor=lead)
    assert [job.pk for job in many] == sorted(job.pk for job in many)
    for single, bulk in zip(one, many, strict=True):
        bulk.refresh_from_db()
        assert [getattr(bulk, f) for f in COMPARED] == [getattr(single, f) for f in COMPARED]
        assert (bulk.submitted_at, bulk.submitted_by, bulk.team) == (at, lead, single.team)
    events = JobEvent.objects.filter(job__in=many, type="submitted")
    assert sorted(e.details["spec"]["name"] for e in events) == sorted(s["name"] for s in SPECS)
    assert all(e.actor == lead and e.at == at for e in events)


def test_every_spec_problem_is_reported_with_its_index_and_nothing_is_written(team) -> None:
    fleet_seed()  # no node holds 16 GPUs
    bad = [SPECS[0], {"gpus": 0}, SPECS[1], {"gpus": 16}]
    with pytest.raises(JobSpecInvalid) as error:
        job_submit_bulk(submissions=[JobSubmission(team=team, spec=s) for s in bad], actor=None, source="batch")
    messages = error.value.errors
    assert any(m.startswith("batch[1]") for m in messages)
    assert any(m.startswith("batch[3]: this job could never run on this cluster") for m in messages)
    assert not any(m.startswith(("batch[0]", "batch[2]")) for m in messages)
    assert not Job.objects.exists() and not JobEvent.objects.exists()


def test_a_refusal_of_the_role_refuses_the_batch(team, member) -> None:
    with pytest.raises(JobPermissionDenied):
        job_submit_bulk(submissions=[JobSubmission(team=team, spec=s) for s in SPECS], actor=member)
    assert not Job.objects.exists()


def test_the_pending_caps_count_the_whole_batch(team, lead, settings) -> None:
    settings.JOBS = {"pending_limit_team": 3, "pending_limit_user": 10}
    job_submit(team=team, spec=SPECS[1], actor=lead)
    with pytest.raises(PendingLimitReached, match="team nlp"):
        job_submit_bulk(submissions=[JobSubmission(team=team, spec=s) for s in SPECS], actor=lead)
    assert Job.objects.count() == 1
    assert len(job_submit_bulk(submissions=[JobSubmission(team=team, spec=s) for s in SPECS[:2]], actor=lead)) == 2
    settings.JOBS = {"pending_limit_team": 100, "pending_limit_user": 4}
    with pytest.raises(PendingLimitReached, match="per user"):
        job_submit_bulk(submissions=[JobSubmission(team=team, spec=SPECS[1])] * 2, actor=lead)
