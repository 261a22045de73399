"""A team lead finds last week's job in two clicks from the dashboard and cancels pending work from the jobs page;
the page fits a phone's width."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.models import Job
from tests.browser.conftest import assert_fits_width, save_screenshot, sign_in
from tests.factories import JobFactory, MembershipFactory, TeamFactory, UserFactory
from tests.portal.fleet import fleet, running_job

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def org():
    nlp = TeamFactory(name="Language Models", slug="nlp", namespace="team-nlp")
    vision = TeamFactory(name="Computer Vision", slug="vision", namespace="team-vision")
    lead = MembershipFactory(team=nlp, role="lead", user=UserFactory(username="nlp-lead")).user
    now = timezone.now()
    running_job(nlp, fleet(), name="llama-pretrain", gpu_index=1)
    JobFactory(
        team=nlp,
        name="last-week-eval",
        state="completed",
        submitted_by=lead,
        submitted_at=now - timedelta(days=6),
        started_at=now - timedelta(days=6),
        finished_at=now - timedelta(days=6) + timedelta(hours=2),
    )
    JobFactory(team=nlp, name="waiting-sweep", state="pending", submitted_by=lead)
    JobFactory(team=vision, name="secret-detector", state="pending")
    return {"nlp": nlp, "lead": lead}


def test_lead_finds_and_cancels_jobs_on_the_jobs_page(live_server, page, org) -> None:
    sign_in(page, live_server.url, "nlp-lead")
    page.wait_for_selector("h1:has-text('Language Models')")
    page.click("[data-testid=all-jobs-link]")  # first click: every job of the team
    page.wait_for_selector("h1:has-text('Jobs')")
    assert "secret-detector" not in page.content()
    page.click("text=last-week-eval")  # second click: last week's job
    page.wait_for_selector("h1:has-text('last-week-eval')")

    page.goto(f"{live_server.url}/teams/nlp/")
    page.click("[data-testid=pending-link]")
    page.wait_for_selector("[data-testid=job-count]:has-text('1 job matches')")
    save_screenshot(page, "jobs-pending")
    page.check("input[name=selected]")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("button:has-text('Cancel selected')")
    page.wait_for_selector("text=Cancelled 1 job.")
    assert "state=pending" in page.url  # back on the same filtered view
    assert Job.objects.get(name="waiting-sweep").state == "cancelled"


def test_jobs_page_fits_a_phone(live_server, phone_page, org) -> None:
    sign_in(phone_page, live_server.url, "nlp-lead")
    phone_page.goto(f"{live_server.url}/jobs/?sort=name")
    phone_page.wait_for_selector("h1:has-text('Jobs')")
    assert_fits_width(phone_page)
    save_screenshot(phone_page, "jobs-phone")
