"""``/api/v1/jobs/{id}/checkpoints/``: a job reports checkpoints with its own credential only (recorded,
idempotent per step, refused for any other job, without a valid credential, after the job ended, and from a
user), and its team reads them (owner, member, admin; outsider and finance 404)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core.cache.backends.redis import RedisCache
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient
from rest_framework.throttling import SimpleRateThrottle

from jobs.credentials import job_token
from jobs.models import JobEvent
from jobs.services import CheckpointReport, checkpoint_record, job_cancel
from tests.portal.fleet import fleet, running_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def node(db):
    return fleet()


@pytest.fixture
def job(team, node, member):
    return running_job(team, node, name="llama-pretrain", submitted_by=member)


@pytest.fixture
def other_job(team, node, member):
    return running_job(team, node, name="other", gpu_index=2, submitted_by=member)


def url(job_id: object) -> str:
    return f"/api/v1/jobs/{job_id}/checkpoints/"


def as_job(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def report(step: Any = 100, **fields: Any) -> dict[str, Any]:
    saved = timezone.now() - timedelta(minutes=5)
    return {
        "step": step,
        "saved_at": saved.isoformat(),
        "size_bytes": 4096,
        "duration_s": 2.5,
        "path": f"/checkpoints/nlp/job-1/step-{step}.ckpt",
        "replica": 0,
        **fields,
    }


def checkpoints_of(job) -> list[JobEvent]:  # type: ignore[no-untyped-def]
    return list(JobEvent.objects.filter(job=job, type="checkpointed").order_by("at", "id"))


# --- the report -----------------------------------------------------------------------------------------------


def test_the_jobs_own_credential_records_the_checkpoint_with_its_details(job) -> None:
    body = report(step=1200)
    response = as_job(job_token(job.pk)).post(url(job.pk), body, format="json")
    assert response.status_code == 201, response.json()
    (event,) = checkpoints_of(job)
    assert event.details == {
        "step": 1200,
        "size_bytes": 4096,
        "duration_s": 2.5,
        "path": body["path"],
        "replica": 0,
        "source": "job",
    }
    assert event.at.isoformat() == body["saved_at"] and event.actor is None
    assert response.json() == {
        "step": 1200,
        "saved_at": response.json()["saved_at"],
        "size_bytes": 4096,
        "duration_s": 2.5,
        "path": body["path"],
        "replica": 0,
        "source": "job",
    }


def test_a_step_reported_again_is_200_and_records_nothing(job) -> None:
    client = as_job(job_token(job.pk))
    first = client.post(url(job.pk), report(step=7), format="json")
    again = client.post(url(job.pk), report(step=7, size_bytes=1), format="json")
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["size_bytes"] == 4096  # the step as first recorded
    assert len(checkpoints_of(job)) == 1
    assert client.post(url(job.pk), report(step=8), format="json").status_code == 201
    assert [e.details["step"] for e in checkpoints_of(job)] == [7, 8]


def test_the_credential_of_one_job_is_refused_for_any_other(job, other_job) -> None:
    client = as_job(job_token(job.pk))
    for target in (other_job.pk, 999_999, "abc", f"{job.pk}0"):
        response = client.post(url(target), report(), format="json")
        assert response.status_code == 403, (target, response.content)
        assert f"reports for job {job.pk} only" in response.json()["detail"]
    assert checkpoints_of(other_job) == [] and checkpoints_of(job) == []


@pytest.mark.parametrize(
    "header",
    [
        None,
        "Bearer",
        "Bearer a b",
        "Bearer not-a-credential",
        "Bearer mcj.1.0000",
        "Basic bWNqOjE=",
        "Bearer \u00e9t\u00e9",
    ],
)
def test_no_or_an_invalid_credential_is_401(job, header: str | None) -> None:
    client = APIClient()
    if header is not None:
        client.credentials(HTTP_AUTHORIZATION=header.encode("latin-1").decode("latin-1"))
    response = client.post(url(job.pk), report(), format="json")
    assert response.status_code == 401, response.content
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert checkpoints_of(job) == []


def test_a_forged_credential_is_401(job, other_job) -> None:
    genuine = job_token(job.pk)
    _, _, digest = genuine.split(".")
    forged = [
        f"mcj.{other_job.pk}.{digest}",  # another job's id with this job's signature
        genuine[:-1] + ("0" if genuine[-1] != "0" else "1"),  # one character changed
        f"mcx.{job.pk}.{digest}",  # another prefix
        genuine.upper(),
    ]
    for token in forged:
        response = as_job(token).post(url(other_job.pk), report(), format="json")
        assert response.status_code == 401, token
        assert "Invalid job credential" in response.json()["detail"]


def test_the_credential_is_revoked_when_the_job_ends(job, lead) -> None:
    token = job_token(job.pk)
    assert as_job(token).post(url(job.pk), report(step=1), format="json").status_code == 201
    job_cancel(job=job, actor=lead, reason="done with it")
    response = as_job(token).post(url(job.pk), report(step=2), format="json")
    assert response.status_code == 401
    assert response.json()["detail"] == (
        f"The credential of job {job.pk} is revoked: the job has ended, so it takes no more reports."
    )
    assert [e.details["step"] for e in checkpoints_of(job)] == [1]


def test_a_job_ending_between_the_credential_check_and_the_write_is_also_revoked(job, monkeypatch) -> None:
    """The service's own refusal of an ended job reaches the job as the same 401, never a 409."""
    import jobs.api.checkpoints as view_module

    def ended(**kwargs: Any) -> Any:
        from jobs.errors import JobStateError

        raise JobStateError("ended")

    monkeypatch.setattr(view_module, "checkpoint_record", ended)
    response = as_job(job_token(job.pk)).post(url(job.pk), report(), format="json")
    assert response.status_code == 401 and "revoked" in response.json()["detail"]


def test_a_user_session_or_token_cannot_report(client, lead, platform_admin, job) -> None:
    client.force_login(lead)
    assert client.post(url(job.pk), report(), content_type="application/json").status_code == 401
    by_token = APIClient()
    by_token.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=platform_admin).key}")
    assert by_token.post(url(job.pk), report(), format="json").status_code == 401
    forced = APIClient()
    forced.force_authenticate(platform_admin)  # even an admin's authenticated request: reports come from the job
    assert forced.post(url(job.pk), report(), format="json").status_code in (401, 403)
    assert checkpoints_of(job) == []


def test_the_job_credential_opens_nothing_else(job) -> None:
    client = as_job(job_token(job.pk))
    for path in (
        "/api/v1/jobs/",
        f"/api/v1/jobs/{job.pk}/",
        f"/api/v1/jobs/{job.pk}/events/",
        url(job.pk),
        "/api/v1/queue/",
        "/api/v1/teams/",
    ):
        assert client.get(path).status_code == 401, path
    assert client.post(f"/api/v1/jobs/{job.pk}/cancel/", {}, format="json").status_code == 401
    job.refresh_from_db()
    assert job.state == "running"


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"step": -1}, "step", "greater than or equal to 0"),
        ({"step": "ten"}, "step", "valid integer"),
        ({"step": True}, "step", "valid integer"),
        ({"step": 2**53}, "step", "less than or equal to"),
        ({"saved_at": "yesterday"}, "saved_at", "wrong format"),
        ({"saved_at": None}, "saved_at", "may not be null"),
        ({"size_bytes": -5}, "size_bytes", "greater than or equal to 0"),
        ({"duration_s": -0.5}, "duration_s", "greater than or equal to 0"),
        ({"path": "x" * 1001}, "path", "no more than 1000 characters"),
        ({"replica": -1}, "replica", "greater than or equal to 0"),
        ({"replica": 1}, "replica", "has 1 replica, numbered 0 to 0"),
    ],
)
def test_each_field_is_checked_with_a_message(job, fields: dict[str, Any], field: str, words: str) -> None:
    response = as_job(job_token(job.pk)).post(url(job.pk), report(**fields), format="json")
    assert response.status_code == 400
    assert list(response.json()) == [field]
    assert words in response.json()[field][0]
    assert checkpoints_of(job) == []


def test_step_and_saved_at_are_required(job) -> None:
    response = as_job(job_token(job.pk)).post(url(job.pk), {}, format="json")
    assert response.status_code == 400
    assert set(response.json()) == {"step", "saved_at"}


def test_the_services_checks_come_back_as_field_errors(job) -> None:
    client = as_job(job_token(job.pk))
    future = client.post(url(job.pk), report(saved_at=(timezone.now() + timedelta(hours=1)).isoformat()), format="json")
    assert future.status_code == 400 and "is in the future" in future.json()["saved_at"][0]
    early = client.post(url(job.pk), report(saved_at=(job.submitted_at - timedelta(days=1)).isoformat()), format="json")
    assert early.status_code == 400 and "before the job was submitted" in early.json()["saved_at"][0]
    assert checkpoints_of(job) == []


def test_a_report_must_be_json(job) -> None:
    response = as_job(job_token(job.pk)).post(url(job.pk), report(), format="multipart")
    assert response.status_code == 415


def test_reports_are_throttled_per_job(job, other_job, monkeypatch) -> None:
    # DRF's throttles copy the rates when they are imported: the class attribute is what to patch.
    monkeypatch.setattr(SimpleRateThrottle, "THROTTLE_RATES", {"job_report": "3/min"})
    client = as_job(job_token(job.pk))
    codes = [client.post(url(job.pk), report(step=step), format="json").status_code for step in range(4)]
    assert codes == [201, 201, 201, 429]
    assert 1 <= int(client.post(url(job.pk), report(step=9), format="json")["Retry-After"]) <= 60
    # Another job has a budget of its own.
    assert as_job(job_token(other_job.pk)).post(url(other_job.pk), report(), format="json").status_code == 201


def test_the_report_throttle_lets_reports_through_while_the_cache_is_down(job, monkeypatch) -> None:
    monkeypatch.setattr(SimpleRateThrottle, "THROTTLE_RATES", {"job_report": "1/min"})
    dead = RedisCache("redis://127.0.0.1:1/0", {"OPTIONS": {"socket_connect_timeout": 0.2}})
    monkeypatch.setattr(SimpleRateThrottle, "cache", dead)
    client = as_job(job_token(job.pk))
    assert [client.post(url(job.pk), report(step=s), format="json").status_code for s in range(3)] == [201] * 3


# --- reading them -----------------------------------------------------------------------------------------------


def _recorded(job) -> None:  # type: ignore[no-untyped-def]
    now = timezone.now()
    for step, minutes in ((200, 30), (100, 60)):
        checkpoint_record(
            job=job,
            report=CheckpointReport(
                step=step, saved_at=now - timedelta(minutes=minutes), size_bytes=10, duration_s=1.25, path=f"/c/{step}"
            ),
            now=now,
        )
    JobEvent.objects.create(job=job, type="checkpointed", at=now - timedelta(minutes=10), details={})


@pytest.mark.parametrize("persona", ["lead", "member", "platform_admin"])
def test_the_team_and_admins_read_the_checkpoints_oldest_first(request, job, persona: str) -> None:
    _recorded(job)
    client = APIClient()
    client.force_authenticate(request.getfixturevalue(persona))
    response = client.get(url(job.pk))
    assert response.status_code == 200
    rows = response.json()
    assert [row["step"] for row in rows] == [100, 200, None]
    assert rows[0] == {
        "step": 100,
        "saved_at": rows[0]["saved_at"],
        "size_bytes": 10,
        "duration_s": 1.25,
        "path": "/c/100",
        "replica": 0,
        "source": "job",
    }
    # A checkpoint the cluster reported by time alone.
    assert rows[2] | {"saved_at": None} == {
        "step": None,
        "saved_at": None,
        "size_bytes": None,
        "duration_s": None,
        "path": "",
        "replica": None,
        "source": "",
    }


@pytest.mark.parametrize("persona", ["outsider", "finance_user"])
def test_outsiders_and_finance_get_404(request, job, persona: str) -> None:
    _recorded(job)
    client = APIClient()
    client.force_authenticate(request.getfixturevalue(persona))
    response = client.get(url(job.pk))
    assert response.status_code == 404
    assert "/c/100" not in response.content.decode()


def test_reading_needs_a_user(job) -> None:
    assert APIClient().get(url(job.pk)).status_code == 401
    assert APIClient().get(url("abc")).status_code == 401


def test_an_unknown_job_is_404(lead) -> None:
    client = APIClient()
    client.force_authenticate(lead)
    for target in (999_999, "abc", 2**70):
        assert client.get(url(target)).status_code == 404, target
