"""A team member in the browser: the jobs page (search, state filter, a bookmarkable view) with a box only on
the jobs they may cancel, and no cost breakdown link; their API token shown once, used, dated and revoked. An
outsider who follows a link to another team's job gets the project's 404 page; the favicon is served."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from datetime import timedelta

import pytest
from django.utils import timezone

from tests.browser.conftest import save_screenshot, sign_in
from tests.factories import JobFactory, MembershipFactory, TeamFactory, UserFactory
from tests.portal.fleet import fleet, running_job

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

DATE = re.compile(r"\d{1,2} [A-Z][a-z]{2} \d{4} \d\d:\d\d")


@pytest.fixture
def org():
    nlp = TeamFactory(name="Language Models", slug="nlp", namespace="team-nlp")
    vision = TeamFactory(name="Computer Vision", slug="vision", namespace="team-vision")
    lead = MembershipFactory(team=nlp, role="lead", user=UserFactory(username="nlp-lead")).user
    member = MembershipFactory(team=nlp, role="member", user=UserFactory(username="nlp-member")).user
    MembershipFactory(team=vision, role="lead", user=UserFactory(username="vision-lead"))
    now = timezone.now()
    running = running_job(nlp, fleet(), name="lead-pretrain", gpu_index=1, submitted_by=lead)
    JobFactory(team=nlp, name="my-sweep", state="pending", submitted_by=member, image="registry/sweep:1")
    JobFactory(team=nlp, name="lead-eval", state="pending", submitted_by=lead)
    JobFactory(
        team=nlp,
        name="my-last-week",
        state="completed",
        submitted_by=member,
        submitted_at=now - timedelta(days=6),
        started_at=now - timedelta(days=6),
        finished_at=now - timedelta(days=6) + timedelta(hours=1),
    )
    JobFactory(team=vision, name="secret-detector", state="pending")
    return {"nlp": nlp, "running": running}


def _row(page, name: str):
    return page.locator("tr", has=page.get_by_role("link", name=name, exact=True))


def test_member_searches_filters_and_bookmarks_the_jobs_page(live_server, journey_page, org) -> None:
    page = journey_page
    sign_in(page, live_server.url, "nlp-member")
    page.wait_for_selector("h1:has-text('Language Models')")
    assert page.locator("[data-testid=costs-link]").count() == 0  # costs are the lead's and finance's
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Jobs").click()
    page.wait_for_selector("h1:has-text('Jobs')")
    assert page.inner_text("[data-testid=job-count]") == "4 jobs"
    assert "secret-detector" not in page.content()
    # A box only on the member's own live job: they cancel what they submitted, not their lead's work.
    assert _row(page, "my-sweep").locator("input[name=selected]").count() == 1
    assert _row(page, "lead-eval").locator("input[name=selected]").count() == 0
    assert _row(page, "lead-pretrain").locator("input[name=selected]").count() == 0
    save_screenshot(page, "journey-member-jobs")

    # Search by submitter: only the lead's jobs, none of them the member's to cancel, so no bulk action.
    page.fill("#id_q", "nlp-lead")
    page.get_by_role("button", name="Show").click()
    page.wait_for_selector("[data-testid=job-count]:has-text('2 jobs match')")
    assert "q=nlp-lead" in page.url
    assert page.locator("input[name=selected]").count() == 0
    assert page.get_by_role("button", name="Cancel selected").count() == 0

    # Narrow to ended work and keep the view: the address is the bookmark.
    page.get_by_role("link", name="Clear").click()
    page.wait_for_selector("[data-testid=job-count]:has-text('4 jobs')")
    page.check("input[name=state][value=completed]")
    page.get_by_role("button", name="Show").click()
    page.wait_for_selector("[data-testid=job-count]:has-text('1 job matches')")
    bookmark = page.url
    assert "state=completed" in bookmark
    other_tab = page.context.new_page()
    other_tab.goto(bookmark)
    assert other_tab.inner_text("[data-testid=job-count]") == "1 job matches these filters"
    assert other_tab.is_checked("input[name=state][value=completed]")
    other_tab.get_by_role("link", name="my-last-week").click()
    other_tab.wait_for_selector("h1:has-text('my-last-week')")
    save_screenshot(other_tab, "journey-member-last-week-job")
    other_tab.close()


def _api_status(base_url: str, key: str) -> int:
    request = urllib.request.Request(f"{base_url}/api/v1/queue/", headers={"Authorization": f"Token {key}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            json.load(response)
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def test_member_makes_uses_and_revokes_an_api_token(live_server, journey_page, org) -> None:
    page = journey_page
    sign_in(page, live_server.url, "nlp-member")
    page.get_by_role("link", name="API token").click()
    page.wait_for_selector("h1:has-text('API token')")
    assert "You have no token yet." in page.inner_text("main")
    page.get_by_role("button", name="Create a token").click()

    key = page.input_value("#token")  # shown this once
    assert len(key) == 40
    assert "shown only this once" in page.inner_text("main")
    assert page.inner_text("[data-token-prefix]") == f"{key[:6]}…"
    assert DATE.search(page.locator("tr", has_text="Created").inner_text())
    assert page.locator("tr", has_text="Last used").inner_text().endswith("never")
    save_screenshot(page, "journey-member-token-new")

    assert _api_status(live_server.url, key) == 200  # a tool uses it

    page.get_by_role("link", name="API token").click()  # a later visit
    page.wait_for_selector("h1:has-text('API token')")
    assert page.locator("#token").count() == 0 and key not in page.content()
    assert page.inner_text("[data-token-prefix]") == f"{key[:6]}…"
    assert DATE.search(page.locator("tr", has_text="Last used").inner_text())
    save_screenshot(page, "journey-member-token-later")

    page.get_by_role("button", name="Revoke").click()
    page.wait_for_selector("text=Token revoked")
    assert "You have no token yet." in page.inner_text("main")
    assert _api_status(live_server.url, key) == 401


def test_outsider_gets_the_project_404_and_the_favicon_is_served(live_server, journey_page, org) -> None:
    page = journey_page
    sign_in(page, live_server.url, "vision-lead")
    page.wait_for_selector("h1:has-text('Computer Vision')")
    response = page.goto(f"{live_server.url}/jobs/{org['running'].pk}/")  # a link someone shared
    assert response is not None and response.status == 404
    assert page.inner_text("h1").startswith("Page not found")
    assert "lead-pretrain" not in page.content()
    assert page.get_by_role("navigation", name="Main").count() == 1  # the site's layout, not a bare error
    save_screenshot(page, "journey-outsider-404")
    page.get_by_role("link", name="start page").click()
    page.wait_for_selector("h1:has-text('Computer Vision')")

    icon = page.get_attribute("link[rel=icon]", "href")
    assert icon is not None
    linked = page.request.get(f"{live_server.url}{icon}")
    assert linked.ok and linked.headers["content-type"].startswith("image/svg+xml")
    legacy = page.request.get(f"{live_server.url}/favicon.ico")  # what browsers ask for unprompted
    assert legacy.ok and legacy.url.endswith(icon) and legacy.body() == linked.body()
    # It draws something: shown as an image at tab-icon size, the picture is not one colour.
    page.set_content(f'<img src="{live_server.url}{icon}" width="32" height="32" alt="icon">')
    page.wait_for_function("document.images[0].complete && document.images[0].naturalWidth > 0")
    save_screenshot(page, "journey-favicon")
