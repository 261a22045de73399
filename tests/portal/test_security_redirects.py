"""A ``next`` from a form only ever leads to a page of this site: the priority form with a foreign, scheme-less
or script ``next`` comes back to the job's page; the sign-in page (Django's own check) refuses them too."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

FOREIGN = [
    "https://evil.example.com/",
    "//evil.example.com",
    "//evil.example.com/jobs/1/",
    "javascript:alert(1)",
    "JavaScript:alert(document.cookie)",
    "/\\evil.example.com",  # browsers read a backslash as a slash: //evil.example.com
    "https:///evil.example.com",
    "http://testserver/queue/",  # this site, but downgraded from HTTPS (checked with secure=True below)
]


@pytest.fixture
def pending(team, lead):
    return JobFactory(team=team, name="waiting-job", submitted_by=lead, state="pending")


@pytest.mark.parametrize("target", FOREIGN)
def test_priority_next_to_another_site_comes_back_to_the_job(client: Client, lead, pending, target: str) -> None:
    client.force_login(lead)
    response = client.post(f"/jobs/{pending.pk}/priority/", {"priority": "high", "next": target}, secure=True)
    assert response.status_code == 302
    assert response["Location"] == f"/jobs/{pending.pk}/"
    pending.refresh_from_db()
    assert pending.priority == "high"  # the change itself went through


@pytest.mark.parametrize("target", ["/queue/", "/teams/nlp/manage/?page=2", "https://testserver/queue/"])
def test_priority_next_within_the_site_is_followed(client: Client, lead, pending, target: str) -> None:
    client.force_login(lead)
    response = client.post(f"/jobs/{pending.pk}/priority/", {"priority": "high", "next": target}, secure=True)
    assert response.status_code == 302 and response["Location"] == target


@pytest.mark.parametrize("target", ["9999999999", "queue", "jobs:detail"])
def test_priority_next_that_is_no_url_comes_back_to_the_job(client: Client, lead, pending, target: str) -> None:
    client.force_login(lead)
    response = client.post(f"/jobs/{pending.pk}/priority/", {"priority": "high", "next": target})
    assert response.status_code == 302 and response["Location"] == f"/jobs/{pending.pk}/"


@pytest.mark.parametrize("raw", ["\u00b2", "1\u00b2", "9" * 40])
def test_manage_ignores_ids_that_are_no_ascii_numbers(client: Client, lead, pending, raw: str) -> None:
    client.force_login(lead)
    for body in ({"action": "cancel", "selected": raw}, {"action": f"up:{raw}"}):
        response = client.post("/teams/nlp/manage/", body)
        assert response.status_code in (200, 302), response.status_code


def test_priority_without_next_comes_back_to_the_job(client: Client, lead, pending) -> None:
    client.force_login(lead)
    response = client.post(f"/jobs/{pending.pk}/priority/", {"priority": "low"})
    assert response["Location"] == f"/jobs/{pending.pk}/"


@pytest.mark.parametrize("target", FOREIGN[:5])
def test_sign_in_next_to_another_site_lands_home(client: Client, lead, target: str) -> None:
    response = client.post(
        "/accounts/login/", {"username": lead.username, "password": "pw-for-tests", "next": target}, secure=True
    )
    assert response.status_code == 302 and response["Location"] == "/"
