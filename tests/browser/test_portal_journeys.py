"""A team lead submits, follows, reprioritises and cancels work in the browser; a member cannot
reprioritise; every main page is captured (non-blank) on a laptop and a phone."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.models import Job, JobEvent
from tests.browser.conftest import BROWSER_TIMEZONE, assert_fits_width, save_screenshot, sign_in
from tests.factories import MembershipFactory, QuotaFactory, TeamFactory, UserFactory
from tests.portal.fleet import fleet, pending_queue, running_job

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def org():
    nlp = TeamFactory(name="Language Models", slug="nlp", namespace="team-nlp")
    QuotaFactory(team=nlp, gpu_class="any", guaranteed_gpus=4, burst_gpus=8)
    QuotaFactory(team=nlp, gpu_class="A100", guaranteed_gpus=2, burst_gpus=6)
    vision = TeamFactory(name="Computer Vision", slug="vision", namespace="team-vision")
    lead = MembershipFactory(team=nlp, role="lead", user=UserFactory(username="nlp-lead")).user
    member = MembershipFactory(team=nlp, role="member", user=UserFactory(username="nlp-member")).user
    node = fleet()
    running_job(nlp, node, name="llama-pretrain", gpu_index=1)
    running_job(vision, node, name="secret-detector", gpu_index=0, mig_profile="3g.40gb", mig_start=4)
    pending_queue(vision, 2)  # positions 1 and 2: the lead's job will be third
    return {"nlp": nlp, "vision": vision, "lead": lead, "member": member, "node": node}


def test_lead_submits_follows_reprioritises_and_cancels(live_server, page, org) -> None:
    sign_in(page, live_server.url, "nlp-lead")
    page.wait_for_selector("h1:has-text('Language Models')")  # a lead of one team lands on its dashboard
    assert "llama-pretrain" in page.content() or page.locator("[data-testid=running-count]").inner_text() == "1"
    assert f"Times shown in {BROWSER_TIMEZONE}" in page.content()
    save_screenshot(page, "dashboard")

    page.click("nav >> text=Submit")
    page.wait_for_selector("h1:has-text('Submit a job')")
    page.fill("#id_name", "chat-7b")
    page.select_option("#id_kind", "inference")
    page.check("#id_request_by_0")  # by model profile
    page.fill("#id_params_b", "13")
    page.fill("#id_context", "8192")
    # The suggestion follows the typing (htmx): 13 B bf16 with an 8k context needs a 3g slice of an 80 GB A100.
    page.wait_for_selector("[data-testid=suggested]:has-text('MIG 3g.40gb')")
    assert "Memory estimate" in page.inner_text("#suggestion")
    save_screenshot(page, "submit")
    page.click("button:has-text('Submit job')")
    page.wait_for_selector("h1:has-text('chat-7b')")
    assert page.inner_text("[data-testid=why]") == "waiting for the next scheduling cycle"
    job = Job.objects.get(name="chat-7b")
    assert job.model == {"params_b": 13.0, "dtype": "bf16", "context": 8192, "batch": 1, "mode": "inference"}

    # The scheduling cycle (another service) writes positions, ETA and the reason; the pages only read them.
    Job.objects.filter(pk=job.pk).update(
        queue_position=3,
        team_queue_position=1,
        eta_at=timezone.now() + timedelta(minutes=20),
        state_reason="waits for a free 3g.40gb slice; 2 jobs are ahead",
    )
    page.click("nav >> text=Queue")
    row = page.locator(f"tr[data-job='{job.pk}']")
    row.wait_for()
    assert row.locator("[data-testid=position]").inner_text() == "#3"
    assert "2 jobs are ahead" in row.inner_text()
    save_screenshot(page, "queue")

    row.locator("a").first.click()
    page.wait_for_selector("h1:has-text('chat-7b')")
    assert page.inner_text("[data-testid=queue-position]") == "#3"
    page.select_option("#id_priority", "high")
    page.click("button:has-text('Change priority')")
    page.wait_for_selector("[data-testid=priority]:has-text('high priority')")
    assert re.search(r"Priority changed: normal → high\s+.*by nlp-lead", page.inner_text("[data-testid=timeline]"))
    save_screenshot(page, "job-detail")

    page.goto(f"{live_server.url}/teams/nlp/manage/")
    page.wait_for_selector(f"tr[data-job='{job.pk}']")
    save_screenshot(page, "manage")

    page.goto(f"{live_server.url}/jobs/{job.pk}/")
    page.once("dialog", lambda dialog: dialog.accept())
    page.fill("#id_reason", "wrong context length")
    page.click("button:has-text('Cancel job')")
    page.wait_for_selector("[data-testid=state]:has-text('cancelled')")
    events = list(JobEvent.objects.filter(job=job).values_list("type", "actor__username"))
    assert events == [("submitted", "nlp-lead"), ("priority_changed", "nlp-lead"), ("cancelled", "nlp-lead")]

    page.click("nav >> text=Cluster")
    page.wait_for_selector("[data-testid=free-gpus]")
    body = page.inner_text("#cluster-map")
    assert "vision" in body and "secret-detector" not in page.content()  # who holds it, not what
    save_screenshot(page, "cluster")

    page.click("nav >> text=API docs")
    page.wait_for_selector("text=Microcosm API")
    save_screenshot(page, "api-docs")


def test_member_cannot_reprioritise(live_server, page, org) -> None:
    job = running_job(org["nlp"], org["node"], name="colleague-job", gpu_index=2)
    sign_in(page, live_server.url, "nlp-member")
    page.goto(f"{live_server.url}/jobs/{job.pk}/")
    page.wait_for_selector("h1:has-text('colleague-job')")
    assert page.locator("button:has-text('Change priority')").count() == 0
    assert page.locator("button:has-text('Cancel job')").count() == 0  # not theirs
    assert "Only the team's lead can change this job's priority." in page.content()
    response = page.goto(f"{live_server.url}/teams/nlp/manage/")
    assert response.status == 403
    assert "Only a lead can do that" in page.content()
    # Members submit at normal or low priority only.
    page.goto(f"{live_server.url}/jobs/submit/")
    options = page.locator("#id_priority option").all_inner_texts()
    assert options == ["normal", "low"]
    save_screenshot(page, "member-submit")


def test_pages_read_well_on_a_phone(live_server, phone_page, org) -> None:
    sign_in(phone_page, live_server.url, "nlp-lead")
    for path, name in (
        ("/teams/nlp/", "phone-dashboard"),
        ("/jobs/submit/", "phone-submit"),
        ("/queue/", "phone-queue"),
        ("/cluster/", "phone-cluster"),
    ):
        phone_page.goto(f"{live_server.url}{path}")
        phone_page.wait_for_load_state("networkidle")
        assert_fits_width(phone_page)
        save_screenshot(phone_page, name)
