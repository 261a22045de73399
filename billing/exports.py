"""The chargeback as files: CSV and XLSX, a summary (team / project / GPU model / tier) and a per-job detail.

Usage rows of hours the ledger has not closed yet carry ``provisional = yes`` (billing.provisional): the
files hold the same figures as the page at the same instant. Every row says whether its month is ``final``
(over, and every hour of it closed in the ledger) or still ``provisional`` (column ``status``).

Money (columns ``*_usd``) is in USD **cents**: exact decimals with two places, apportioned so that each team's
rows add up to the team's total and the rows to the ``total`` row, which is the page's total
(:mod:`billing.cents`). Unit prices (``usd_per_gpu_hour``) have four places, GPU-hours six (the ledger's). The
XLSX cells are numbers holding those same decimals, money in a dollar currency format. The summary's last rows
are ``total`` (what the rows add up to) and, for finance, ``cluster-cost`` (what the cluster cost in the
period): the two are equal when the report reconciles.

On-demand overhead (:mod:`billing.on_demand`: an autoscaled node's hours from its request to its first work, bought
for one job) is a summary line ``on-demand-overhead`` per team that asked, its figures in two columns of their own,
``on_demand_overhead_gpu_hours`` and ``on_demand_overhead_usd`` (apportioned to the cent, their sum on the ``total``
row), and nothing in ``gpu_hours`` or ``total_usd``: those hours are already in the on-demand idle-capacity line (or
the idle shares), so the lines still add up to the total and the cluster cost, and finance sees to whom that part of
the idle line belongs.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from decimal import Decimal

from openpyxl import Workbook
from openpyxl.utils import get_column_letter

from billing.cents import apportion, other_lines, report_cents, to_cents
from billing.report import ZERO, Report
from billing.spreadsheet_cells import csv_cell, keep_as_text

SUMMARY_COLUMNS = (
    "period",
    "mode",
    "line",
    "team",
    "team_name",
    "project",
    "gpu_model",
    "tier",
    "gpu_hours",
    "guaranteed_gpu_hours",
    "borrowed_gpu_hours",
    "usage_cost_usd",
    "idle_share_usd",
    "total_usd",
    "provisional",
    # Appended, so that a finance system reading columns by position still finds the others where they were.
    "status",
    "on_demand_overhead_gpu_hours",
    "on_demand_overhead_usd",
)
# The summary line of a team's on-demand overhead (module doc).
OVERHEAD_LINE = "on-demand-overhead"
JOB_COLUMNS = (
    "period",
    "mode",
    "team",
    "project",
    "job_id",
    "job",
    "gpu_model",
    "tier",
    "gpu_hours",
    "guaranteed_gpu_hours",
    "borrowed_gpu_hours",
    "usd_per_gpu_hour",
    "usage_cost_usd",
    "idle_share_usd",
    "total_usd",
    "provisional",
    # Appended, so that a finance system reading columns by position still finds the others where they were.
    "status",
)
MONEY_FORMAT = '"$"#,##0.00'  # a currency format: LibreOffice and Excel show $1,234.56
UNIT_PRICE_FORMAT = "#,##0.0000"
HOURS_FORMAT = "#,##0.000000"
_MAX_WIDTH = 40  # characters: a long job name wraps the column no wider than this
Record = dict[str, object]


def _blank(**values: object) -> Record:
    return {**dict.fromkeys(SUMMARY_COLUMNS, ""), **values}


def summary_records(report: Report) -> list[Record]:
    """Usage rows, then (finance only) idle capacity and unused commitments, then the totals; money in cents."""
    base = {"period": report.period.label, "status": report.status, "mode": report.mode}
    cents = report_cents(report)
    records: list[Record] = []
    for row, (usage, idle_share, total) in zip(report.rows(), cents.rows, strict=True):
        records.append(
            {
                **base,
                "line": "usage",
                "team": row.team_slug,
                "team_name": row.team_name,
                "project": row.project_code,
                "gpu_model": row.gpu_model,
                "tier": row.tier,
                "gpu_hours": row.gpu_hours,
                "guaranteed_gpu_hours": row.guaranteed_gpu_hours,
                "borrowed_gpu_hours": row.borrowed_gpu_hours,
                "usage_cost_usd": usage,
                "idle_share_usd": idle_share,
                "total_usd": total,
                "provisional": _flag(row.provisional),
            }
        )
    overheads = overhead_records(report, base)
    records += overheads
    for (line, gpu_model, tier, gpu_hours, _cost), cost in zip(other_lines(report), cents.other, strict=True):
        records.append(_blank(**base, line=line, gpu_model=gpu_model, tier=tier, gpu_hours=gpu_hours, total_usd=cost))
    total_row = _blank(**base, line="total", total_usd=cents.total)
    if overheads:
        # What the overhead lines add up to: they are apportioned from this very figure.
        overhead = sum((cost for _h, cost in report.overhead_by_team.values()), ZERO)
        total_row["on_demand_overhead_usd"] = to_cents(overhead)
    records.append(total_row)
    if report.scope_all:
        records.append(_blank(**base, line="cluster-cost", total_usd=cents.cluster_cost))
    return records


def overhead_records(report: Report, base: Mapping[str, object]) -> list[Record]:
    """One ``on-demand-overhead`` line per team with overhead in the period, by team slug (module doc)."""
    teams = sorted(report.overhead_by_team, key=lambda team: report.overhead_teams.get(team, (str(team), ""))[0])
    cents = apportion([report.overhead_by_team[team][1] for team in teams])
    records = []
    for team, cost in zip(teams, cents, strict=True):
        slug, name = report.overhead_teams.get(team, (str(team), ""))
        records.append(
            _blank(
                **base,
                line=OVERHEAD_LINE,
                team=slug,
                team_name=name,
                tier="on-demand",
                on_demand_overhead_gpu_hours=report.overhead_by_team[team][0],
                on_demand_overhead_usd=cost,
            )
        )
    return records


def job_records(report: Report) -> list[Record]:
    """One row per job, GPU model and tier; the last row is the total (usage plus any idle share), in cents."""
    base = {"period": report.period.label, "status": report.status, "mode": report.mode}
    lines = sorted(
        report.job_lines,
        key=lambda j: (j.team_slug, j.project_code, j.job_id or 0, j.gpu_model, j.tier, j.provisional),
    )
    totals = apportion([line.total for line in lines])
    usages = apportion([line.cost for line in lines])
    records: list[Record] = []
    for line, total, usage in zip(lines, totals, usages, strict=True):
        records.append(
            {
                **base,
                "team": line.team_slug,
                "project": line.project_code,
                "job_id": line.job_id if line.job_id is not None else "",
                "job": line.job_name,
                "gpu_model": line.gpu_model,
                "tier": line.tier,
                "gpu_hours": line.gpu_hours,
                "guaranteed_gpu_hours": line.guaranteed_gpu_hours,
                "borrowed_gpu_hours": line.borrowed_gpu_hours,
                # The rate the job's hours were charged at on average (prices change at midnight UTC).
                "usd_per_gpu_hour": (line.cost / line.gpu_hours).quantize(Decimal("0.0001")) if line.gpu_hours else "",
                "usage_cost_usd": usage,
                "idle_share_usd": total - usage,
                "total_usd": total,
                "provisional": _flag(line.provisional),
            }
        )
    records.append(
        {**dict.fromkeys(JOB_COLUMNS, ""), **base, "team": "total", "total_usd": sum(totals, to_cents(ZERO))}
    )
    return records


def _flag(provisional: bool) -> str:
    """``yes`` on the hours the ledger has not closed yet (billing.provisional): they will be billed, and may
    still grow while their hour is open."""
    return "yes" if provisional else "no"


def decimal_text(value: Decimal, column: str) -> str:
    """A number as the files and the API write it: cents for money, four places for unit prices, six for
    GPU-hours (the ledger's precision)."""
    places = {MONEY_FORMAT: 2, UNIT_PRICE_FORMAT: 4}.get(column_number_format(column) or "", 6)
    return f"{value:.{places}f}"


def _text(value: object, column: str) -> str:
    if isinstance(value, Decimal):
        return decimal_text(value, column)
    return csv_cell(str(value))


def to_csv(records: Sequence[Record], columns: Sequence[str]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for record in records:
        writer.writerow([_text(record.get(column, ""), column) for column in columns])
    return buffer.getvalue()


def to_xlsx(records: Sequence[Record], columns: Sequence[str], *, title: str) -> bytes:
    """One sheet named ``title``: a frozen header row with an autofilter, columns as wide as their content,
    money shown with 2 decimals, unit prices with 4, GPU-hours with 6 (the cells hold the full value)."""
    workbook = Workbook()
    sheet = workbook.worksheets[0]  # the one a new workbook starts with (its active sheet)
    sheet.title = title[:31]
    sheet.append(list(columns))
    for record in records:
        sheet.append([_cell(record.get(column, ""), column) for column in columns])
    sheet.freeze_panes = "A2"
    sheet.auto_filter.ref = f"A1:{get_column_letter(len(columns))}{len(records) + 1}"
    for index, column in enumerate(columns, start=1):
        number_format = column_number_format(column)
        width = len(column)
        for (cell,) in sheet.iter_rows(min_row=2, min_col=index, max_col=index):
            keep_as_text(cell)
            if number_format is not None and isinstance(cell.value, int | float | Decimal):
                cell.number_format = number_format
            width = max(width, len(_shown(cell.value, column)))
        # Two characters for the autofilter's button beside the header.
        sheet.column_dimensions[get_column_letter(index)].width = min(width + 3, _MAX_WIDTH)
    buffer = io.BytesIO()
    workbook.save(buffer)
    return buffer.getvalue()


def column_number_format(column: str) -> str | None:
    """The XLSX display format of a column, by its name's unit; None for text columns."""
    if column.startswith("usd_per_"):
        return UNIT_PRICE_FORMAT
    if column.endswith("_usd"):
        return MONEY_FORMAT
    if column.endswith("_hours"):
        return HOURS_FORMAT
    return None


def _shown(value: object, column: str) -> str:
    """How wide a number looks in its display format (for the column width)."""
    if not isinstance(value, int | float | Decimal):
        return str(value or "")
    places = {MONEY_FORMAT: 2, UNIT_PRICE_FORMAT: 4}.get(column_number_format(column) or "", 6)
    return f"{value:,.{places}f}" + ("$" if column_number_format(column) == MONEY_FORMAT else "")


def _cell(value: object, column: str) -> object:
    """A Decimal is written as the number it is, at its column's places: openpyxl stores a Decimal's own digits
    (``21.92``), where a float would carry binary noise (``21.919999999``)."""
    if isinstance(value, Decimal):
        return Decimal(decimal_text(value, column))
    return value


def file_name(report: Report, *, detail: bool, extension: str, scope_label: str) -> str:
    """``chargeback-all-teams-2026-11.csv`` (finance), ``showback-nlp-jobs-2026-11.xlsx`` (one team's): the
    scope is in the name, so a lead's export and finance's full one never overwrite each other."""
    parts = [report.mode, scope_label]
    if detail:
        parts.append("jobs")
    parts.append(report.period.label)
    return "-".join(parts) + f".{extension}"
