"""The demo's month of billing history: teams' usage dominates idle capacity, with plausible job mixes, closed
by the real ledger closer, deterministically."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from billing.models import LedgerEntry, LostWork, ReservedCommitment
from billing.periods import add_months
from billing.selectors import Scope, chargeback_report
from demo.billing import HISTORY_PREFIX, _history_create
from demo.seed import demo_seed
from jobs.models import Allocation, Job
from teams.models import Project
from tests.untraced import untraced

pytestmark = pytest.mark.django_db


@untraced
def test_last_month_is_mostly_used_by_every_team_and_final_and_the_finance_pages_are_filled_once():
    """One month of history is the seed's costly part (a minute of CPU), so this one seed answers both what the
    month looks like and what finance sees this month; a second seed adds nothing."""
    result = demo_seed()
    entries = LedgerEntry.objects.count()
    assert result.history_entries == entries > 10_000
    assert LostWork.objects.exists() and ReservedCommitment.objects.count() == 3
    now = timezone.now()
    this_month = chargeback_report(scope=Scope(all_teams=True), month=date(now.year, now.month, 1), now=now)
    assert this_month.reconciled and this_month.usage_total > 0 and this_month.unused_commitment_total > 0
    assert not [w for w in this_month.warnings if "registered" in w]  # usage never exceeds registered capacity
    last = add_months(date(now.year, now.month, 1), -1)
    report = chargeback_report(scope=Scope(all_teams=True), month=last, now=now)
    capacity = sum(line.capacity_gpu_hours for line in report.capacity)
    used = sum(line.used_gpu_hours for line in report.capacity)
    assert 0.6 <= used / capacity <= 0.8  # OpenCost/Kubecost-like demo clusters: usage dominates idle
    assert report.usage_total > report.idle_total
    assert report.reconciled and report.status == "final" and not report.warnings
    assert {line.team_slug for line in report.job_lines} == {"nlp", "vision", "speech"}
    used_projects = {(line.team_slug, line.project_code) for line in report.job_lines}
    assert used_projects == {(p.team.slug, p.code) for p in Project.objects.select_related("team")}
    history = Allocation.objects.filter(job__name__startswith=HISTORY_PREFIX)
    # Inference on MIG slices; training and batch on whole GPUs.
    assert not history.filter(job__kind="inference", mig_profile="").exists()
    assert not history.exclude(job__kind="inference").exclude(mig_profile="").exists()
    assert history.filter(job__kind="training", job__gpus=8).exists()
    # Every history allocation is closed through its end by the ledger closer.
    assert history.filter(ledger_entries__interval_end=F("ended_at")).count() == history.count()
    demo_seed()
    assert LedgerEntry.objects.count() == entries


def test_the_history_is_the_same_from_the_same_seed():
    demo_seed(history=False)
    start = datetime(2026, 10, 1, tzinfo=UTC)

    def made() -> list[tuple[str, str, int]]:
        with transaction.atomic():
            _history_create(start=start, end=start + timedelta(days=2))
            rows = list(
                Allocation.objects.filter(job__name__startswith=HISTORY_PREFIX)
                .order_by("job__name", "node__name", "gpu_index", "mig_start")
                .values_list("job__name", "node__name", "gpu_index")
            )
            transaction.set_rollback(True)
        return rows

    first = made()
    assert first and made() == first
    assert not Job.objects.filter(name__startswith=HISTORY_PREFIX).exists()
