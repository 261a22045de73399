"""The hours the ledger has not closed yet: on the finance page, in its downloads and on the team dashboard as
provisional lines, priced by the ledger's own rules, never written; equal to the closed figures afterwards."""

from __future__ import annotations

import csv
import io
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from billing.cents import CENT, report_cents, to_cents
from billing.intervals import accrued_gpu_hours, money
from billing.models import LedgerEntry
from billing.selectors import Scope, chargeback_report, team_month_cost
from billing.services import ledger_close_due
from jobs.templatetags.portal_format import money as shown
from scheduler.core.gpus.units import UNITS_PER_GPU
from tests.factories import AllocationFactory, JobFactory, MembershipFactory, TeamFactory

pytestmark = pytest.mark.django_db

T = datetime(2026, 11, 10, 14, 40, 17, tzinfo=UTC)  # a frozen instant inside an open hour
NOVEMBER = date(2026, 11, 1)
ALL = Scope(all_teams=True)


@pytest.fixture
def fleet(team, prices, reserved_node, spot_node):
    """nlp: a whole reserved A100 live since 12:20 and a 3g.40gb slice live since 14:05; speech: a spot H100
    from 13:10 to 14:38. The ledger was closed at T (through 14:00 for all three: 14:38 is after T − 300 s)."""
    speech = TeamFactory(name="Speech", slug="speech", namespace="team-speech")
    live = AllocationFactory(
        job=JobFactory(team=team, name="pretrain"),
        node=reserved_node,
        tier="reserved",
        started_at=T.replace(hour=12, minute=20, second=0),
    )
    mig = AllocationFactory(
        job=JobFactory(team=team, name="serve-7b", kind="inference"),
        node=reserved_node,
        gpu_index=1,
        mig_profile="3g.40gb",
        mig_start=0,
        tier="reserved",
        started_at=T.replace(minute=5, second=0),
    )
    ended = AllocationFactory(
        job=JobFactory(team=speech, name="detect"),
        node=spot_node,
        tier="spot",
        started_at=T.replace(hour=13, minute=10, second=0),
        ended_at=T.replace(minute=38, second=0),
        end_reason="completed",
    )
    ledger_close_due(now=T)
    return {"nlp": team, "speech": speech, "live": live, "mig": mig, "ended": ended}


def _expected_open_cost(allocation, *, units: int, price: Decimal, until: datetime) -> Decimal:
    """The ledger's rule by hand: G(until) − G(last whole hour) at the catalog price, rounded once."""
    since = max(allocation.started_at, until.replace(minute=0, second=0))
    gpu_hours = accrued_gpu_hours(
        started_at=allocation.started_at, at=until, units=units, units_per_gpu=UNITS_PER_GPU
    ) - accrued_gpu_hours(started_at=allocation.started_at, at=since, units=units, units_per_gpu=UNITS_PER_GPU)
    return money(gpu_hours, price)


def test_the_open_hour_is_provisional_priced_by_the_ledgers_rules_and_never_written(fleet, prices):
    written = LedgerEntry.objects.count()
    report = chargeback_report(scope=ALL, month=NOVEMBER, now=T)
    assert LedgerEntry.objects.count() == written  # reading never closes anything
    provisional = {line.job_name: line for line in report.job_lines if line.provisional}
    assert set(provisional) == {"pretrain", "serve-7b", "detect"}
    reserved = prices[("A100-SXM4-80GB", "reserved")]
    assert provisional["pretrain"].cost == _expected_open_cost(fleet["live"], units=7000, price=reserved, until=T)
    assert provisional["serve-7b"].cost == _expected_open_cost(fleet["mig"], units=3000, price=reserved, until=T)
    ended = fleet["ended"]
    spot = prices[("H100-SXM5-80GB", "spot")]
    assert provisional["detect"].cost == _expected_open_cost(ended, units=7000, price=spot, until=ended.ended_at)
    closed = {line.job_name: line for line in report.job_lines if not line.provisional}
    assert set(closed) == {"pretrain", "detect"}  # the whole hours before 14:00
    assert report.provisional_total == sum(line.cost for line in provisional.values())
    assert report.reconciled  # capacity runs to T as well


def test_page_dashboard_and_csv_agree_to_the_cent_at_the_same_instant(client, fleet, lead, finance_user, monkeypatch):
    monkeypatch.setattr(timezone, "now", lambda: T)
    nlp = fleet["nlp"]
    team_total = {team.slug: team.total for team in chargeback_report(scope=ALL, month=NOVEMBER, now=T).teams()}
    figure = team_month_cost(team_id=nlp.pk, now=T)
    assert figure.cost == team_total["nlp"] and figure.provisional_cost > 0

    client.force_login(lead)
    page = client.get(reverse("billing:team", args=["nlp"]), {"month": "2026-11"}).content.decode()
    assert f'data-testid="lines-total">{shown(team_total["nlp"])}<' in page
    assert 'data-testid="provisional-line">provisional<' in page and 'data-testid="provisional-note"' in page
    dashboard = client.get(reverse("jobs:dashboard", args=["nlp"])).content.decode()
    assert f'data-testid="month-cost">{shown(team_total["nlp"])}<' in dashboard
    assert f'data-testid="month-provisional">{shown(figure.provisional_cost)} provisional<' in dashboard
    response = client.get(reverse("billing:download"), {"month": "2026-11", "team": "nlp", "file": "jobs"})
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    # Money in the files is in cents (billing.cents): the total is the page's, each row within a cent of its own.
    assert Decimal(rows[-1]["total_usd"]) == to_cents(team_total["nlp"])
    assert {row["provisional"] for row in rows[:-1]} == {"yes", "no"}
    provisional = [Decimal(r["total_usd"]) for r in rows[:-1] if r["provisional"] == "yes"]
    assert abs(sum(provisional) - figure.provisional_cost) < CENT * len(provisional)

    client.force_login(finance_user)
    page = client.get(reverse("billing:reports"), {"month": "2026-11"}).content.decode()
    report = chargeback_report(scope=ALL, month=NOVEMBER, now=T)
    assert f'data-testid="provisional-total">{shown(report.provisional_total)}<' in page
    response = client.get(reverse("billing:download"), {"month": "2026-11", "format": "csv"})
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    (total,) = [row for row in rows if row["line"] == "total"]
    assert report.lines_total == report.cluster_cost
    assert Decimal(total["total_usd"]) == to_cents(report.lines_total) == report_cents(report).total
    usage = [row for row in rows if row["line"] == "usage"]
    nlp_cents = sum(Decimal(r["total_usd"]) for r in usage if r["team"] == "nlp")
    assert nlp_cents == report_cents(report).by_team["nlp"] and abs(nlp_cents - team_total["nlp"]) < CENT
    body = client.get(reverse("billing:api-chargeback"), {"month": "2026-11"}).json()
    assert Decimal(body["provisional_total"]) == to_cents(report.provisional_total) > 0
    assert Decimal(body["lines_total"]) == report.lines_total


def test_provisional_rows_become_ledger_entries_with_the_same_totals(fleet):
    """Everything ended by T: once the closer has run, nothing is provisional and every figure is unchanged."""
    live = fleet["live"]
    live.ended_at = T - timedelta(seconds=17)
    live.save(update_fields=["ended_at"])
    fleet["mig"].ended_at = T
    fleet["mig"].save(update_fields=["ended_at"])
    before = chargeback_report(scope=ALL, month=NOVEMBER, now=T)
    assert before.provisional_total > 0
    ledger_close_due(now=T + timedelta(minutes=6))
    after = chargeback_report(scope=ALL, month=NOVEMBER, now=T)
    assert not [line for line in after.job_lines if line.provisional] and after.provisional_total == 0
    assert after.usage_total == before.usage_total and after.lines_total == before.lines_total
    assert {t.slug: t.total for t in after.teams()} == {t.slug: t.total for t in before.teams()}
    assert team_month_cost(team_id=fleet["nlp"].pk, now=T).cost == {t.slug: t.total for t in before.teams()}["nlp"]


def test_a_live_allocation_is_provisional_only_for_its_open_hour_after_the_close(fleet):
    later = T.replace(hour=15, minute=20)
    ledger_close_due(now=later)  # closes 14:00–15:00 of the live ones, and the ended one to its end
    report = chargeback_report(scope=ALL, month=NOVEMBER, now=later)
    provisional = {line.job_name for line in report.job_lines if line.provisional}
    assert provisional == {"pretrain", "serve-7b"}
    entries = LedgerEntry.objects.filter(allocation=fleet["live"])
    assert max(entry.interval_end for entry in entries) == later.replace(minute=0, second=0)


def test_the_first_minutes_of_a_month_are_not_empty(team, prices, reserved_node, client, lead, monkeypatch):
    now = datetime(2026, 12, 1, 0, 20, tzinfo=UTC)
    night = AllocationFactory(
        job=JobFactory(team=team, name="night"), node=reserved_node, started_at=now - timedelta(hours=2)
    )
    ledger_close_due(now=now)
    monkeypatch.setattr(timezone, "now", lambda: now)
    client.force_login(lead)
    page = client.get(reverse("billing:reports")).content.decode()
    assert "night" in page and "No GPU-hours for" not in page
    figure = team_month_cost(team_id=team.pk, now=now)
    expected = _expected_open_cost(night, units=7000, price=prices[("A100-SXM4-80GB", "reserved")], until=now)
    assert figure.cost == figure.provisional_cost == expected > 0
    assert figure.month_start == datetime(2026, 12, 1, tzinfo=UTC)


def test_an_outsider_never_sees_another_teams_provisional_lines(client, fleet, outsider, monkeypatch):
    monkeypatch.setattr(timezone, "now", lambda: T)
    client.force_login(outsider)
    page = client.get(reverse("billing:reports"), {"month": "2026-11"}).content.decode()
    assert "pretrain" not in page and "detect" not in page
    assert client.get(reverse("billing:team", args=["nlp"]), {"month": "2026-11"}).status_code == 404
    MembershipFactory(user=outsider, team=fleet["speech"], role="member")
    assert client.get(reverse("billing:team", args=["speech"]), {"month": "2026-11"}).status_code == 403
