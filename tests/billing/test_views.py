"""Finance pages, downloads and the API: who sees what (outsiders get 404), and bad input gets a clear message."""

from __future__ import annotations

import csv
import io
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone
from openpyxl import load_workbook
from rest_framework.authtoken.models import Token

from tests.assets import asset_urls, external_assets
from tests.billing.conftest import NOW
from tests.factories import MembershipFactory, UserFactory

PAGES = ("billing:reports", "billing:download", "billing:advisor", "billing:api-chargeback")


@pytest.fixture(autouse=True)
def _now(monkeypatch):
    monkeypatch.setattr(timezone, "now", lambda: NOW)


@pytest.fixture
def loner(db):
    return UserFactory(username="loner")


def _get(client, user, url, **params):
    if user is not None:
        client.force_login(user)
    return client.get(url, params)


# -- who sees what ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", PAGES)
def test_anonymous_is_sent_to_sign_in_or_refused(client, october, name):
    response = client.get(reverse(name), {"month": "2026-10"})
    assert response.status_code in (302, 401, 403)
    if response.status_code == 302:
        assert reverse("login") in response["Location"]


@pytest.mark.parametrize("name", PAGES)
def test_a_member_who_leads_no_team_is_refused(client, october, member, name):
    assert _get(client, member, reverse(name), month="2026-10").status_code == 403


@pytest.mark.parametrize("name", PAGES)
def test_someone_in_no_team_is_refused(client, october, loner, name):
    assert _get(client, loner, reverse(name), month="2026-10").status_code == 403


@pytest.mark.parametrize("persona", ["finance_user", "platform_admin", "superuser"])
@pytest.mark.parametrize("name", PAGES)
def test_finance_and_admins_see_everything(client, october, request, persona, name):
    response = _get(client, request.getfixturevalue(persona), reverse(name), month="2026-10")
    assert response.status_code == 200, response.content[:500]


def test_the_finance_page_shows_both_totals_and_says_they_match(client, october, finance_user):
    response = _get(client, finance_user, reverse("billing:reports"), month="2026-10")
    page = response.content.decode()
    assert 'data-testid="lines-total">$24,880.00' in page
    assert 'data-testid="cluster-cost">$24,880.00' in page
    assert "The lines add up to the cluster&#x27;s cost" in page or "The lines add up to the cluster's cost" in page
    assert "pretrain-7b" in page and "detect-train" in page
    for chart in ("fig-cost-per-team", "fig-gpu-hours-by-tier", "fig-guaranteed-vs-borrowed"):
        assert f'id="{chart}"' in page
    assert any(url.endswith("vendor/plotly.min.js") for url in asset_urls(page))
    assert external_assets(page) == []


def test_a_lead_sees_their_own_team_only(client, october, lead):
    page = _get(client, lead, reverse("billing:reports"), month="2026-10").content.decode()
    assert "pretrain-7b" in page and "detect-train" not in page
    assert 'data-testid="cluster-cost"' not in page
    response = _get(client, lead, reverse("billing:api-chargeback"), month="2026-10")
    assert {row["team"] for row in response.json()["rows"] if row["line"] == "usage"} == {"nlp"}
    assert response.json()["cluster_cost"] is None
    assert _get(client, lead, reverse("billing:advisor")).status_code == 403


def test_a_team_page_is_404_for_outsiders_and_403_for_members(client, october, lead, member, outsider, loner):
    url = reverse("billing:team", args=["nlp"])
    assert _get(client, lead, url, month="2026-10").status_code == 200
    assert _get(client, member, url, month="2026-10").status_code == 403
    assert _get(client, outsider, url, month="2026-10").status_code == 404
    assert _get(client, loner, url, month="2026-10").status_code == 404
    assert _get(client, lead, reverse("billing:team", args=["no-such-team"])).status_code == 404


@pytest.mark.parametrize("name", ["billing:download", "billing:api-chargeback"])
def test_asking_for_another_teams_figures_is_404(client, october, outsider, member, name):
    params = {"month": "2026-10", "team": "nlp"}
    assert _get(client, outsider, reverse(name), **params).status_code == 404
    assert _get(client, member, reverse(name), **params).status_code == 403


def test_the_outsiders_own_view_never_shows_another_team(client, october, outsider):
    # The outsider leads Vision (tests/django_fixtures.py), which used nothing in October.
    response = _get(client, outsider, reverse("billing:api-chargeback"), month="2026-10")
    assert response.status_code == 200
    assert not [row for row in response.json()["rows"] if row["line"] == "usage"]


# -- downloads and API --------------------------------------------------------------------------------------


def test_csv_and_xlsx_downloads_match_the_page(client, october, finance_user):
    client.force_login(finance_user)
    url = reverse("billing:download")
    response = client.get(url, {"month": "2026-10", "file": "summary", "format": "csv"})
    assert response["Content-Disposition"] == 'attachment; filename="chargeback-all-teams-2026-10.csv"'
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert Decimal(rows[-2]["total_usd"]) == Decimal(rows[-1]["total_usd"]) == Decimal("24880.00")
    response = client.get(url, {"month": "2026-10", "file": "jobs", "format": "xlsx"})
    assert response["Content-Disposition"] == 'attachment; filename="chargeback-all-teams-jobs-2026-10.xlsx"'
    sheet = load_workbook(io.BytesIO(response.content)).active
    assert [row[5] for row in sheet.iter_rows(min_row=2, values_only=True)][:2] == ["pretrain-7b", "detect-train"]


def test_the_api_gives_json_and_csv_with_token_or_session(client, october, finance_user):
    token = Token.objects.create(user=finance_user)
    url = reverse("billing:api-chargeback")
    response = client.get(url, {"month": "2026-10"}, HTTP_AUTHORIZATION=f"Token {token.key}")
    assert response.status_code == 200
    body = response.json()
    assert (body["period"], body["lines_total"], body["cluster_cost"], body["reconciled"]) == (
        "2026-10",
        "24880.00",
        "24880.00",
        True,
    )
    response = client.get(
        url, {"month": "2026-10", "format": "csv", "detail": "jobs"}, HTTP_AUTHORIZATION=f"Token {token.key}"
    )
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    assert response["Content-Disposition"] == 'attachment; filename="chargeback-all-teams-jobs-2026-10.csv"'
    assert "pretrain-7b" in response.content.decode()
    assert client.get(url, {"month": "2026-10"}, HTTP_AUTHORIZATION="Token wrong").status_code == 401


# -- bad input ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("month", ["2026-13", "next month", "2027-01"])
def test_a_bad_month_is_a_400_with_a_message_everywhere(client, october, finance_user, month):
    client.force_login(finance_user)
    page = client.get(reverse("billing:reports"), {"month": month})
    assert page.status_code == 400 and 'id="month-errors"' in page.content.decode()
    download = client.get(reverse("billing:download"), {"month": month})
    assert download.status_code == 400 and "month" in download.content.decode()
    api = client.get(reverse("billing:api-chargeback"), {"month": month})
    assert api.status_code == 400
    assert "YYYY-MM" in api.json()["month"][0] or "no closed hour" in api.json()["month"][0]


def test_the_api_needs_a_month_and_knows_its_details(client, october, finance_user):
    client.force_login(finance_user)
    url = reverse("billing:api-chargeback")
    assert client.get(url).json() == {"month": ["month is required: write it as YYYY-MM, e.g. 2026-11"]}
    response = client.get(url, {"month": "2026-10", "detail": "teams"})
    assert response.status_code == 400 and "detail=jobs" in response.json()["detail"][0]


def test_a_bad_download_request_says_what_is_offered(client, october, finance_user):
    client.force_login(finance_user)
    response = client.get(reverse("billing:download"), {"month": "2026-10", "format": "pdf", "file": "all"})
    assert response.status_code == 400
    assert "use format=csv or format=xlsx" in response.content.decode()
    assert "use file=summary or file=jobs" in response.content.decode()


def test_a_leads_export_and_finances_full_one_have_different_names(client, october, finance_user, lead):
    names = set()
    for user, params in (
        (finance_user, {}),
        (lead, {}),
        (lead, {"team": "nlp"}),
    ):
        client.force_login(user)
        response = client.get(reverse("billing:download"), {"month": "2026-10", "format": "xlsx", **params})
        assert response.status_code == 200
        names.add(response["Content-Disposition"])
    assert names == {
        'attachment; filename="chargeback-all-teams-2026-10.xlsx"',
        'attachment; filename="chargeback-nlp-2026-10.xlsx"',
    }
    MembershipFactory(user=lead, team=october["speech"], role="lead")
    response = client.get(reverse("billing:download"), {"month": "2026-10"})
    assert response["Content-Disposition"] == 'attachment; filename="chargeback-nlp+speech-2026-10.csv"'


def test_a_lead_of_two_teams_sees_both(client, october, lead):
    MembershipFactory(user=lead, team=october["speech"], role="lead")
    page = _get(client, lead, reverse("billing:reports"), month="2026-10").content.decode()
    assert "pretrain-7b" in page and "detect-train" in page
