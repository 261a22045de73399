"""What the loop asks a gateway to bind (scheduler.loop.apply.bind_request): a checkpointed job's directory on its
team's volume, its report credential, its team's claim, and where a requeued job resumes."""

from __future__ import annotations

from datetime import timedelta

import pytest

from jobs.credentials import job_for_token, token_job_id
from jobs.services import CheckpointReport, checkpoint_record, job_submit
from scheduler.gateways.protocol import BindRequest
from scheduler.loop.apply import BindOp, Retry, apply_ops, bind_request
from tests.scheduler.loop_helpers import team_seed

pytestmark = pytest.mark.django_db


@pytest.fixture
def team(db):
    return team_seed()


def _submit(team, clock, **spec):
    return job_submit(
        team=team,
        spec={"kind": "training", "gpus": 1, "image": "ghcr.io/acme/train:1", **spec},
        actor=None,
        now=clock.now,
    )


def _checkpoint(job, clock, step: int, path: str, *, after_s: float) -> None:
    report = CheckpointReport(step=step, saved_at=clock.now + timedelta(seconds=after_s), path=path)
    checkpoint_record(job=job, report=report, now=clock.now + timedelta(seconds=after_s))


def test_a_checkpointed_job_gets_its_directory_and_its_own_report_credential(team, clock) -> None:
    job = _submit(team, clock, checkpoint_interval_s=600)

    request = bind_request(job, [], resume=False)

    assert request.checkpoint_dir == f"/checkpoints/job-{job.pk}"  # on the team's volume: no team in the path
    assert request.checkpoint_interval_s == 600
    assert request.resume_from == ""  # a first start resumes from nothing
    assert token_job_id(request.credential) == job.pk
    assert job_for_token(request.credential) == job
    assert request.checkpoint_claim == ""  # the team brings no claim: the gateway's own


def test_a_job_without_an_interval_gets_no_directory_no_credential_and_never_resumes(team, clock) -> None:
    job = _submit(team, clock)
    _checkpoint(job, clock, 100, f"/checkpoints/job-{job.pk}/step-000000100.ckpt", after_s=10)

    request = bind_request(job, [], resume=True)

    assert (request.checkpoint_dir, request.credential, request.resume_from) == ("", "", "")


def test_the_team_s_own_claim_is_passed_on(team, clock) -> None:
    team.checkpoint_claim = "nlp-scratch"
    team.save(update_fields=["checkpoint_claim"])
    job = _submit(team, clock, checkpoint_interval_s=600)

    assert bind_request(job, [], resume=False).checkpoint_claim == "nlp-scratch"


def test_a_requeued_job_without_a_recorded_path_resumes_from_its_directory(team, clock) -> None:
    job = _submit(team, clock, checkpoint_interval_s=600)
    assert bind_request(job, [], resume=True).resume_from == f"/checkpoints/job-{job.pk}"

    _checkpoint(job, clock, 100, "", after_s=10)  # a checkpoint seen only by time (an older gateway's report)

    assert bind_request(job, [], resume=True).resume_from == f"/checkpoints/job-{job.pk}"


def test_a_requeued_job_resumes_from_its_newest_recorded_checkpoint(team, clock) -> None:
    job = _submit(team, clock, checkpoint_interval_s=600)
    directory = f"/checkpoints/job-{job.pk}"
    _checkpoint(job, clock, 100, f"{directory}/step-000000100.ckpt", after_s=10)
    _checkpoint(job, clock, 300, f"{directory}/step-000000300.ckpt", after_s=30)
    _checkpoint(job, clock, 200, f"{directory}/step-000000200.ckpt", after_s=20)

    assert bind_request(job, [], resume=True).resume_from == f"{directory}/step-000000300.ckpt"
    # Only after a requeue: a first start (or a repeated first bind) never resumes.
    assert bind_request(job, [], resume=False).resume_from == ""


@pytest.mark.parametrize(
    "path",
    [
        "/checkpoints/job-{other}/step-000000100.ckpt",  # another job's checkpoint
        "/checkpoints/job-{pk}/../job-{other}/step-000000100.ckpt",  # climbing out of its directory
        "/checkpoints/job-{pk}0/step-000000100.ckpt",  # a directory whose name only starts like its own
        "job-{pk}/step-000000100.ckpt",  # relative: not a path the pods can open
        "/checkpoints/job-{pk}",  # the directory itself is not a checkpoint file
    ],
)
def test_a_recorded_path_outside_the_job_s_directory_is_not_trusted(team, clock, path) -> None:
    job = _submit(team, clock, checkpoint_interval_s=600)
    other = _submit(team, clock, checkpoint_interval_s=600)
    _checkpoint(job, clock, 100, path.format(pk=job.pk, other=other.pk), after_s=10)

    assert bind_request(job, [], resume=True).resume_from == f"/checkpoints/job-{job.pk}"


class Recording:
    """A gateway that records what it is asked and does nothing."""

    name = "recording"

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []

    def namespace_ensure(self, **kwargs) -> None:
        self.calls.append(("namespace_ensure", kwargs))

    def job_bind(self, *, request: BindRequest) -> None:
        self.calls.append(("job_bind", {"job": request.job}))


def test_applying_a_bind_ensures_the_namespace_with_the_team_s_claim(team, clock) -> None:
    team.checkpoint_claim = "nlp-scratch"
    team.save(update_fields=["checkpoint_claim"])
    job = _submit(team, clock, checkpoint_interval_s=600)
    gateway = Recording()

    apply_ops(gateway, [BindOp(request=bind_request(job, [], resume=False), team=team.slug)], grace_s=30, retry=Retry())

    assert gateway.calls == [
        ("namespace_ensure", {"namespace": team.namespace, "team": team.slug, "checkpoint_claim": "nlp-scratch"}),
        ("job_bind", {"job": str(job.pk)}),
    ]
