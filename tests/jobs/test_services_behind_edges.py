"""The services are the guarantee: with an edge's own role check switched off, the service still refuses, and
the edge turns the refusal into the answer it gives for its own check (API: 403 with the service's message;
pages: the message shown, nothing changed). Outsiders still get 404 before any service is called."""

from __future__ import annotations

import types

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

import jobs.api.views
import jobs.pages.forms
import jobs.pages.views
from jobs import access
from jobs.models import Job, JobEvent
from jobs.services import job_submit
from tests.factories import JobFactory, grant_production
from tests.jobs.test_views_pages import SUBMIT
from tests.portal.fleet import fleet

pytestmark = pytest.mark.django_db


def api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def leads_job(team, lead):
    return job_submit(team=team, spec={"gpus": 1}, actor=lead)


@pytest.fixture
def api_edge_open(monkeypatch):
    """The API's own checks let everyone with a role through (scoping, hence 404s, stays)."""
    monkeypatch.setattr(jobs.api.views, "require_cancel", lambda *args: None)
    monkeypatch.setattr(jobs.api.views, "require_manage", lambda *args: None)
    monkeypatch.setattr(
        jobs.api.views,
        "access",
        types.SimpleNamespace(
            priorities_allowed=lambda role: access.priorities_allowed(access.LEAD), can_manage=lambda role: True
        ),
    )


@pytest.mark.usefixtures("api_edge_open")
def test_api_answers_403_with_the_services_message_when_its_own_check_is_off(team, member, leads_job) -> None:
    client = api(member)
    checks = [
        (f"/api/v1/jobs/{leads_job.pk}/cancel/", {}, "was submitted by nlp-lead; a member cancels only"),
        (f"/api/v1/jobs/{leads_job.pk}/priority/", {"priority": "low"}, "can change a job's priority"),
        (f"/api/v1/jobs/{leads_job.pk}/rank/", {"rank": 2}, "can change a job's rank"),
        (
            "/api/v1/jobs/",
            {"team": "nlp", "name": "x", "kind": "training", "gpus": 1, "priority": "high"},
            "high needs",
        ),
        (
            "/api/v1/jobs/",
            {"team": "nlp", "name": "x", "kind": "training", "gpus": 1, "rank": -1},
            "orders the team's jobs",
        ),
        ("/api/v1/jobs/bulk-cancel/", {"team": "nlp", "job_ids": [leads_job.pk]}, "was submitted by nlp-lead"),
        ("/api/v1/queue/reorder/", {"team": "nlp", "job_ids": [leads_job.pk]}, "can reorder the team's jobs"),
    ]
    for path, body, message in checks:
        response = client.post(path, body, format="json")
        assert response.status_code == 403, (path, response.content)
        assert message in response.json()["detail"], (path, response.json())
    leads_job.refresh_from_db()
    assert (leads_job.state, leads_job.priority, leads_job.rank) == ("pending", "normal", 0)
    assert Job.objects.count() == 1 and list(JobEvent.objects.values_list("type", flat=True)) == ["submitted"]


@pytest.mark.usefixtures("api_edge_open")
def test_api_still_answers_404_to_an_outsider(team, outsider, leads_job) -> None:
    client = api(outsider)
    assert client.post(f"/api/v1/jobs/{leads_job.pk}/cancel/", {}, format="json").status_code == 404
    body = {"team": "nlp", "job_ids": [leads_job.pk]}
    assert client.post("/api/v1/jobs/bulk-cancel/", body, format="json").status_code == 404
    leads_job.refresh_from_db()
    assert leads_job.state == "pending"


@pytest.fixture
def pages_open(monkeypatch):
    """The pages' own checks let every member through."""
    monkeypatch.setattr(
        jobs.pages.views,
        "access",
        types.SimpleNamespace(
            team_role=access.team_role,
            roles_by_team=access.roles_by_team,
            ADMIN=access.ADMIN,
            priorities_allowed=lambda role: access.priorities_allowed(access.LEAD),
            priorities_offered=lambda role, team, kind=None: access.priorities_offered(access.LEAD, team, kind),
            can_manage=lambda role: True,
            can_cancel=lambda **kwargs: True,
        ),
    )


@pytest.mark.usefixtures("pages_open")
def test_pages_show_the_services_refusal_and_change_nothing(client, team, member, leads_job) -> None:
    client.force_login(member)
    response = client.post(reverse("jobs:cancel", args=[leads_job.pk]), follow=True)
    assert "a member cancels only the jobs they submitted" in response.content.decode()
    response = client.post(reverse("jobs:priority", args=[leads_job.pk]), {"priority": "high"}, follow=True)
    assert "can change a job&#x27;s priority" in response.content.decode()
    other = JobFactory(team=team, state="pending", submitted_by=None)
    response = client.post(
        reverse("jobs:manage", args=[team.slug]),
        {"action": "cancel", "selected": [str(leads_job.pk), str(other.pk)]},
        follow=True,
    )
    assert "was submitted by nlp-lead" in response.content.decode()
    response = client.post(reverse("jobs:manage", args=[team.slug]), {"action": f"up:{other.pk}"}, follow=True)
    assert "can reorder the team&#x27;s jobs" in response.content.decode()
    assert set(Job.objects.values_list("state", "priority", "rank")) == {("pending", "normal", 0)}
    assert list(JobEvent.objects.values_list("type", flat=True)) == ["submitted"]


def test_the_submit_page_shows_the_services_refusal_next_to_the_priority(client, team, member, monkeypatch) -> None:
    fleet()
    monkeypatch.setattr(jobs.pages.forms, "priorities_allowed", lambda role: access.priorities_allowed(access.LEAD))
    grant_production(team)  # granted to the team (SUBMIT is inference): the role is what refuses here
    client.force_login(member)
    response = client.post(reverse("jobs:submit"), {**SUBMIT, "team": team.pk, "priority": "production"})
    errors = response.context["form"].errors
    assert list(errors) == ["priority"] and "production needs team nlp's lead" in errors["priority"][0]
    assert not Job.objects.exists()
