"""Money in the downloads is in cents, with no float noise, and the CSV, the XLSX and the page agree to the cent."""

from __future__ import annotations

import csv
import io
from decimal import Decimal

import pytest
from django.urls import reverse
from openpyxl import load_workbook

from billing.cents import apportion, to_cents
from billing.services import ledger_close_due
from tests.billing.conftest import at
from tests.factories import AllocationFactory, JobFactory, TeamFactory

pytestmark = pytest.mark.django_db


def test_apportioned_cents_add_up_to_the_rounded_total():
    values = [Decimal("21.919999"), Decimal("0.333333"), Decimal("0.333333"), Decimal("0.333334")]
    cents = apportion(values)
    assert cents == [Decimal("21.92"), Decimal("0.33"), Decimal("0.33"), Decimal("0.34")]
    assert sum(cents) == to_cents(sum(values, Decimal(0))) == Decimal("22.92")
    assert to_cents(Decimal("0.165")) == Decimal("0.16")  # half-even, as the ledger rounds


@pytest.fixture
def odd_month(prices, reserved_node, spot_node, team):
    """Allocations of odd lengths: micro-dollar costs such as 21.919999 that a float shows with noise."""
    other = TeamFactory(name="Speech", slug="speech", namespace="team-speech")
    for index, (owner, start, end) in enumerate(
        [
            (team, at(3, 9, 7, 13), at(3, 20, 3, 59)),
            (team, at(4, 1, 1, 1), at(4, 2, 2, 2)),
            (other, at(5, 3, 33, 33), at(6, 4, 44, 44)),
        ]
    ):
        job = JobFactory(team=owner, name=f"odd-{index}", submitted_at=start)
        AllocationFactory(job=job, node=reserved_node, gpu_index=index, started_at=start, ended_at=end)
    ledger_close_due(now=at(1, month=11))


def test_csv_xlsx_and_page_totals_agree_to_the_cent(client, odd_month, finance_user):
    client.force_login(finance_user)
    query = {"month": "2026-10", "file": "summary"}
    text = client.get(reverse("billing:download"), {**query, "format": "csv"}).content.decode()
    rows = list(csv.DictReader(io.StringIO(text)))
    money = [row[column] for row in rows for column in ("usage_cost_usd", "idle_share_usd", "total_usd")]
    assert all(len(value.split(".")[1]) == 2 for value in money if value)  # cents, never 21.919999
    (total,) = [row for row in rows if row["line"] == "total"]
    lines = [row for row in rows if row["line"] not in ("total", "cluster-cost")]
    assert sum(Decimal(row["total_usd"]) for row in lines) == Decimal(total["total_usd"])
    book = load_workbook(io.BytesIO(client.get(reverse("billing:download"), {**query, "format": "xlsx"}).content))
    sheet = book.worksheets[0]
    header, *cells = list(sheet.iter_rows(values_only=True))
    xlsx_total = [dict(zip(header, row, strict=True)) for row in cells if row[header.index("line")] == "total"]
    assert Decimal(str(xlsx_total[0]["total_usd"])) == Decimal(total["total_usd"])
    money_cells = [row[header.index("total_usd")] for row in sheet.iter_rows(min_row=2)]
    assert {c.number_format for c in money_cells if c.value is not None} == {'"$"#,##0.00'}
    page = client.get(reverse("billing:reports"), {"month": "2026-10"}).content.decode()
    shown = f"${Decimal(total['total_usd']):,.2f}"
    assert f'data-testid="lines-total">{shown}<' in page
    for slug in ("nlp", "speech"):
        team_cents = sum(Decimal(row["total_usd"]) for row in lines if row["team"] == slug and row["line"] == "usage")
        assert f"<strong>${team_cents:,.2f}</strong>" in page, slug
