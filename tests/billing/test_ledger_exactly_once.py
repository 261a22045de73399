"""Exactly once: every allocated second is billed once, whatever the order, repetition or failure of closers."""

from __future__ import annotations

import itertools
import threading
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection, connections
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from billing.intervals import accrued_gpu_hours
from billing.models import LedgerEntry, LostWork
from billing.services import ledger, ledger_close_due, ledger_close_interval
from jobs.models import Allocation
from tests.billing.conftest import T0, at
from tests.factories import AllocationFactory, JobEventFactory, JobFactory

_PROFILES = {"": 7000, "1g.10gb": 1000, "2g.20gb": 2000, "3g.40gb": 3000, "7g.80gb": 7000}
_STARTS = {"": None, "1g.10gb": 0, "2g.20gb": 2, "3g.40gb": 4, "7g.80gb": 0}


def assert_ledger_exact(allocation: Allocation, *, through) -> None:
    """The allocation's entries tile [started_at, through) without gap or overlap, and sum to time × size."""
    entries = list(LedgerEntry.objects.filter(allocation=allocation).order_by("interval_start"))
    assert entries, f"allocation {allocation.pk} has no entries"
    assert entries[0].interval_start == allocation.started_at
    for before, after in itertools.pairwise(entries):
        assert before.interval_end == after.interval_start, "intervals must neither overlap nor leave a gap"
        assert before.interval_end.minute == before.interval_end.second == before.interval_end.microsecond == 0
    assert entries[-1].interval_end == through
    units = entries[0].gpu_units
    expected = accrued_gpu_hours(started_at=allocation.started_at, at=through, units=units, units_per_gpu=7000)
    assert sum(e.gpu_hours for e in entries) == expected
    exact_hours = Decimal((through - allocation.started_at) / timedelta(microseconds=1)) / Decimal(3_600_000_000)
    assert abs(expected - exact_hours * units / 7000) <= Decimal("0.0000005")


@pytest.mark.django_db
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    start_s=st.integers(min_value=0, max_value=5 * 86_400),
    length_s=st.integers(min_value=1, max_value=3 * 86_400),
    micro=st.integers(min_value=0, max_value=999_999),
    profile=st.sampled_from(sorted(_PROFILES)),
    closes=st.lists(st.integers(min_value=0, max_value=9 * 86_400), max_size=6),
)
def test_any_sequence_of_closes_bills_each_second_once(
    prices, reserved_node, start_s, length_s, micro, profile, closes
):
    LedgerEntry.objects.all().delete()
    LostWork.objects.all().delete()
    Allocation.objects.all().delete()
    started = T0 + timedelta(seconds=start_s, microseconds=micro)
    ended = started + timedelta(seconds=length_s)
    allocation = AllocationFactory(
        node=reserved_node, mig_profile=profile, mig_start=_STARTS[profile], started_at=started, ended_at=ended
    )
    # Closers run at arbitrary times, some before the end (the allocation was live then), in any order.
    for close_s in closes:
        ledger_close_due(now=T0 + timedelta(seconds=close_s), settle_s=0)
    ledger_close_due(now=ended + timedelta(days=1))
    ledger_close_due(now=ended + timedelta(days=2))
    assert_ledger_exact(allocation, through=ended)
    assert {e.gpu_units for e in LedgerEntry.objects.filter(allocation=allocation)} == {_PROFILES[profile]}


@pytest.mark.django_db
def test_a_loser_of_the_unique_constraint_writes_nothing_and_is_reported_skipped(prices, reserved_node, monkeypatch):
    allocation = AllocationFactory(node=reserved_node, started_at=at(2, 9, 30), ended_at=at(2, 12))
    ledger_close_interval(allocation_id=allocation.pk, until=at(2, 11))
    before = list(LedgerEntry.objects.values_list("id", "interval_start", "gpu_hours"))
    # A closer that read a stale watermark (as if no row lock existed) collides with the rows already there.
    monkeypatch.setattr(ledger, "_closed_until", lambda allocation_id: None)
    result = ledger_close_interval(allocation_id=allocation.pk, until=at(3))
    assert result.skipped and result.entries == 0
    assert list(LedgerEntry.objects.values_list("id", "interval_start", "gpu_hours")) == before
    monkeypatch.undo()
    ledger_close_interval(allocation_id=allocation.pk, until=at(3))
    assert_ledger_exact(allocation, through=at(2, 12))


@pytest.mark.django_db
def test_a_crash_mid_close_writes_nothing_and_the_next_run_bills_everything_once(prices, spot_node, monkeypatch):
    job = JobFactory(preemptible=True, started_at=at(2, 9), submitted_at=at(2, 8))
    allocation = AllocationFactory(
        job=job, node=spot_node, tier="spot", started_at=at(2, 9, 10), ended_at=at(2, 13, 40), end_reason="reclaim"
    )
    JobEventFactory(job=job, type="checkpointed", at=at(2, 12))

    def crash(*args, **kwargs):
        raise RuntimeError("worker killed")

    # The entries are inserted, then the process dies before the lost work (the last write) is recorded.
    monkeypatch.setattr(ledger, "_lost_work_record", crash)
    with pytest.raises(RuntimeError):
        ledger_close_due(now=at(3))
    assert not LedgerEntry.objects.exists()
    monkeypatch.undo()
    summary = ledger_close_due(now=at(3))
    assert (summary.entries, summary.lost_work) == (5, 1)
    assert_ledger_exact(allocation, through=at(2, 13, 40))
    assert LostWork.objects.get().gpu_hours == Decimal("1.666667")
    assert ledger_close_due(now=at(4)).entries == 0


@pytest.mark.skipif(
    connection.vendor != "postgresql",
    reason="concurrent closers need row locks and real parallel transactions: run with DATABASE_URL=postgres://…",
)
@pytest.mark.django_db(transaction=True)
def test_concurrent_closers_on_postgresql_bill_each_second_once(prices, reserved_node, spot_node):
    allocations = []
    for index in range(16):
        node = reserved_node if index % 2 else spot_node
        allocations.append(
            AllocationFactory(
                node=node,
                tier=node.tier,
                gpu_index=index // 2,
                started_at=at(1, index % 5, (7 * index) % 60, index),
                ended_at=None if index % 3 == 0 else at(2 + index % 4, index % 24, 13),
                end_reason="" if index % 3 == 0 else "reclaim",
            )
        )
    workers = 6
    barrier = threading.Barrier(workers)
    summaries, errors = [], []

    def close(now):
        try:
            barrier.wait()
            for _ in range(3):
                summaries.append(ledger_close_due(now=now, settle_s=0))
        except Exception as exc:  # surfaced below: a thread's exception would otherwise vanish
            errors.append(exc)
        finally:
            connections.close_all()

    # Closers with different clocks, all at once, three times each.
    nows = [at(6), at(6), at(5, 12), at(6, 0, 30), at(4), at(6)]
    threads = [threading.Thread(target=close, args=(now,)) for now in nows]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert all(not summary.failed for summary in summaries)
    for allocation in allocations:
        allocation.refresh_from_db()
        assert_ledger_exact(allocation, through=allocation.ended_at or at(6, 0))
    total_written = sum(summary.entries for summary in summaries)
    assert total_written == LedgerEntry.objects.count()
    assert LostWork.objects.count() == sum(1 for a in allocations if a.ended_at is not None)
