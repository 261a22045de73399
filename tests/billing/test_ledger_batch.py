"""``ledger_close_due`` closes many allocations per transaction: its statements do not grow with them, what it
writes is what closing them one at a time writes, and a batch that collides with another closer's rows is closed
again one at a time."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from billing.models import LedgerEntry, LostWork
from billing.services import ledger, ledger_close_due, ledger_close_interval
from jobs.models import Allocation
from tests.billing.conftest import at
from tests.billing.test_ledger_exactly_once import assert_ledger_exact
from tests.factories import AllocationFactory, JobEventFactory, JobFactory, NodeFactory

pytestmark = pytest.mark.django_db


def _allocations(node, count: int) -> list[Allocation]:
    """Ended, preempted with and without a checkpoint, live, finished: every path through closing; each on a GPU
    of its own (of ``node`` and nodes like it)."""
    made = []
    for index in range(count):
        if index and index % 8 == 0:
            node = NodeFactory(gpu_model=node.gpu_model, tier=node.tier)
        job = JobFactory(preemptible=True, started_at=at(2, 1), submitted_at=at(2))
        ended = None if index % 4 == 0 else at(2, 5 + index % 7, 10 + index)
        made.append(
            AllocationFactory(
                job=job,
                node=node,
                gpu_index=index % 8,
                started_at=at(2, 1, index),
                ended_at=ended,
                end_reason="reclaim" if index % 4 == 1 else "",
            )
        )
        if index % 4 == 1 and index % 8 == 1:
            JobEventFactory(job=job, type="checkpointed", at=at(2, 3))
        if index % 4 == 2:
            JobEventFactory(job=job, type="preempted", at=ended)
    return made


def _ledger() -> list[tuple[object, ...]]:
    entries = LedgerEntry.objects.order_by("allocation_id", "interval_start").values_list(
        "allocation_id", "interval_start", "interval_end", "gpu_hours", "cost", "borrowed"
    )
    lost = LostWork.objects.order_by("allocation_id").values_list(
        "allocation_id", "last_checkpoint_at", "gpu_hours", "cost", "reason"
    )
    return [*entries, *lost]


def test_a_batch_writes_what_closing_one_at_a_time_writes(prices, reserved_node, monkeypatch):
    allocations = _allocations(reserved_node, 12)
    for allocation in allocations:
        ledger_close_interval(allocation_id=allocation.pk, until=at(3))
    one_at_a_time = _ledger()
    assert LostWork.objects.count() == 6  # the three reclaimed, the three with a preempted event at their end
    LedgerEntry.objects.all().delete()
    LostWork.objects.all().delete()
    monkeypatch.setattr(ledger, "CLOSE_BATCH", 5)  # three batches, the last one short
    summary = ledger_close_due(now=at(3), settle_s=0)
    assert _ledger() == one_at_a_time
    assert (summary.allocations, summary.lost_work, summary.failed) == (12, 6, [])


def test_the_statements_do_not_grow_with_the_allocations(prices, reserved_node):
    def statements(count: int) -> int:
        LostWork.objects.all().delete()
        LedgerEntry.objects.all().delete()
        Allocation.objects.all().delete()
        _allocations(reserved_node, count)
        with CaptureQueriesContext(connection) as queries:
            summary = ledger_close_due(now=at(3), settle_s=0)
        assert summary.allocations == count
        # The entries' insert is split by the database's limit on parameters (SQLite's 999: ~66 rows a statement).
        return sum(not q["sql"].startswith('INSERT INTO "billing_ledgerentry"') for q in queries.captured_queries)

    assert statements(4) == statements(40)


def test_a_batch_that_collides_with_another_closers_rows_is_closed_one_at_a_time(prices, reserved_node, monkeypatch):
    allocations = _allocations(reserved_node, 6)
    ledger_close_due(now=at(2, 8), settle_s=0)
    before = LedgerEntry.objects.count()
    # A closer that read stale watermarks (as if no row lock existed) collides with the rows already there.
    monkeypatch.setattr(ledger, "_watermarks", lambda allocation_ids: {})
    monkeypatch.setattr(ledger, "_earliest_open", lambda allocation_ids: at(2, 1))
    summary = ledger_close_due(now=at(3), settle_s=0)
    assert summary.failed == [] and summary.entries == LedgerEntry.objects.count() - before > 0
    for allocation in allocations:
        allocation.refresh_from_db()
        assert_ledger_exact(allocation, through=allocation.ended_at or at(3))


def test_an_allocation_that_cannot_be_closed_leaves_the_rest_of_its_batch_closed(prices, reserved_node):
    allocations = _allocations(reserved_node, 5)
    Allocation.objects.filter(pk=allocations[2].pk).update(mig_profile="9g.99gb", mig_start=0)
    summary = ledger_close_due(now=at(3), settle_s=0)
    assert len(summary.failed) == 1 and f"allocation {allocations[2].pk}" in summary.failed[0]
    assert summary.allocations == 4
    assert not LedgerEntry.objects.filter(allocation=allocations[2]).exists()
    assert LedgerEntry.objects.filter(allocation=allocations[3]).exists()
    assert ledger_close_due(now=at(3) + timedelta(hours=1), settle_s=3600).entries == 0
