"""A platform admin in the browser: from the portal to the Django admin, where changing a pending job's priority
goes through the jobs service and shows up in the job's timeline on the portal's job page, a running job's
request reads but does not edit, and a node's GPU count changes only after the form said which GPUs it creates
and the admin confirmed."""

from __future__ import annotations

import pytest

from scheduler.gpu_count import gpu_count_change_summary
from scheduler.models import Gpu, Node
from tests.browser.conftest import save_screenshot, sign_in
from tests.factories import JobFactory, MembershipFactory, TeamFactory, UserFactory
from tests.portal.fleet import fleet, running_job

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def org(platform_admin):
    nlp = TeamFactory(name="Language Models", slug="nlp", namespace="team-nlp")
    lead = MembershipFactory(team=nlp, role="lead", user=UserFactory(username="nlp-lead")).user
    node = fleet()
    running = running_job(nlp, node, name="llama-pretrain", gpu_index=1, submitted_by=lead)
    pending = JobFactory(team=nlp, name="chat-finetune", state="pending", priority="normal", submitted_by=lead)
    return {"node": node, "running": running, "pending": pending}


def _open_in_admin(page, model: str, name: str) -> None:
    """From the admin's index: the list of ``model`` (its row in the app list), searched for ``name``, then the
    change page of that row."""
    page.get_by_role("link", name="Microcosm administration").click()  # the header: back to the index
    page.locator(f"#content-main tr.model-{model} th a").click()
    page.fill("#searchbar", name)
    page.press("#searchbar", "Enter")
    page.locator("#result_list").get_by_role("link", name=name, exact=True).click()
    page.wait_for_selector("#content h2, #content h1")


def test_admin_changes_a_priority_and_the_job_page_shows_it(live_server, journey_page, org) -> None:
    page = journey_page
    sign_in(page, live_server.url, "dave")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Admin").click()
    page.wait_for_selector("text=Microcosm administration")

    _open_in_admin(page, "job", "chat-finetune")
    page.select_option("#id_priority", "high")
    page.get_by_role("button", name="Save", exact=True).click()
    page.wait_for_selector(".messagelist .success")
    save_screenshot(page, "journey-admin-job-saved")

    # A running job: what it asked for is shown, not editable; what the services change still is.
    _open_in_admin(page, "job", "llama-pretrain")
    for field in ("team", "kind", "gpus", "mig_profile", "replicas", "gpu_model"):
        assert page.locator(f"#id_{field}").count() == 0, field
    assert "1" in page.locator(".field-gpus .readonly").inner_text()
    assert page.locator("#id_priority").is_editable()
    save_screenshot(page, "journey-admin-running-job")

    # Back in the portal, the job page's timeline has the admin's change, by the admin.
    page.get_by_role("link", name="View site").click()
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Jobs").click()
    page.get_by_role("link", name="chat-finetune").click()
    page.wait_for_selector("h1:has-text('chat-finetune')")
    assert "high priority" in page.inner_text("[data-testid=priority]")
    # text_content: the timeline may sit in a folded <details>, whose text is in the page but not rendered.
    timeline = " ".join((page.locator("[data-testid=timeline]").text_content() or "").split())
    assert "Priority changed: normal → high" in timeline
    assert timeline.index("by dave") > timeline.index("Priority changed")
    save_screenshot(page, "journey-admin-job-timeline")


def test_admin_confirms_a_node_gpu_count_change(live_server, journey_page, org) -> None:
    page, node = journey_page, org["node"]
    sign_in(page, live_server.url, "dave")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Admin").click()
    page.wait_for_selector("text=Microcosm administration")
    _open_in_admin(page, "node", node.name)

    old, new = node.gpu_count, 2 * node.gpu_count
    page.fill("#id_gpu_count", str(new))
    page.get_by_role("button", name="Save", exact=True).click()
    errors = page.locator(".field-gpu_count .errorlist")
    errors.wait_for()
    summary = gpu_count_change_summary(name=node.name, old=old, new=new)
    assert f"creates GPUs {old}–{new - 1}" in summary  # says which GPUs, not only how many
    assert summary in errors.inner_text()
    assert "Confirm the GPU count change" in errors.inner_text()
    assert Gpu.objects.filter(node=node).count() == old  # nothing created before the confirmation
    save_screenshot(page, "journey-admin-node-confirm")

    page.check("#id_confirm_gpu_count")
    page.get_by_role("button", name="Save", exact=True).click()
    page.wait_for_selector(".messagelist .success")
    node = Node.objects.get(pk=node.pk)
    assert node.gpu_count == new
    assert sorted(Gpu.objects.filter(node=node).values_list("index", flat=True)) == list(range(new))
