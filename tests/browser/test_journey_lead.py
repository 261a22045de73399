"""A team lead's day in the browser: from the dashboard's running count to a running job's page, where each
replica's log shows the lifecycle lines the simulated fleet produced and downloads as the same lines; and from
the dashboard's month cost to the team's billing page and its CSV, which agree with it to the cent while the
current hour is still open (a provisional line)."""

from __future__ import annotations

import csv
import io
import re
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from billing.services import ledger_close_due
from jobs.models import Allocation, Job
from jobs.services import job_submit
from scheduler.loop.apply import Retry
from scheduler.loop.cycle import cycle_run
from scheduler.models import Node
from tests.browser.conftest import save_screenshot, sign_in
from tests.factories import MembershipFactory, TeamFactory, UserFactory
from tests.portal.fleet import fleet as small_fleet
from tests.portal.fleet import running_job
from tests.scheduler.loop_helpers import Clock, fleet, fleet_seed, team_seed

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

NO_WAIT = Retry(attempts=3, backoff_s=0.0, sleep=lambda _s: None)
LIFECYCLE_LINE = re.compile(
    r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ (bound to node|checkpoint saved|stopped on node|asked to stop)"
)


def _dollars(text: str) -> Decimal:
    """``$1,234.56`` as shown on a page → ``Decimal('1234.56')``."""
    match = re.search(r"\$([\d,]+\.\d\d)", text)
    assert match, f"no dollar figure in {text!r}"
    return Decimal(match.group(1).replace(",", ""))


@pytest.fixture
def running_gang():
    """A 2-replica training job of the lead's team, bound by a real scheduling cycle on the simulated fleet and
    run long enough (virtual time) for replica 0 to save a checkpoint."""
    fleet_seed()
    team = team_seed("nlp")
    lead = MembershipFactory(team=team, role="lead", user=UserFactory(username="nlp-lead")).user
    clock = Clock()
    gateway = fleet(clock)
    job = job_submit(
        team=team,
        spec={
            "name": "llama-pretrain",
            "kind": "training",
            "gpus": 2,
            "replicas": 2,
            "duration_s": 3000,
            "checkpoint_interval_s": 600,
        },
        actor=lead,
        now=clock.now,
    )
    cycle_run(gateway=gateway, retry=NO_WAIT)
    clock.advance(13)  # 780 virtual seconds at 60×: one periodic save at 600 s
    cycle_run(gateway=gateway, retry=NO_WAIT)
    job.refresh_from_db()
    assert job.state == "running"
    return job


def test_lead_reads_each_replicas_log_and_downloads_it(live_server, journey_page, running_gang) -> None:
    page, job = journey_page, running_gang
    nodes = {a.replica: a.node.name for a in Allocation.objects.filter(job=job)}
    sign_in(page, live_server.url, "nlp-lead")
    page.wait_for_selector("h1:has-text('NLP')")  # a lead of one team lands on its dashboard
    assert page.inner_text("[data-testid=running-count]") == "1"

    page.click("[data-testid=running-link]")  # the count is a link to the jobs page, filtered
    page.wait_for_selector("h1:has-text('Jobs')")
    assert "state=running" in page.url
    page.get_by_role("link", name="llama-pretrain").click()
    page.wait_for_selector("h1:has-text('llama-pretrain')")

    logs = page.locator("[data-testid=job-logs]")
    assert "Simulated fleet: lifecycle only" in logs.inner_text()
    assert "replica 0 of 2" in logs.inner_text()
    replica0 = logs.locator("[data-testid=log-text]").inner_text().strip().splitlines()
    assert all(LIFECYCLE_LINE.match(line) for line in replica0), replica0  # nothing but what happened
    assert f"bound to node {nodes[0]}" in replica0[0]
    assert any("checkpoint saved" in line for line in replica0)
    save_screenshot(page, "journey-lead-job-log")

    # The other replica, swapped in by htmx: its own binding, and no save (replica 0 saves for the job).
    page.fill("#id_log_replica", "1")
    page.locator("[data-testid=job-logs]").get_by_role("button", name="Show").click()
    page.wait_for_selector("[data-testid=job-logs] h2:has-text('replica 1 of 2')")
    replica1 = page.locator("[data-testid=log-text]").inner_text().strip().splitlines()
    assert len(replica1) == 1 and f"bound to node {nodes[1]}" in replica1[0]

    with page.expect_download() as download_info:
        page.click("[data-testid=log-download]")
    download = download_info.value
    assert download.suggested_filename == f"job-{job.pk}-replica-1.log"
    assert Path(download.path()).read_text().strip().splitlines() == replica1
    save_screenshot(page, "journey-lead-job-log-replica-1")


@pytest.fixture
def costs(server_now):
    """Team nlp: a job running for 3 hours (closed hours in the ledger, the current one open) and one that ran
    from 5 to 4 hours ago; team vision, whose costs the lead must not see."""
    nlp = TeamFactory(name="Language Models", slug="nlp", namespace="team-nlp")
    vision = TeamFactory(name="Computer Vision", slug="vision", namespace="team-vision")
    lead = MembershipFactory(team=nlp, role="lead", user=UserFactory(username="nlp-lead")).user
    node = small_fleet()
    # Registered before any of the work below ran, so the month's capacity covers it.
    Node.objects.filter(pk=node.pk).update(created_at=server_now - timedelta(days=2))
    running_job(
        nlp, node, name="llama-pretrain", gpu_index=1, started_at=server_now - timedelta(hours=3), submitted_by=lead
    )
    ended = running_job(
        nlp, node, name="eval-sweep", gpu_index=2, started_at=server_now - timedelta(hours=5), submitted_by=lead
    )
    Allocation.objects.filter(job=ended).update(ended_at=server_now - timedelta(hours=4), end_reason="completed")
    Job.objects.filter(pk=ended.pk).update(state="completed", finished_at=server_now - timedelta(hours=4))
    running_job(vision, node, name="secret-detector", gpu_index=3, started_at=server_now - timedelta(hours=2))
    ledger_close_due(now=server_now)
    return nlp


def test_lead_sees_todays_cost_agree_on_dashboard_billing_page_and_csv(live_server, journey_page, costs) -> None:
    page = journey_page
    sign_in(page, live_server.url, "nlp-lead")
    page.wait_for_selector("h1:has-text('Language Models')")
    dashboard_cost = _dollars(page.inner_text("[data-testid=month-cost]"))
    assert dashboard_cost > 0
    assert _dollars(page.inner_text("[data-testid=month-provisional]")) > 0  # the open hour counts already
    save_screenshot(page, "journey-lead-dashboard-cost")

    page.click("[data-testid=costs-link]")
    page.wait_for_selector("h1:has-text('Language Models')")
    assert "/billing/teams/nlp/" in page.url
    assert _dollars(page.inner_text("[data-testid=lines-total]")) == dashboard_cost
    breakdown = page.locator("[data-testid=breakdown]")
    running_row = breakdown.locator("tr", has_text="llama-pretrain")
    assert running_row.locator("[data-testid=provisional-line]").count() == 1  # the current hour, marked
    assert "provisional" in page.inner_text("[data-testid=provisional-note]")
    assert "eval-sweep" in breakdown.inner_text()
    assert page.locator("main .messages .error").count() == 0
    assert "secret-detector" not in page.content() and "Computer Vision" not in page.content()
    page.wait_for_selector("[data-chart] .main-svg")
    save_screenshot(page, "journey-lead-billing")

    with page.expect_download() as download_info:
        page.get_by_role("link", name="Summary CSV").click()
    download = download_info.value
    assert "nlp" in download.suggested_filename and download.suggested_filename.endswith(".csv")
    rows = list(csv.DictReader(io.StringIO(Path(download.path()).read_text())))
    total = next(row for row in rows if row["line"] == "total")
    assert Decimal(total["total_usd"]).quantize(Decimal("0.01")) == dashboard_cost
    assert any(row["provisional"] == "yes" for row in rows if row["line"] == "usage")
    assert {row["team"] for row in rows if row["line"] == "usage"} == {"nlp"}
