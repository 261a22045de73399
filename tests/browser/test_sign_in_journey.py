"""A team lead signs in, sees their team and not others, changes nothing they shouldn't, and signs out."""

from __future__ import annotations

import pytest

from tests.browser.conftest import save_screenshot
from tests.factories import JobFactory, MembershipFactory, QuotaFactory, TeamFactory, UserFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_lead_signs_in_sees_own_team_and_signs_out(live_server, page) -> None:
    nlp = TeamFactory(name="Language Models", slug="nlp", namespace="team-nlp")
    QuotaFactory(team=nlp, gpu_class="H100", guaranteed_gpus=8, burst_gpus=16)
    JobFactory(team=nlp, name="llama-finetune")
    vision = TeamFactory(name="Computer Vision", slug="vision", namespace="team-vision")
    JobFactory(team=vision, name="secret-detector")
    MembershipFactory(team=nlp, role="lead", user=UserFactory(username="nlp-lead"))

    page.goto(f"{live_server.url}/")
    assert "/accounts/login/" in page.url
    save_screenshot(page, "login")

    page.fill("#id_username", "nlp-lead")
    page.fill("#id_password", "wrong")
    page.click("button[type=submit]")
    assert "Please enter a correct username and password" in page.content()

    page.fill("#id_username", "nlp-lead")
    page.fill("#id_password", "pw-for-tests")
    page.click("button[type=submit]")
    # A lead of one team lands on that team's dashboard; the queue shows its jobs and no other team's.
    page.wait_for_selector("h1:has-text('Language Models')")
    assert page.locator("[data-testid=pending-count]").inner_text() == "1"
    assert page.locator("a[href='/admin/']").count() == 0  # not staff: no admin link
    save_screenshot(page, "home")
    page.goto(f"{live_server.url}/queue/")
    body = page.content()
    assert "llama-finetune" in body
    assert "Computer Vision" not in body and "secret-detector" not in body

    page.click("text=Sign out nlp-lead")
    page.wait_for_url("**/accounts/login/")


def test_admin_reaches_the_fleet_in_the_admin(live_server, page) -> None:
    UserFactory(username="root", is_staff=True, is_superuser=True)
    page.goto(f"{live_server.url}/admin/")
    page.fill("#id_username", "root")
    page.fill("#id_password", "pw-for-tests")
    page.click("input[type=submit]")
    page.wait_for_selector("text=Fleet inventory")
    page.goto(f"{live_server.url}/admin/scheduler/node/")
    assert "Select node to change" in page.content()
    save_screenshot(page, "admin-nodes")
