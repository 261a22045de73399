"""Autoscaled nodes in the bill: paid from their node request to their release (the cost stops there), and the hours
before their first work charged to the team that asked (billing.capacity, billing.on_demand; docs/billing.md)."""

from __future__ import annotations

import csv
import io
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from django.db.models import Sum
from django.urls import reverse
from openpyxl import load_workbook

from billing.capacity import capacity_lines, node_lives
from billing.cents import to_cents
from billing.exports import MONEY_FORMAT, SUMMARY_COLUMNS, summary_records, to_csv, to_xlsx
from billing.models import LedgerEntry
from billing.on_demand import on_demand_overheads
from billing.periods import period_for
from billing.prices import PriceBook
from billing.report import Report
from billing.selectors import Scope, chargeback_report
from billing.services import ledger_close_due
from jobs.models import Allocation, Job
from scheduler.autoscaled import AutoscaledPool, Autoscaler, NodeRequest
from scheduler.models import GpuModel, Node
from scheduler.services.fleet import gpu_models_sync, node_register
from teams.models import Project
from tests.scheduler.loop_helpers import team_seed

pytestmark = pytest.mark.django_db

REQUESTED = datetime(2026, 11, 10, 8, 0, tzinfo=UTC)
PRICE = Decimal("3.4300")


def _autoscaled(*, released_after_h: float | None, first_work_after_h: float | None) -> tuple[Node, Job]:
    gpu_models_sync()
    team = team_seed()
    project = Project.objects.create(team=team, code="NLP-7")
    job = Job.objects.create(
        team=team, project=project, name="peak", kind="training", gpus=8, submitted_at=REQUESTED - timedelta(hours=1)
    )
    pool = AutoscaledPool.objects.create(
        name="a100-od",
        autoscaler=Autoscaler.SIMULATED,
        gpu_model=GpuModel.objects.get(name="A100-SXM4-80GB"),
        gpus_per_node=8,
        max_nodes=2,
    )
    request = NodeRequest.objects.create(
        job=job,
        pool=pool,
        nodes=1,
        gpus_per_node=8,
        gpu_hours=8,
        state="fulfilled",
        requested_at=REQUESTED,
        state_since=REQUESTED,
        arrives_at=REQUESTED + timedelta(minutes=10),
    )
    node = node_register(
        name="a100-od-1-0",
        gpu_model="A100-SXM4-80GB",
        gpu_count=8,
        interconnect="nvswitch",
        leaf_switch="",
        spine="",
        tier="on-demand",
        price_per_gpu_hour=PRICE,
        pool="a100-od",
    )
    released = REQUESTED + timedelta(hours=released_after_h) if released_after_h is not None else None
    Node.objects.filter(pk=node.pk).update(node_request=request, released_at=released)
    if first_work_after_h is not None:
        started = REQUESTED + timedelta(hours=first_work_after_h)
        Allocation.objects.create(
            job=job,
            replica=0,
            node=node,
            gpu_index=0,
            tier="on-demand",
            price_per_gpu_hour=PRICE,
            started_at=started,
            ended_at=started + timedelta(hours=1),
        )
    node.refresh_from_db()
    return node, job


def test_a_released_nodes_cost_stops_at_its_release_and_starts_at_its_request() -> None:
    _autoscaled(released_after_h=3, first_work_after_h=0.25)
    period = period_for(date(2026, 11, 1), now=datetime(2026, 12, 1, tzinfo=UTC))
    lines = capacity_lines(period=period, lives=node_lives(), prices=PriceBook([]))
    line = lines[("A100-SXM4-80GB", "on-demand")]
    assert line.capacity_gpu_hours == Decimal("24.000000")  # 3 hours × 8 GPUs, not a month's
    assert line.paid_cost == Decimal("82.320000")


def test_the_hours_before_the_first_work_are_the_requesting_jobs_overhead() -> None:
    node, job = _autoscaled(released_after_h=3, first_work_after_h=0.25)
    period = period_for(date(2026, 11, 1), now=datetime(2026, 12, 1, tzinfo=UTC))
    catalog = PriceBook([("A100-SXM4-80GB", "on-demand", date(2026, 1, 1), Decimal("4.0000"))])
    (overhead,) = on_demand_overheads(period=period, prices=catalog)
    assert (overhead.node, overhead.job, overhead.team, overhead.project) == (
        node.name,
        job.pk,
        job.team_id,
        job.project_id,
    )
    assert overhead.gpu_hours == Decimal("2.000000")  # a quarter hour × 8 GPUs
    assert overhead.cost == Decimal("8.000000")  # at the catalog's on-demand price


def test_a_node_released_without_work_is_overhead_until_its_release() -> None:
    _autoscaled(released_after_h=0.5, first_work_after_h=None)
    period = period_for(date(2026, 11, 1), now=datetime(2026, 12, 1, tzinfo=UTC))
    (overhead,) = on_demand_overheads(period=period, prices=PriceBook([]))
    assert overhead.first_work_at is None
    assert (overhead.gpu_hours, overhead.cost) == (Decimal("4.000000"), Decimal("13.720000"))  # the node's price


def test_the_chargeback_report_shows_each_teams_overhead_to_whom_may_see_it(client, finance_user) -> None:
    _node, job = _autoscaled(released_after_h=3, first_work_after_h=0.25)
    month, now = date(2026, 11, 1), datetime(2026, 12, 1, tzinfo=UTC)
    everyone = chargeback_report(scope=Scope(all_teams=True), month=month, now=now)
    assert everyone.overhead_by_team == {job.team_id: (Decimal("2.000000"), Decimal("6.860000"))}
    assert (everyone.overhead_gpu_hours, everyone.overhead_cost) == (Decimal("2.000000"), Decimal("6.860000"))
    own = chargeback_report(scope=Scope(all_teams=False, team_ids=frozenset({job.team_id})), month=month, now=now)
    assert own.overhead_cost == Decimal("6.860000")
    other = chargeback_report(scope=Scope(all_teams=False, team_ids=frozenset({job.team_id + 1})), month=month, now=now)
    assert (other.overhead_by_team, other.overhead_cost) == ({}, Decimal(0))
    client.force_login(finance_user)
    page = client.get(reverse("billing:reports"), {"month": "2026-11"}).content.decode()
    assert 'data-testid="on-demand-overhead"' in page and "on-demand overhead" in page


def _csv(report: Report) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(to_csv(summary_records(report), SUMMARY_COLUMNS))))


def test_the_chargeback_files_carry_each_teams_overhead_and_still_reconcile() -> None:
    _node, job = _autoscaled(released_after_h=3, first_work_after_h=0.25)
    month, now = date(2026, 11, 1), datetime(2026, 12, 1, tzinfo=UTC)
    ledger_close_due(now=now)
    report = chargeback_report(scope=Scope(all_teams=True), month=month, now=now)
    assert report.status == "final"  # every hour from the closed ledger
    rows = _csv(report)
    (overhead,) = [r for r in rows if r["line"] == "on-demand-overhead"]
    assert (overhead["team"], overhead["team_name"], overhead["tier"]) == (job.team.slug, job.team.name, "on-demand")
    assert (overhead["on_demand_overhead_gpu_hours"], overhead["on_demand_overhead_usd"]) == ("2.000000", "6.86")
    # Already inside the on-demand idle-capacity line: no GPU-hours nor money of its own in the lines' columns ...
    assert (overhead["gpu_hours"], overhead["total_usd"]) == ("", "")
    (idle,) = [r for r in rows if r["line"] == "idle-capacity" and r["tier"] == "on-demand"]
    assert Decimal(idle["total_usd"]) >= Decimal("6.86")
    # ... so the lines still add up to the total row and to what the cluster cost, and the ledger's usage is the
    # usage lines' (the overhead is no ledger entry).
    (total,) = [r for r in rows if r["line"] == "total"]
    (cluster,) = [r for r in rows if r["line"] == "cluster-cost"]
    lines = [r for r in rows if r["line"] not in ("total", "cluster-cost")]
    assert (
        sum(Decimal(r["total_usd"] or 0) for r in lines) == Decimal(total["total_usd"]) == to_cents(report.lines_total)
    )
    assert Decimal(total["total_usd"]) == Decimal(cluster["total_usd"]) and report.reconciled
    usage = sum(Decimal(r["usage_cost_usd"]) for r in rows if r["line"] == "usage")
    ledger = LedgerEntry.objects.aggregate(cost=Sum("cost"))["cost"]
    assert usage == to_cents(ledger) == Decimal("3.43")  # the ledger's: 1 GPU for 1 h at the node's price
    assert total["on_demand_overhead_usd"] == "6.86"
    # The XLSX holds the same figures as numbers in the currency and GPU-hour formats.
    sheet = load_workbook(io.BytesIO(to_xlsx(summary_records(report), SUMMARY_COLUMNS, title="2026-11"))).active
    header = [cell.value for cell in sheet[1]]
    cells = {row[header.index("line")].value: row for row in sheet.iter_rows(min_row=2)}
    cell = cells["on-demand-overhead"][header.index("on_demand_overhead_usd")]
    assert (cell.value, cell.number_format) == (6.86, MONEY_FORMAT)  # read back as a float
    # A lead sees their team's overhead line; another team's lead sees none.
    own = chargeback_report(scope=Scope(all_teams=False, team_ids=frozenset({job.team_id})), month=month, now=now)
    assert [r["team"] for r in _csv(own) if r["line"] == "on-demand-overhead"] == [job.team.slug]
    other = chargeback_report(scope=Scope(all_teams=False, team_ids=frozenset({job.team_id + 1})), month=month, now=now)
    assert not [r for r in _csv(other) if r["line"] == "on-demand-overhead"]
    assert _csv(other)[-1]["on_demand_overhead_usd"] == ""


def test_overhead_lines_are_apportioned_to_the_cent_and_name_each_team() -> None:
    period = period_for(date(2026, 11, 1), now=datetime(2026, 12, 1, tzinfo=UTC))
    report = Report(
        period=period,
        mode="chargeback",
        idle_mode="own-line",
        scope_all=True,
        job_lines=[],
        capacity=[],
        commitments=[],
        idle_shared=False,
        closed_through=None,
        overhead_by_team={2: (Decimal("1"), Decimal("0.005")), 1: (Decimal("1"), Decimal("0.005"))},
        overhead_teams={1: ("vision", "Vision"), 2: ("nlp", "NLP")},
    )
    rows = _csv(report)
    overhead = [(r["team"], r["on_demand_overhead_usd"]) for r in rows if r["line"] == "on-demand-overhead"]
    assert overhead == [("nlp", "0.01"), ("vision", "0.00")]  # 1 cent in all (half-even of 0.010), by slug
    assert rows[-2]["line"] == "total" and rows[-2]["on_demand_overhead_usd"] == "0.01"
