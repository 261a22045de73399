"""The chargeback report: lines that add up to the cluster's cost, idle capacity, commitments, scopes."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

import pytest
from django.test import override_settings

from billing.errors import PeriodInvalid
from billing.periods import parse_month, period_for
from billing.report import share_pro_rata
from billing.selectors import Scope, chargeback_report
from tests.billing.conftest import NOW

OCTOBER = date(2026, 10, 1)
ALL = Scope(all_teams=True)


def test_the_lines_add_up_to_the_cluster_cost_worked_by_hand(october):
    report = chargeback_report(scope=ALL, month=OCTOBER, now=NOW)
    assert report.period.complete and report.period.hours == 744
    assert report.usage_total == Decimal("65.500000")
    assert report.cluster_cost == Decimal("24880.000000")
    assert report.unused_commitment_total == Decimal("3333.333333")
    assert report.idle_total == Decimal("21481.166667")
    assert report.lines_total == report.cluster_cost and report.reconciled
    capacity = {(c.gpu_model, c.tier): c for c in report.capacity}
    reserved = capacity[("A100-SXM4-80GB", "reserved")]
    assert (reserved.capacity_gpu_hours, reserved.paid_cost, reserved.used_gpu_hours) == (
        Decimal("5952.000000"),
        Decimal("6666.666667"),
        Decimal("24.000000"),
    )
    spot = capacity[("H100-SXM5-80GB", "spot")]
    assert (spot.paid_cost, spot.used_gpu_hours, spot.idle_cost) == (
        Decimal("14880.000000"),
        Decimal("7.000000"),
        Decimal("14862.500000"),
    )
    (commitment,) = report.commitments
    assert (commitment.committed_gpu_hours, commitment.unused_gpu_hours) == (Decimal("8928.000000"), Decimal(2976))


def test_team_project_job_breakdown_and_by_tier(october):
    report = chargeback_report(scope=ALL, month=OCTOBER, now=NOW)
    teams = report.teams()
    assert [(t.slug, t.gpu_hours, t.cost) for t in teams] == [
        ("nlp", Decimal("24.000000"), Decimal("48.000000")),
        ("speech", Decimal("7.000000"), Decimal("17.500000")),
    ]
    assert [p.code for p in teams[0].projects] == ["llm-pretrain"]
    assert [j.job_name for j in teams[0].projects[0].jobs] == ["pretrain-7b"]
    assert {tier: totals.gpu_hours for tier, totals in report.by_tier().items()} == {
        "reserved": Decimal("24.000000"),
        "spot": Decimal("7.000000"),
    }
    # Neither team has a quota here: everything they held was borrowed.
    assert all(t.borrowed_gpu_hours == t.gpu_hours for t in teams)


@override_settings(BILLING={"idle_cost": "shared", "mode": "showback"})
def test_idle_shared_back_in_proportion_to_use_still_adds_up(october):
    report = chargeback_report(scope=ALL, month=OCTOBER, now=NOW)
    assert report.idle_shared and report.mode == "showback" and report.idle_line == 0
    shares = {t.slug: t.idle_share for t in report.teams()}
    assert sum(shares.values()) == report.idle_total
    # 48 / 65.5 of $21,481.166667 = 15,741.923664.36… (floored, its remainder .36 loses to speech's .64).
    assert shares["nlp"] == Decimal("15741.923664")
    assert shares["speech"] == Decimal("5739.243003")
    assert report.lines_total == report.cluster_cost == Decimal("24880.000000")


def test_a_lead_sees_only_their_team_and_no_cluster_lines(october):
    nlp = october["nlp"]
    report = chargeback_report(scope=Scope(all_teams=False, team_ids=frozenset({nlp.pk})), month=OCTOBER, now=NOW)
    assert {line.team_slug for line in report.job_lines} == {"nlp"}
    assert not report.scope_all and report.lines_total == Decimal("48.000000")


@override_settings(BILLING={"idle_cost": "shared", "mode": "chargeback"})
def test_a_leads_idle_share_does_not_depend_on_who_looks(october):
    nlp = october["nlp"]
    everyone = {t.slug: t.total for t in chargeback_report(scope=ALL, month=OCTOBER, now=NOW).teams()}
    own = chargeback_report(scope=Scope(all_teams=False, team_ids=frozenset({nlp.pk})), month=OCTOBER, now=NOW)
    assert own.lines_total == everyone["nlp"]


def test_a_month_in_progress_runs_to_now(october):
    report = chargeback_report(scope=ALL, month=date(2026, 11, 1), now=NOW)
    assert report.period.as_of == NOW and not report.period.complete
    assert report.reconciled and report.usage_total == 0
    # 28 days 12.5 hours of the spot node: 8 × 684.5 h × $2.50 (the open half hour included).
    spot = {(c.gpu_model, c.tier): c for c in report.capacity}[("H100-SXM5-80GB", "spot")]
    assert spot.paid_cost == Decimal(8) * Decimal("684.5") * Decimal("2.5")


@pytest.mark.parametrize("text", ["2026-13", "26-10", "october", "", "2026-1"])
def test_a_bad_month_says_how_to_write_one(text):
    with pytest.raises(PeriodInvalid, match="YYYY-MM"):
        parse_month(text)


def test_a_future_month_is_refused():
    with pytest.raises(PeriodInvalid, match="no closed hour yet"):
        period_for(date(2026, 12, 1), now=NOW)


@pytest.mark.parametrize(
    ("total", "weights"),
    [
        (Decimal("10.000000"), [Decimal(1), Decimal(1), Decimal(1)]),
        (Decimal("0.000002"), [Decimal(5), Decimal(3), Decimal(1)]),
        (Decimal("-7.123457"), [Decimal("2.5"), Decimal("0.1")]),
    ],
)
def test_pro_rata_shares_add_up_exactly(total, weights):
    shares = share_pro_rata(total, weights)
    assert sum(shares) == total
    assert all(share.as_tuple().exponent >= -6 for share in shares)


def test_nothing_to_share_over_gives_zero_shares():
    assert share_pro_rata(Decimal("5"), [Decimal(0), Decimal(0)]) == [Decimal(0), Decimal(0)]
