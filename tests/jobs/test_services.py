"""jobs.services: submit validates every key of a spec and writes nothing on error; cancel, priority and rank
record who did what. Who may call each service: test_services_roles.py; the bulk ones: test_services_bulk.py."""

from __future__ import annotations

from decimal import Decimal

import pytest

from jobs.errors import JobSpecInvalid, JobStateError, TeamNotFound
from jobs.models import Allocation, Job, JobEvent
from jobs.services import job_cancel, job_set_priority, job_set_rank, job_submit
from tests.factories import AllocationFactory, JobFactory, ProjectFactory

pytestmark = pytest.mark.django_db

FULL_SPEC = {
    "name": "llama-finetune",
    "kind": "training",
    "priority": "high",
    "gpus": 4,
    "replicas": 2,
    "gpu_model": "H100",
    "preemptible": True,
    "checkpoint_interval_s": 600,
    "tier": "spot-ok",
    "duration_s": 7200,
    "rank": 3,
    "image": "ghcr.io/acme/train:1.2",
    "command": ["python", "train.py", "--epochs", "3"],
    "env": {"WANDB_MODE": "offline"},
}


def test_a_full_spec_becomes_a_pending_job_with_a_submitted_event(team, lead):
    ProjectFactory(team=team, code="llm-pretrain")
    job = job_submit(team="nlp", spec={**FULL_SPEC, "project": "llm-pretrain"}, actor=lead)
    assert job.state == "pending" and job.submitted_by == lead and job.project.code == "llm-pretrain"
    assert (job.gpus, job.replicas, job.gpu_model, job.priority, job.tier) == (4, 2, "H100", "high", "spot-ok")
    assert (job.checkpoint_interval_s, job.duration_s, job.rank, job.preemptible) == (600, 7200, 3, True)
    assert job.command == ["python", "train.py", "--epochs", "3"] and job.env == {"WANDB_MODE": "offline"}
    event = JobEvent.objects.get(job=job)
    assert event.type == "submitted" and event.actor == lead and event.details["spec"]["gpus"] == 4


@pytest.mark.parametrize(
    ("spec", "key"),
    [
        ({"mig_profile": "3g.40gb"}, "mig_profile"),
        ({"memory_gib": 12.5}, "memory_gib"),
        ({"model": {"params_b": 7, "dtype": "bf16", "context": 4096, "batch": 8, "mode": "inference"}}, "model"),
    ],
)
def test_each_way_of_stating_the_request(team, spec, key):
    job = job_submit(team=team, spec={"kind": "inference", **spec}, actor=None)
    value = getattr(job, key)
    assert value == (Decimal("12.50") if key == "memory_gib" else spec[key])
    assert job.gpus is None


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"gpus": 1, "colour": "red"}, "spec: colour: unknown key"),
        ({"gpus": 1, "mig_profile": "1g.10gb"}, "state the request in exactly one way"),
        ({"kind": "training"}, "found none"),
        ({"gpus": 0}, "spec: gpus: must be at least 1 and at most 64, got 0"),
        ({"gpus": 65}, "spec: gpus: must be at least 1 and at most 64, got 65"),
        ({"gpus": 1, "replicas": 600}, "spec: replicas: must be at least 1 and at most 512, got 600"),
        ({"mig_profile": "3g.41gb"}, "spec: mig_profile: '3g.41gb' is not a MIG profile"),
        ({"gpus": 1, "gpu_model": "V100"}, "spec: gpu_model: unknown GPU model or class 'V100'"),
        ({"gpus": 1, "priority": "urgent"}, "spec: priority: must be one of production, high, normal, low"),
        ({"gpus": 1, "tier": "cheap"}, "spec: tier: must be one of any, reserved-only, spot-ok"),
        ({"gpus": 1, "duration_s": 12.5}, "spec: duration_s: must be a whole number of seconds"),
        ({"gpus": 1, "preemptible": "yes"}, "spec: preemptible: must be true or false"),
        ({"gpus": 1, "command": "python train.py"}, "spec: command: must be a list"),
        ({"gpus": 1, "env": {"N": 1}}, "spec: env.N: must be a string"),
        ({"gpus": 1, "project": "nope"}, "spec: project: team nlp has no project 'nope'"),
        ({"gpus": 1, "team": "vision"}, "spec: team: names 'vision', but the job is submitted to team 'nlp'"),
        ({"gpu_milli": 500}, "spec: gpu_milli: is a trace-only key"),
        ({"model": {"params_b": -1}}, "spec: model.params_b: must be a positive number"),
        ([1, 2], "a job spec must be a JSON object"),
    ],
)
def test_bad_specs_are_rejected_with_the_reason_and_nothing_is_written(team, spec, message):
    with pytest.raises(JobSpecInvalid) as caught:
        job_submit(team=team, spec=spec, actor=None)
    assert any(message in error for error in caught.value.errors), caught.value.errors
    assert not Job.objects.exists() and not JobEvent.objects.exists()


def test_every_problem_is_reported_at_once_with_the_source(team):
    with pytest.raises(JobSpecInvalid) as caught:
        job_submit(team=team, spec={"gpus": 0, "tier": "x", "extra": 1}, actor=None, source="job.json")
    assert len(caught.value.errors) == 3 and all(e.startswith("job.json: ") for e in caught.value.errors)


def test_an_unknown_team_names_the_known_ones(team):
    with pytest.raises(TeamNotFound, match="no team with slug 'nope'; known teams: nlp"):
        job_submit(team="nope", spec={"gpus": 1}, actor=None)


def test_an_unchanged_value_records_nothing_and_junk_is_refused(team, lead):
    job = JobFactory(team=team)
    job_set_priority(job=job, priority="normal", actor=lead)
    assert not JobEvent.objects.exists()
    with pytest.raises(JobSpecInvalid, match="priority: must be one of"):
        job_set_priority(job=job, priority="asap", actor=lead)
    with pytest.raises(JobSpecInvalid, match="rank: must be a whole number"):
        job_set_rank(job=job, rank="first", actor=lead)  # type: ignore[arg-type]


def test_cancel_a_running_job_closes_its_allocations(team, lead):
    job = JobFactory(team=team)
    Job.objects.filter(pk=job.pk).update(state="running", started_at=job.submitted_at)
    job.refresh_from_db()
    allocation = AllocationFactory(job=job)
    cancelled = job_cancel(job=job, actor=lead, reason="wrong dataset")
    allocation.refresh_from_db()
    assert cancelled.state == "cancelled" and cancelled.state_reason == "wrong dataset"
    assert allocation.ended_at is not None and allocation.end_reason == "cancelled"
    event = JobEvent.objects.get(job=job)
    assert (event.type, event.actor, event.details) == ("cancelled", lead, {"reason": "wrong dataset"})


def test_an_ended_job_cannot_be_cancelled_or_changed(team, lead):
    job = job_submit(team=team, spec={"gpus": 1}, actor=None)
    job_cancel(job=job, actor=None)
    with pytest.raises(JobStateError, match="already cancelled"):
        job_cancel(job=job, actor=None)
    with pytest.raises(JobStateError, match="already cancelled"):
        job_set_rank(job=job, rank=1, actor=lead)
    assert not Allocation.objects.exists()
