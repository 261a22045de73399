"""The job's host resources, ``cpu`` and ``host_memory_gib`` (docs/job-spec.md): checked by the one spec reader,
stored by the submit, offered by the API and the form, and carried to the cluster backend in the BindRequest."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from jobs.models import Job
from jobs.services import job_submit
from scheduler.loop.apply import bind_request
from scheduler.specs.fields import Errors
from scheduler.specs.job import parse_job
from tests.jobs.test_views_pages import SUBMIT
from tests.portal.fleet import fleet


def _messages(**keys: Any) -> list[str]:
    errors = Errors("spec.json")
    parse_job(errors, "job", {"id": "j", "team": "nlp", "gpus": 1, **keys}, submitted_at=0.0)
    return errors.messages


def test_the_reader_accepts_cores_and_gib_in_range() -> None:
    assert _messages(cpu=0.5, host_memory_gib=128) == []


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"cpu": 0}, "job.cpu: must be from 0.1 to 1024 cores per replica (e.g. 16 or 0.5), got 0"),
        ({"cpu": "8"}, "job.cpu: must be a number, got '8'"),
        ({"host_memory_gib": 0.1}, "job.host_memory_gib: must be from 0.5 to 32768 GiB of host memory per replica"),
    ],
)
def test_the_reader_refuses_with_the_key_and_the_range(keys: dict[str, Any], message: str) -> None:
    (found,) = _messages(**keys)
    assert message in found


@pytest.mark.django_db
def test_a_submit_stores_them_and_the_bind_request_carries_them(team) -> None:
    job = job_submit(team=team, spec={"gpus": 1, "cpu": 12.5, "host_memory_gib": 96}, actor=None)
    assert (job.cpu, job.host_memory_gib) == (Decimal("12.500"), Decimal("96.00"))
    request = bind_request(job, [], resume=False)
    assert (request.cpu, request.host_memory_gib) == (12.5, 96.0)
    plain = job_submit(team=team, spec={"gpus": 1}, actor=None)
    assert (bind_request(plain, [], resume=False).cpu, plain.host_memory_gib) == (None, None)


@pytest.mark.django_db
def test_the_api_and_the_form_take_them_and_show_their_errors(client, lead, team) -> None:
    api = APIClient()
    api.force_authenticate(lead)
    made = api.post("/api/v1/jobs/", {"team": "nlp", "gpus": 1, "cpu": 4, "host_memory_gib": 32}, format="json")
    assert made.status_code == 201 and (made.json()["cpu"], made.json()["host_memory_gib"]) == ("4.000", "32.00")
    refused = api.post("/api/v1/jobs/", {"team": "nlp", "gpus": 1, "cpu": 5000}, format="json")
    assert refused.status_code == 400 and "from 0.1 to 1024 cores" in refused.json()["cpu"][0]

    fleet()
    client.force_login(lead)
    bad = client.post(reverse("jobs:submit"), {**SUBMIT, "team": team.pk, "host_memory_gib": "0.1"})
    assert bad.status_code == 200 and "host_memory_gib" in bad.context["form"].errors
    client.post(reverse("jobs:submit"), {**SUBMIT, "team": team.pk, "cpu": "6", "host_memory_gib": "48"})
    stored = Job.objects.get(name="chat-7b")
    assert (stored.cpu, stored.host_memory_gib) == (Decimal("6.000"), Decimal("48.00"))
