"""Months at the edge of the calendar, and junk in the month picker, are a 400 with a message on the finance
pages, the download and the API (hardening item 5): ``month=9999-12`` was "year 10000 is out of range", a 500."""

from __future__ import annotations

from datetime import date

import pytest
from django.urls import reverse
from django.utils import timezone

from billing.errors import PeriodInvalid
from billing.periods import parse_month, period_for
from tests.billing.conftest import NOW

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _now(monkeypatch):
    monkeypatch.setattr(timezone, "now", lambda: NOW)


@pytest.mark.parametrize("month", [date(9999, 12, 1), date(9999, 1, 1), date(2026, 12, 1)])
def test_a_month_that_has_not_started_is_refused_before_its_end_is_worked_out(month) -> None:
    with pytest.raises(PeriodInvalid, match="has no closed hour yet: pick 2026-11 or an earlier month"):
        period_for(month, now=NOW)


def test_the_running_month_and_the_earliest_still_work() -> None:
    assert period_for(parse_month("2026-11"), now=NOW).as_of.day == 29
    assert period_for(parse_month("2000-01"), now=NOW).complete


@pytest.mark.parametrize("text", ["9999-13", "0999-12", "99999-12", "2026-1", "2026-00"])
def test_months_that_are_not_months_are_refused(text) -> None:
    with pytest.raises(PeriodInvalid, match="write it as YYYY-MM"):
        parse_month(text)


@pytest.mark.parametrize("month", ["9999-12", "9999-01", "2999-12"])
@pytest.mark.parametrize("name", ["billing:reports", "billing:download", "billing:api-chargeback"])
def test_a_far_future_month_is_a_400_with_the_reason(client, finance_user, name, month) -> None:
    client.force_login(finance_user)
    response = client.get(reverse(name), {"month": month})
    assert response.status_code == 400
    assert "has no closed hour yet" in response.content.decode()


def test_the_team_page_says_so_too(client, lead, team) -> None:
    client.force_login(lead)
    response = client.get(reverse("billing:team", args=[team.slug]), {"month": "9999-12"})
    assert response.status_code == 400
    assert "has no closed hour yet" in response.content.decode()


@pytest.mark.parametrize(
    "query",
    [
        "month=%00",
        "month=2026-10&mode=%ED%A0%80",
        "month=2026-10&team=%00",
        "month=" + "9" * 5000,
    ],
)
@pytest.mark.parametrize("url", ["/billing/", "/billing/download/"])
def test_junk_in_the_month_picker_is_a_400_page(client, finance_user, url, query) -> None:
    client.force_login(finance_user)
    assert client.get(f"{url}?{query}").status_code == 400


def test_advisor_inputs_out_of_range_are_form_errors(client, finance_user) -> None:
    client.force_login(finance_user)
    query = {
        "history_days": "9" * 5000,
        "percentile": "1e400",
        "reserved_price": "9" * 400,
        "spot_lost_fraction": "nan",
    }
    response = client.get(reverse("billing:advisor"), query)
    assert response.status_code == 400
    assert response.context["advisor_form"].errors
