"""Finance charts: an empty period draws a "no data" message instead of bare axes; a period with figures draws
them untouched."""

from __future__ import annotations

from datetime import date

import pytest
from django.urls import reverse
from django.utils import timezone

from billing import charts
from billing.selectors import Scope, chargeback_history, chargeback_report
from tests.billing.conftest import NOW

OCTOBER = date(2026, 10, 1)


def _figures(report, history) -> dict[str, dict]:
    return {
        "cost": charts.cost_per_team_over_months(history, finance=report.scope_all),
        "tier": charts.gpu_hours_by_tier(report),
        "borrowed": charts.guaranteed_vs_borrowed(report),
    }


def test_a_leads_empty_month_shows_no_data_on_every_chart(october, outsider):
    # The outsider leads Vision (tests/django_fixtures.py), which used nothing in October.
    scope = Scope(all_teams=False, team_ids=frozenset(outsider.memberships.values_list("team_id", flat=True)))
    assert scope.team_ids
    report = chargeback_report(scope=scope, month=OCTOBER, now=NOW)
    for name, figure in _figures(report, chargeback_history(scope=scope, month=OCTOBER, now=NOW)).items():
        assert figure["data"] == [], name
        (note,) = figure["layout"]["annotations"]
        assert note["text"].startswith("No ") and note["text"] == figure["empty"]
        assert figure["layout"]["xaxis"] == figure["layout"]["yaxis"] == {"visible": False}


def test_a_month_with_figures_draws_them(october):
    scope = Scope(all_teams=True)
    report = chargeback_report(scope=scope, month=OCTOBER, now=NOW)
    for name, figure in _figures(report, chargeback_history(scope=scope, month=OCTOBER, now=NOW)).items():
        assert figure["data"] and "annotations" not in figure["layout"] and "empty" not in figure, name


@pytest.mark.parametrize("values", [[], [0.0, 0.0], [None]])
def test_only_a_point_to_draw_counts_as_data(values):
    figure = charts.with_no_data_state({"data": [{"y": values}], "layout": {}}, message="No data")
    assert figure["data"] == [] and figure["empty"] == "No data"
    drawn = {"data": [{"y": [*values, 0.01]}], "layout": {}}
    assert charts.with_no_data_state(drawn, message="No data") is drawn


def test_the_page_marks_the_empty_charts(client, october, outsider, monkeypatch):
    monkeypatch.setattr(timezone, "now", lambda: NOW)
    client.force_login(outsider)
    page = client.get(reverse("billing:reports"), {"month": "2026-10"}).content.decode()
    assert page.count("data-empty") == 3
    assert "No GPU-hours in this period yet" in page
