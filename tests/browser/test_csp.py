"""The pages work under the Content-Security-Policy: a lead, finance and an admin go through the main pages
(htmx polling and the live suggestion, plotly charts, Swagger UI, confirm dialogs, the admin) and the browser
reports no violation of the policy, neither as a securitypolicyviolation event nor in the console."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.browser.conftest import BROWSER_TIMEZONE, sign_in
from tests.factories import MembershipFactory, QuotaFactory, TeamFactory, UserFactory
from tests.portal.fleet import fleet, running_job

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Runs in every document before its own scripts (Playwright injects it outside the page's policy): each
# violation the browser raises is written to the console, where the test collects it with Chrome's own
# "Refused to …" messages.
_REPORT_VIOLATIONS = """
document.addEventListener("securitypolicyviolation", function (e) {
  console.error("CSP violation: " + e.violatedDirective + " blocked " + (e.blockedURI || "inline") +
                " at " + e.sourceFile + ":" + e.lineNumber);
});
"""


@pytest.fixture
def watched(browser) -> Iterator[tuple[object, list[str]]]:
    """A page whose CSP violations and console errors end up in the returned list."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, timezone_id=BROWSER_TIMEZONE)
    context.add_init_script(_REPORT_VIOLATIONS)
    page = context.new_page()
    problems: list[str] = []

    def on_console(message) -> None:
        text = message.text
        if "CSP violation" in text or "Content Security Policy" in text or "Refused to" in text:
            problems.append(f"{page.url}: {text}")

    page.on("console", on_console)
    page.on("pageerror", lambda error: problems.append(f"{page.url}: uncaught {error}"))
    yield page, problems
    context.close()


@pytest.fixture
def org() -> dict[str, object]:
    nlp = TeamFactory(name="Language Models", slug="nlp", namespace="team-nlp")
    QuotaFactory(team=nlp, gpu_class="A100", guaranteed_gpus=2, burst_gpus=6)
    lead = MembershipFactory(team=nlp, role="lead", user=UserFactory(username="nlp-lead")).user
    node = fleet()
    job = running_job(nlp, node, name="llama-pretrain", gpu_index=1)
    UserFactory(username="root", is_staff=True, is_superuser=True)
    return {"nlp": nlp, "lead": lead, "job": job}


def test_a_leads_pages_raise_no_violation(live_server, watched, org) -> None:
    page, problems = watched
    sign_in(page, live_server.url, "nlp-lead")
    page.wait_for_selector("h1:has-text('Language Models')")
    page.wait_for_selector("#utilization-graph .main-svg")  # plotly drew the graph from static/js/utilization.js

    page.goto(f"{live_server.url}/jobs/submit/")
    page.fill("#id_name", "chat-7b")
    page.select_option("#id_kind", "inference")
    page.check("#id_request_by_0")
    page.fill("#id_params_b", "13")
    page.fill("#id_context", "8192")
    page.wait_for_selector("[data-testid=suggested]")  # htmx posted the form and swapped the suggestion in
    assert page.locator(".by[hidden]").count() > 0  # static/js/submit.js hid the other way of asking

    page.goto(f"{live_server.url}/cluster/")
    page.wait_for_selector("[data-testid=free-gpus]")

    # The cancel form asks first (data-confirm, static/js/portal.js); dismissing keeps the job running.
    page.goto(f"{live_server.url}/jobs/{org['job'].pk}/")
    asked: list[str] = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
    page.click("button:has-text('Cancel job')")
    page.wait_for_timeout(200)
    assert asked == ["Cancel llama-pretrain? It stops now and cannot be resumed."]
    assert "running" in page.inner_text("[data-testid=state]")

    page.goto(f"{live_server.url}/api/docs/")
    page.wait_for_selector("text=Microcosm API")
    page.wait_for_selector(".opblock")  # Swagger UI read the schema and listed the endpoints
    page.wait_for_load_state("networkidle")
    assert problems == []


def test_finance_and_admin_pages_raise_no_violation(live_server, watched, org) -> None:
    page, problems = watched
    sign_in(page, live_server.url, "root")
    page.goto(f"{live_server.url}/billing/")
    page.wait_for_selector("[data-chart] .main-svg")  # plotly drew the finance charts
    page.goto(f"{live_server.url}/billing/advisor/")
    page.wait_for_load_state("networkidle")
    page.goto(f"{live_server.url}/admin/")
    page.wait_for_selector("text=Fleet inventory")
    page.goto(f"{live_server.url}/admin/scheduler/node/")
    page.wait_for_selector("#result_list")
    page.goto(f"{live_server.url}/admin/axes/accessattempt/")
    page.wait_for_load_state("networkidle")
    assert problems == []


def test_the_lockout_page_raises_no_violation(live_server, watched, org) -> None:
    page, problems = watched
    for _ in range(5):
        sign_in(page, live_server.url, "nlp-lead", password="wrong")
    assert "Too many failed sign-ins" in page.inner_text("[data-testid=locked-out]")
    assert problems == []
