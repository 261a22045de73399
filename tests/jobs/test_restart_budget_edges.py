"""The restart budget at every edge: the job-spec reader checks ``restart_limit`` (a scenario, the API, the
form), a submit stores it (default 3), and the job page and the API detail show "n of limit" with the last
exit reason."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from jobs.models import Job
from jobs.services import job_fail_or_restart, job_submit
from scheduler.core.sizing.bounds import DEFAULT_RESTART_LIMIT, MAX_RESTART_LIMIT
from scheduler.specs.fields import Errors
from scheduler.specs.job import parse_job
from tests.jobs.test_views_pages import SUBMIT
from tests.portal.fleet import fleet, running_job

OOM = "container main exited with code 137 OOMKilled"


def _parse(value: Any) -> tuple[Any, list[str]]:
    errors = Errors("spec.json")
    job = parse_job(errors, "job", {"id": "j", "team": "nlp", "gpus": 1, "restart_limit": value}, submitted_at=0.0)
    return job, errors.messages


@pytest.mark.parametrize("value", [0, 3, MAX_RESTART_LIMIT, 4.0])
def test_the_reader_accepts_a_whole_number_in_range(value: Any) -> None:
    job, messages = _parse(value)
    assert messages == [] and job is not None


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            -1,
            "must be a whole number of restarts from 0 to 100 (0: the first application failure fails the job), got -1",
        ),
        (
            MAX_RESTART_LIMIT + 1,
            f"from 0 to 100 (0: the first application failure fails the job), got {MAX_RESTART_LIMIT + 1}",
        ),
        (2.5, "must be an integer, got 2.5"),
        ("3", "must be an integer, got '3'"),
        (True, "must be an integer, got true"),
        (None, "must be an integer, got null"),
        (10**400, "must be an integer of ordinary size"),
    ],
)
def test_the_reader_refuses_anything_else_with_the_key(value: Any, message: str) -> None:
    job, messages = _parse(value)
    assert job is None
    assert len(messages) == 1 and messages[0].startswith("spec.json: job.restart_limit: ")
    assert message in messages[0]


@pytest.mark.django_db
def test_a_submit_stores_the_budget_and_defaults_to_three(team) -> None:
    assert job_submit(team=team, spec={"gpus": 1}, actor=None).restart_limit == DEFAULT_RESTART_LIMIT == 3
    assert job_submit(team=team, spec={"gpus": 1, "restart_limit": 0}, actor=None).restart_limit == 0
    assert job_submit(team=team, spec={"gpus": 1, "restart_limit": 7.0}, actor=None).restart_limit == 7


@pytest.mark.django_db
def test_the_api_submits_and_refuses_a_restart_limit(lead, team) -> None:
    client = APIClient()
    client.force_authenticate(lead)
    made = client.post("/api/v1/jobs/", {"team": "nlp", "gpus": 1, "restart_limit": 5}, format="json")
    assert made.status_code == 201
    assert (made.json()["restart_limit"], made.json()["restarts"], made.json()["last_exit_reason"]) == (5, 0, "")
    refused = client.post("/api/v1/jobs/", {"team": "nlp", "gpus": 1, "restart_limit": 500}, format="json")
    assert refused.status_code == 400
    assert "from 0 to 100" in refused.json()["restart_limit"][0]
    assert Job.objects.count() == 1


@pytest.mark.django_db
def test_the_submit_form_offers_the_budget_and_shows_its_errors(client, lead, team) -> None:
    fleet()
    client.force_login(lead)
    page = client.get(reverse("jobs:submit")).content.decode()
    assert 'name="restart_limit"' in page and 'value="3"' in page
    bad = client.post(reverse("jobs:submit"), {**SUBMIT, "team": team.pk, "restart_limit": "101"})
    assert bad.status_code == 200 and "restart_limit" in bad.context["form"].errors
    client.post(reverse("jobs:submit"), {**SUBMIT, "team": team.pk, "restart_limit": "0"})
    assert Job.objects.get(name="chat-7b").restart_limit == 0


@pytest.mark.django_db
def test_the_job_page_and_the_api_show_the_restarts_and_the_last_exit(client, member, outsider, team) -> None:
    node = fleet()
    job = running_job(team, node, name="trainer", submitted_by=member)
    client.force_login(member)
    fresh = client.get(reverse("jobs:detail", args=[job.pk])).content.decode()
    assert "0 of 3" in fresh and "Last exit" not in fresh

    job_fail_or_restart(job=job, exit_reason=OOM, at=timezone.now())
    page = client.get(reverse("jobs:detail", args=[job.pk])).content.decode()
    assert 'data-testid="restarts">1 of 3<' in page
    assert f'data-testid="last-exit">{OOM}<' in page
    assert "restart 1 of 3" in page  # the timeline's requeue entry
    status = client.get(reverse("jobs:detail", args=[job.pk]), headers={"HX-Request": "true"}).content.decode()
    assert "1 of 3" in status and OOM in status  # the polled status block keeps it current

    api = APIClient()
    api.force_authenticate(member)
    detail = api.get(f"/api/v1/jobs/{job.pk}/").json()
    assert (detail["restarts"], detail["restart_limit"], detail["last_exit_reason"]) == (1, 3, OOM)
    requeued = [e for e in detail["events"] if e["type"] == "requeued"]
    assert requeued[0]["details"]["message"] == "restart 1 of 3"
    listed = api.get("/api/v1/jobs/").json()["results"][0]
    assert listed["restarts"] == 1

    outsider_api = APIClient()
    outsider_api.force_authenticate(outsider)
    assert outsider_api.get(f"/api/v1/jobs/{job.pk}/").status_code == 404
    client.force_login(outsider)
    assert client.get(reverse("jobs:detail", args=[job.pk])).status_code == 404


@pytest.mark.django_db
def test_a_job_failed_by_its_spent_budget_shows_why(client, member, team) -> None:
    node = fleet()
    job = running_job(team, node, name="trainer", submitted_by=member, restart_limit=0)
    job_fail_or_restart(job=job, exit_reason=OOM, at=timezone.now())
    client.force_login(member)
    page = client.get(reverse("jobs:detail", args=[job.pk])).content.decode()
    assert f"{OOM}; no restarts allowed (restart_limit 0)" in page
    assert "0 of 0" in page
