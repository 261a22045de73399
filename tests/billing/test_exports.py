"""Downloads: CSV and XLSX carry the page's figures, add up to its totals, and name their period."""

from __future__ import annotations

import csv
import io
from datetime import date
from decimal import Decimal

import pytest
from openpyxl import load_workbook
from openpyxl.utils import get_column_letter

from billing.exports import JOB_COLUMNS, SUMMARY_COLUMNS, file_name, job_records, summary_records, to_csv, to_xlsx
from billing.selectors import Scope, chargeback_report
from jobs.models import Job
from tests.billing.conftest import NOW

OCTOBER = date(2026, 10, 1)


@pytest.fixture
def report(october):
    return chargeback_report(scope=Scope(all_teams=True), month=OCTOBER, now=NOW)


def _csv_rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def _xlsx_rows(body: bytes) -> list[dict[str, object]]:
    sheet = load_workbook(io.BytesIO(body)).active
    rows = list(sheet.iter_rows(values_only=True))
    return [dict(zip(rows[0], row, strict=True)) for row in rows[1:]]


def _money(value: object) -> Decimal:
    return Decimal(str(value)).quantize(Decimal("0.000001"))


def test_summary_csv_round_trips_content_and_totals(report):
    rows = _csv_rows(to_csv(summary_records(report), SUMMARY_COLUMNS))
    usage = [r for r in rows if r["line"] == "usage"]
    assert [(r["team"], r["project"], r["gpu_model"], r["tier"], r["gpu_hours"], r["total_usd"]) for r in usage] == [
        ("nlp", "llm-pretrain", "A100-SXM4-80GB", "reserved", "24.000000", "48.00"),
        ("speech", "", "H100-SXM5-80GB", "spot", "7.000000", "17.50"),
    ]
    lines = [r for r in rows if r["line"] not in ("total", "cluster-cost")]
    (total,) = [r for r in rows if r["line"] == "total"]
    (cluster,) = [r for r in rows if r["line"] == "cluster-cost"]
    assert sum(Decimal(r["total_usd"]) for r in lines) == Decimal(total["total_usd"]) == report.lines_total
    assert Decimal(cluster["total_usd"]) == report.cluster_cost == Decimal("24880.000000")
    assert {r["line"] for r in lines} == {"usage", "idle-capacity", "unused-commitment"}
    assert {r["period"] for r in rows} == {"2026-10"}
    assert {r["status"] for r in rows} == {"final"}


def test_summary_xlsx_round_trips_content_and_totals(report):
    rows = _xlsx_rows(to_xlsx(summary_records(report), SUMMARY_COLUMNS, title="2026-10"))
    csv_rows = _csv_rows(to_csv(summary_records(report), SUMMARY_COLUMNS))
    assert len(rows) == len(csv_rows)
    for xlsx_row, csv_row in zip(rows, csv_rows, strict=True):
        assert xlsx_row["line"] == csv_row["line"] and (xlsx_row["team"] or "") == csv_row["team"]
        if csv_row["total_usd"]:
            assert _money(xlsx_row["total_usd"]) == Decimal(csv_row["total_usd"])
    lines = [r for r in rows if r["line"] not in ("total", "cluster-cost")]
    assert sum(_money(r["total_usd"]) for r in lines) == report.cluster_cost


def test_job_detail_files_list_every_job_and_add_up(report):
    rows = _csv_rows(to_csv(job_records(report), JOB_COLUMNS))
    jobs = [r for r in rows if r["team"] != "total"]
    assert [(r["team"], r["job"], r["total_usd"]) for r in jobs] == [
        ("nlp", "pretrain-7b", "48.00"),
        ("speech", "detect-train", "17.50"),
    ]
    assert rows[-1]["total_usd"] == "65.50" and Decimal("65.50") == report.teams_total
    xlsx = _xlsx_rows(to_xlsx(job_records(report), JOB_COLUMNS, title="jobs 2026-10"))
    assert [(r["job"], _money(r["total_usd"])) for r in xlsx[:-1]] == [
        (r["job"], Decimal(r["total_usd"])) for r in jobs
    ]


def test_file_names_carry_the_scope_and_the_period(report):
    name = file_name(report, detail=False, extension="csv", scope_label="all-teams")
    assert name == "chargeback-all-teams-2026-10.csv"
    assert file_name(report, detail=True, extension="xlsx", scope_label="nlp") == "chargeback-nlp-jobs-2026-10.xlsx"


@pytest.mark.parametrize("detail", [False, True])
def test_xlsx_shows_money_at_2_decimals_unit_prices_at_4_with_widths_a_frozen_header_and_a_filter(report, detail):
    records, columns = (job_records(report), JOB_COLUMNS) if detail else (summary_records(report), SUMMARY_COLUMNS)
    sheet = load_workbook(io.BytesIO(to_xlsx(records, columns, title="t"))).active
    header = [cell.value for cell in sheet[1]]
    assert header == list(columns)
    assert sheet.freeze_panes == "A2"
    assert sheet.auto_filter.ref == f"A1:{get_column_letter(len(columns))}{len(records) + 1}"
    formats: dict[str, set[str]] = {}
    for index, column in enumerate(columns, start=1):
        cells = [row[0] for row in sheet.iter_rows(min_row=2, min_col=index, max_col=index)]
        formats[column] = {cell.number_format for cell in cells if isinstance(cell.value, (int, float, Decimal))}
        width = sheet.column_dimensions[get_column_letter(index)].width
        longest = max(len(str(cell.value)) for cell in [sheet.cell(1, index), *cells] if cell.value is not None)
        assert min(longest, 37) < width <= 40, column
    assert formats["total_usd"] == formats["usage_cost_usd"] == {'"$"#,##0.00'}
    assert formats["gpu_hours"] == {"#,##0.000000"}
    if detail:
        assert formats["usd_per_gpu_hour"] == {"#,##0.0000"}
        # The average rate of each job: nlp's reserved A100 at $2, speech's spot H100 at $2.50.
        rates = [row[columns.index("usd_per_gpu_hour")] for row in sheet.iter_rows(min_row=2, values_only=True)]
        assert rates[:2] == [2.0, 2.5]
    # Money cells are numbers in whole cents (billing.cents): what a spreadsheet sums is what the page shows.
    totals = [row[columns.index("total_usd")] for row in sheet.iter_rows(min_row=2, values_only=True)]
    assert all(value == round(value, 2) for value in totals if isinstance(value, (int, float)))


def test_a_formula_in_a_job_name_is_written_as_text_in_both_files(report):
    """Job names are typed by people: a download opened in a spreadsheet must not run one."""
    formula = '=HYPERLINK("http://evil.example","open")'
    Job.objects.filter(name="pretrain-7b").update(name=formula)
    again = chargeback_report(scope=Scope(all_teams=True), month=OCTOBER, now=NOW)
    rows = _csv_rows(to_csv(job_records(again), JOB_COLUMNS))
    assert [r["job"] for r in rows if r["team"] == "nlp"] == ["'" + formula]
    assert rows[-1]["total_usd"] == "65.50"  # numbers stay numbers
    sheet = load_workbook(io.BytesIO(to_xlsx(job_records(again), JOB_COLUMNS, title="t"))).active
    (cell,) = [c for row in sheet.iter_rows(min_row=2) for c in row if c.value == formula]
    assert cell.data_type == "s"
