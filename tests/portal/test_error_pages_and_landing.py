"""Pages around the edges: finance lands on billing and its navigation offers only what it can use; the project's
404 page (through the base layout) and 500 page (no context needed); the favicon; a 403 logged as one line."""

from __future__ import annotations

import logging
import sys

import pytest
from django.contrib.staticfiles import finders
from django.template.loader import render_to_string
from django.templatetags.static import static
from django.test import Client, RequestFactory
from django.urls import reverse
from django.views.defaults import server_error
from pytest_django.asserts import assertContains, assertNotContains, assertTemplateUsed

from portal.log_filters import ForbiddenOnOneLine
from tests.factories import JobEventFactory, JobFactory, MembershipFactory, ProjectFactory

pytestmark = pytest.mark.django_db

TEAM_LINKS = ("Dashboard", "Submit", "Queue")


def test_finance_without_a_team_lands_on_billing(client: Client, finance_user) -> None:
    client.force_login(finance_user)
    response = client.get(reverse("home"))
    assert response.status_code == 302
    assert response.url == reverse("billing:reports")


def test_finance_navigation_leaves_out_the_team_pages(client: Client, finance_user) -> None:
    client.force_login(finance_user)
    body = client.get(reverse("billing:reports")).content.decode()
    for label in TEAM_LINKS:
        assert f">{label}</a>" not in body, label
    for label in ("Finance", "Cluster", "API token"):
        assert f">{label}</a>" in body, label


def test_finance_who_is_also_a_team_member_keeps_the_team_pages(client: Client, finance_user, team) -> None:
    MembershipFactory(team=team, user=finance_user, role="member")
    client.force_login(finance_user)
    assert client.get(reverse("home")).status_code == 302  # to the one team's dashboard
    assert client.get(reverse("home")).url != reverse("billing:reports")
    body = client.get(reverse("billing:reports")).content.decode()
    for label in (*TEAM_LINKS, "Finance"):
        assert f">{label}</a>" in body, label


def test_a_lead_keeps_the_team_pages_and_has_no_finance_link(client: Client, lead) -> None:
    client.force_login(lead)
    body = client.get(reverse("cluster")).content.decode()
    for label in TEAM_LINKS:
        assert f">{label}</a>" in body, label
    assert ">Finance</a>" not in body


def test_an_unknown_address_is_the_projects_404_page_in_the_base_layout(client: Client, lead) -> None:
    client.force_login(lead)
    response = client.get("/no-such-page/")
    assert response.status_code == 404
    assertTemplateUsed(response, "404.html")
    assertTemplateUsed(response, "base.html")
    assertContains(response, "Page not found", status_code=404)
    assertContains(response, "/no-such-page/", status_code=404)
    assertContains(response, f"Sign out {lead.username}", status_code=404)  # the navigation is there


def test_an_outsiders_job_page_is_the_same_404(client: Client, outsider, team) -> None:
    job = JobFactory(team=team, project=ProjectFactory(team=team))
    client.force_login(outsider)
    response = client.get(reverse("jobs:detail", args=[job.pk]))
    assert response.status_code == 404
    assertTemplateUsed(response, "404.html")


def test_the_404_page_works_signed_out(client: Client) -> None:
    response = client.get("/no-such-page/")
    assertContains(response, "Page not found", status_code=404)
    assertNotContains(response, "Sign out", status_code=404)


def test_the_500_page_needs_no_context() -> None:
    assert "Something went wrong" in render_to_string("500.html")
    response = server_error(RequestFactory().get("/"))
    assert response.status_code == 500
    assert b"Something went wrong" in response.content


def test_the_favicon_is_linked_and_served(client: Client) -> None:
    assert finders.find("favicon.svg")
    body = client.get(reverse("login")).content.decode()
    assert f'<link rel="icon" href="{static("favicon.svg")}"' in body
    response = client.get("/favicon.ico")
    assert response.status_code == 301
    assert response.url == static("favicon.svg")


def test_a_403_is_logged_as_one_line(client: Client, platform_admin, caplog: pytest.LogCaptureFixture) -> None:
    event = JobEventFactory()
    client.force_login(platform_admin)
    url = reverse("admin:jobs_jobevent_change", args=[event.pk])
    with caplog.at_level(logging.WARNING, logger="django.request"):
        assert client.post(url, {"_save": "Save"}).status_code == 403
    records = [r for r in caplog.records if r.name == "django.request"]
    assert len(records) == 1
    assert records[0].exc_info is None
    assert records[0].getMessage() == f"Forbidden (Permission denied): {url}"
    assert "Traceback" not in caplog.text


def test_the_filter_leaves_other_records_their_traceback() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        info = sys.exc_info()
    failing = logging.LogRecord("django.request", logging.ERROR, __file__, 1, "Internal Server Error", (), info)
    failing.status_code = 500
    refused = logging.LogRecord("django.request", logging.WARNING, __file__, 1, "Forbidden", (), info)
    refused.status_code = 403
    one_line = ForbiddenOnOneLine()
    assert one_line.filter(failing) and one_line.filter(refused)
    assert failing.exc_info is info
    assert refused.exc_info is None
