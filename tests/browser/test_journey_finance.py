"""Finance in the browser: lands on the billing page after signing in, with no Dashboard, Jobs, Submit or Queue to
go astray in; the month so far includes the open hour as provisional lines, and the page and its summary CSV
agree to the cent, team by team and in total; the jobs page sends finance back to the reports. The procurement
advisor says its advice in whole sentences, declines spot when most of its work is lost, and refuses a server
price of 1e308 with the range it accepts."""

from __future__ import annotations

import csv
import io
import re
from datetime import date, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from billing.advisor import BREAKEVEN_RANGES, number_text
from billing.models import GpuPrice
from billing.services import ledger_close_due
from scheduler.models import Node
from tests.browser.conftest import save_screenshot, sign_in
from tests.factories import MembershipFactory, TeamFactory, UserFactory
from tests.portal.fleet import fleet, running_job

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CENT = Decimal("0.01")


def _dollars(text: str) -> Decimal:
    """``$1,234.56`` as shown on a page → ``Decimal('1234.56')``."""
    match = re.search(r"\$([\d,]+\.\d\d)", text)
    assert match, f"no dollar figure in {text!r}"
    return Decimal(match.group(1).replace(",", ""))


@pytest.fixture
def month_so_far(server_now, finance_user):
    """Two teams with work running for hours on a priced A100 node: closed hours in the ledger, the current hour
    open; a catalog for the advisor. The finance user belongs to no team."""
    nlp = TeamFactory(name="Language Models", slug="nlp", namespace="team-nlp")
    vision = TeamFactory(name="Computer Vision", slug="vision", namespace="team-vision")
    MembershipFactory(team=nlp, role="lead", user=UserFactory(username="nlp-lead"))
    node = fleet()
    # Registered before any of the work below ran, so the month's capacity covers it.
    Node.objects.filter(pk=node.pk).update(created_at=server_now - timedelta(days=2))
    for tier, price in (("reserved", "2.1000"), ("on-demand", "3.4000"), ("spot", "1.2000")):
        GpuPrice.objects.create(
            gpu_model=node.gpu_model, tier=tier, price_per_gpu_hour=Decimal(price), effective_from=date(2026, 1, 1)
        )
    running_job(nlp, node, name="llama-pretrain", gpu_index=1, started_at=server_now - timedelta(hours=3))
    running_job(nlp, node, name="chat-serve", gpu_index=2, started_at=server_now - timedelta(hours=2))
    running_job(
        vision,
        node,
        name="detector",
        gpu_index=0,
        mig_profile="3g.40gb",
        mig_start=4,
        started_at=server_now - timedelta(hours=4),
    )
    ledger_close_due(now=server_now)
    return {"nlp": nlp, "vision": vision}


def test_finance_lands_on_billing_and_the_csv_agrees_to_the_cent(live_server, journey_page, month_so_far) -> None:
    page = journey_page
    sign_in(page, live_server.url, "carol")
    page.wait_for_url("**/billing/")
    nav = page.get_by_role("navigation", name="Main")
    assert nav.get_by_role("link", name="Finance").count() == 1
    for absent in ("Dashboard", "Jobs", "Submit", "Queue"):
        assert nav.get_by_role("link", name=absent, exact=True).count() == 0, absent
    assert "not a member of any team" not in page.content()

    # Every team, the current hour included and marked provisional.
    assert page.locator("tr.team-row").count() == 2
    assert page.locator("[data-testid=provisional-line]").count() == 3  # each running job's open hour
    assert "provisional" in page.inner_text("[data-testid=provisional-note]")
    assert _dollars(page.inner_text("[data-testid=provisional-total]")) > 0
    assert "add up to the cluster's cost" in page.inner_text("[data-testid=reconciliation]")
    assert page.locator("main .messages .error").count() == 0  # no inconsistency between ledger and fleet
    page_total = _dollars(page.inner_text("[data-testid=lines-total]"))
    cluster_cost = _dollars(page.inner_text("[data-testid=cluster-cost]"))
    team_totals = {
        slug: _dollars(page.locator(f"tr.team-row[data-team={slug}] td strong").inner_text())
        for slug in ("nlp", "vision")
    }
    assert all(total > 0 for total in team_totals.values())
    assert cluster_cost > sum(team_totals.values())  # the node's idle GPUs are paid for too
    page.wait_for_selector("[data-chart] .main-svg")
    save_screenshot(page, "journey-finance-billing")

    with page.expect_download() as download_info:
        page.get_by_role("link", name="Summary CSV").click()
    download = download_info.value
    assert "all-teams" in download.suggested_filename
    rows = list(csv.DictReader(io.StringIO(Path(download.path()).read_text())))
    by_line = {row["line"]: row for row in rows if row["line"] in ("total", "cluster-cost")}
    assert Decimal(by_line["total"]["total_usd"]).quantize(CENT) == page_total
    assert Decimal(by_line["cluster-cost"]["total_usd"]).quantize(CENT) == cluster_cost
    for slug, shown in team_totals.items():
        usage = [row for row in rows if row["line"] == "usage" and row["team"] == slug]
        assert sum(Decimal(row["total_usd"]) for row in usage).quantize(CENT) == shown, slug
        assert any(row["provisional"] == "yes" for row in usage), slug

    # The jobs page has nothing for someone in no team, and says where finance's figures are.
    page.goto(f"{live_server.url}/jobs/")
    assert "You are not a member of any team" in page.inner_text("main")
    page.get_by_role("link", name="finance reports").click()
    page.wait_for_url("**/billing/")


def test_finance_asks_the_procurement_advisor(live_server, journey_page, month_so_far) -> None:
    page = journey_page
    sign_in(page, live_server.url, "carol")
    page.wait_for_url("**/billing/")
    page.get_by_role("link", name="Procurement advisor").click()
    page.wait_for_selector("h1:has-text('Procurement advisor')")
    sentence = page.inner_text("[data-testid=reserved-use]")
    # A whole sentence with its figure, also when nothing is reserved (never "is used — of the time").
    assert re.fullmatch(r"(Reserved GPUs are busy \d+% of the time|Nothing is reserved: .+)\.", sentence), sentence
    assert page.locator("[data-testid=breakeven-months]").count() == 1
    page.wait_for_selector("[data-chart=fig-breakeven] .main-svg")
    save_screenshot(page, "journey-finance-advisor")

    # Spot that loses most of its work is not advised, however cheap.
    page.fill("#id_spot_lost_fraction", "0.9")
    page.get_by_role("button", name="Advise").click()
    page.wait_for_selector("[data-testid=spot-declined]")
    assert "90% of spot work was lost" in page.inner_text("[data-testid=spot-declined]")

    # A server price no one pays: refused with the range, and no break-even computed from it.
    page.fill("#id_capex_usd", "1e308")
    page.get_by_role("button", name="Advise").click()
    error = page.locator("#capex_usd-errors")
    error.wait_for()
    message = error.inner_text()
    bound = BREAKEVEN_RANGES["capex_usd"]
    assert message.startswith("Server price (USD) must be from ") and message.endswith(".")
    assert f"from {number_text(bound.low)} to {number_text(bound.high)}: {bound.hint}" in message
    assert page.input_value("#id_capex_usd") == "1e308"  # what was typed stays, to be corrected
    assert page.locator("[data-testid=breakeven]").count() == 0
    assert "e+30" not in page.inner_text("main")
    save_screenshot(page, "journey-finance-advisor-error")
