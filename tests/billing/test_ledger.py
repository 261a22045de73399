"""The ledger close: hour boundaries, exact GPU-hours, prices in force, borrowed capacity, lost work."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from billing.errors import LedgerConflict, LedgerInputError
from billing.models import LedgerEntry, LostWork
from billing.services import LIVE_SETTLE_S, ledger_close_due, ledger_close_interval
from tests.billing.conftest import at
from tests.factories import AllocationFactory, JobEventFactory, JobFactory, QuotaFactory, TeamFactory

pytestmark = pytest.mark.django_db


def _entries(allocation) -> list[LedgerEntry]:
    return list(LedgerEntry.objects.filter(allocation=allocation).order_by("interval_start"))


def test_an_ended_allocation_is_cut_on_the_hours_and_at_its_end(prices, reserved_node):
    allocation = AllocationFactory(
        node=reserved_node, tier="reserved", started_at=at(2, 10, 23, 15), ended_at=at(2, 13, 5)
    )
    result = ledger_close_interval(allocation_id=allocation.pk, until=at(3))
    entries = _entries(allocation)
    assert [(e.interval_start, e.interval_end) for e in entries] == [
        (at(2, 10, 23, 15), at(2, 11)),
        (at(2, 11), at(2, 12)),
        (at(2, 12), at(2, 13)),
        (at(2, 13), at(2, 13, 5)),
    ]
    # 2 h 41 min 45 s of one whole GPU.
    assert sum(e.gpu_hours for e in entries) == result.gpu_hours == Decimal("2.695833")
    assert [e.gpu_hours for e in entries] == [
        Decimal("0.612500"),
        Decimal("1.000000"),
        Decimal("1.000000"),
        Decimal("0.083333"),
    ]
    assert {e.price_per_gpu_hour for e in entries} == {Decimal("2.0000")}
    assert {e.price_source for e in entries} == {"catalog"}
    assert entries[1].cost == Decimal("2.000000")
    assert {(e.team_id, e.job_id, e.gpu_model, e.gpu_class, e.tier) for e in entries} == {
        (allocation.job.team_id, allocation.job_id, "A100-SXM4-80GB", "A100", "reserved")
    }


def test_a_mig_slice_counts_its_compute_slices_over_seven(prices, reserved_node):
    allocation = AllocationFactory(
        node=reserved_node, mig_profile="3g.40gb", mig_start=4, started_at=at(2, 10, 30), ended_at=at(2, 12, 0)
    )
    ledger_close_interval(allocation_id=allocation.pk, until=at(3))
    entries = _entries(allocation)
    assert {e.gpu_units for e in entries} == {3000}
    # 1.5 h × 3/7 = 0.642857142… → 0.642857; the half hour alone is 0.214286, the hour 0.428571.
    assert [e.gpu_hours for e in entries] == [Decimal("0.214286"), Decimal("0.428571")]
    assert sum(e.gpu_hours for e in entries) == Decimal("0.642857")


def test_a_live_allocation_closes_whole_hours_only_and_rerunning_writes_nothing(prices, reserved_node):
    allocation = AllocationFactory(node=reserved_node, started_at=at(2, 10, 30))
    first = ledger_close_due(now=at(2, 13, 20))
    assert first.entries == 3  # 10:30-11, 11-12, 12-13
    assert ledger_close_due(now=at(2, 13, 20)).entries == 0
    assert ledger_close_due(now=at(2, 13, 59)).entries == 0
    # The settle lag: 14:02 is less than LIVE_SETTLE_S after 14:00, so the 13-14 hour waits.
    assert ledger_close_due(now=at(2, 14, 2)).entries == 0
    assert ledger_close_due(now=at(2, 14) + timedelta(seconds=LIVE_SETTLE_S)).entries == 1
    assert _entries(allocation)[-1].interval_end == at(2, 14)


def test_an_allocation_that_ends_later_is_closed_through_its_end(prices, reserved_node):
    allocation = AllocationFactory(node=reserved_node, started_at=at(2, 10, 30))
    ledger_close_due(now=at(2, 12, 10))
    allocation.ended_at = at(2, 12, 20)
    allocation.end_reason = "completed"
    allocation.save()
    summary = ledger_close_due(now=at(2, 13))
    assert summary.entries == 1
    entries = _entries(allocation)
    assert entries[-1].interval_end == at(2, 12, 20)
    assert sum(e.gpu_hours for e in entries) == Decimal("1.833333")
    assert not LostWork.objects.exists()


def test_price_in_force_changes_at_midnight_and_the_node_price_is_the_fallback(prices, a100, h100):
    from tests.factories import NodeFactory

    od = NodeFactory(gpu_model=a100, tier="on-demand")
    across = AllocationFactory(node=od, tier="on-demand", started_at=at(14, 23), ended_at=at(15, 1))
    ledger_close_interval(allocation_id=across.pk, until=at(16))
    assert [e.price_per_gpu_hour for e in _entries(across)] == [Decimal("3.0000"), Decimal("2.5000")]
    # Before 2026-09-01 the catalog has no price: the allocation's own (the node's at bind time) is used.
    early = AllocationFactory(
        node=od,
        tier="on-demand",
        price_per_gpu_hour=Decimal("3.3300"),
        started_at=at(30, 10, month=8),
        ended_at=at(30, 11, month=8),
    )
    ledger_close_interval(allocation_id=early.pk, until=at(16))
    (entry,) = _entries(early)
    assert (entry.price_per_gpu_hour, entry.price_source, entry.cost) == (
        Decimal("3.3300"),
        "allocation",
        Decimal("3.330000"),
    )


def test_capacity_above_the_guarantee_is_borrowed_first_started_fills_first(prices, reserved_node):
    team = TeamFactory()
    QuotaFactory(team=team, gpu_class="any", guaranteed_gpus=Decimal(1), burst_gpus=Decimal(4))
    first = AllocationFactory(
        job=JobFactory(team=team, started_at=at(2, 9), submitted_at=at(2, 8)),
        node=reserved_node,
        gpu_index=0,
        started_at=at(2, 9),
        ended_at=at(2, 12),
    )
    second = AllocationFactory(
        job=JobFactory(team=team, started_at=at(2, 10), submitted_at=at(2, 8), preemptible=True),
        node=reserved_node,
        gpu_index=1,
        started_at=at(2, 10),
        ended_at=at(2, 13),
    )
    ledger_close_due(now=at(3))
    assert [e.borrowed for e in _entries(first)] == [False, False, False]
    # While the first job runs the second is borrowed; once it ends (12:00) the second fits the guarantee.
    assert [e.borrowed for e in _entries(second)] == [True, True, False]


def test_a_non_preemptible_job_fills_the_guarantee_before_a_preemptible_one(prices, reserved_node):
    team = TeamFactory()
    QuotaFactory(team=team, gpu_class="any", guaranteed_gpus=Decimal(1), burst_gpus=Decimal(4))
    early_preemptible = AllocationFactory(
        job=JobFactory(team=team, preemptible=True, started_at=at(2, 9), submitted_at=at(2, 8)),
        node=reserved_node,
        gpu_index=0,
        started_at=at(2, 9),
        ended_at=at(2, 11),
    )
    late_firm = AllocationFactory(
        job=JobFactory(team=team, started_at=at(2, 10), submitted_at=at(2, 8)),
        node=reserved_node,
        gpu_index=1,
        started_at=at(2, 10),
        ended_at=at(2, 11),
    )
    ledger_close_due(now=at(3))
    assert [e.borrowed for e in _entries(early_preemptible)] == [False, True]
    assert [e.borrowed for e in _entries(late_firm)] == [False]


def test_a_team_without_quota_borrows_everything(prices, reserved_node):
    allocation = AllocationFactory(node=reserved_node, started_at=at(2, 9), ended_at=at(2, 10))
    ledger_close_due(now=at(3))
    assert [e.borrowed for e in _entries(allocation)] == [True]


def test_preemption_records_the_work_since_the_last_checkpoint(prices, spot_node):
    job = JobFactory(preemptible=True, checkpoint_interval_s=1800, started_at=at(2, 9), submitted_at=at(2, 8))
    allocation = AllocationFactory(
        job=job, node=spot_node, tier="spot", started_at=at(2, 9), ended_at=at(2, 11, 20), end_reason="node-lost"
    )
    JobEventFactory(job=job, type="checkpointed", at=at(2, 8, 30))  # before this allocation: not counted
    JobEventFactory(job=job, type="checkpointed", at=at(2, 10, 30))
    JobEventFactory(job=job, type="checkpointed", at=at(2, 11, 0))
    ledger_close_due(now=at(3))
    lost = LostWork.objects.get(allocation=allocation)
    assert lost.last_checkpoint_at == at(2, 11)
    assert lost.lost_s == Decimal("1200.000000")
    assert lost.gpu_hours == Decimal("0.333333")
    assert lost.price_per_gpu_hour == Decimal("2.5000")
    assert lost.cost == Decimal("0.833332")  # 0.333333 × 2.5 = 0.8333325, half-even
    assert (lost.reason, lost.tier, lost.gpu_model) == ("node-lost", "spot", "H100-SXM5-80GB")
    # The ledger still bills the whole allocation: the capacity was used, the loss is reported beside it.
    assert sum(e.gpu_hours for e in _entries(allocation)) == Decimal("2.333333")


def test_a_preempted_event_at_the_end_counts_whatever_the_end_reason(prices, spot_node):
    job = JobFactory(started_at=at(2, 9), submitted_at=at(2, 8))
    allocation = AllocationFactory(
        job=job, node=spot_node, tier="spot", started_at=at(2, 9), ended_at=at(2, 9, 45), end_reason="stopped"
    )
    JobEventFactory(job=job, type="preempted", at=at(2, 9, 45))
    ledger_close_due(now=at(3))
    lost = LostWork.objects.get(allocation=allocation)
    assert (lost.last_checkpoint_at, lost.gpu_hours) == (None, Decimal("0.750000"))


def test_a_completed_allocation_loses_nothing(prices, spot_node):
    allocation = AllocationFactory(
        node=spot_node, tier="spot", started_at=at(2, 9), ended_at=at(2, 9, 45), end_reason="completed"
    )
    ledger_close_due(now=at(3))
    assert not LostWork.objects.filter(allocation=allocation).exists()


def test_an_end_recorded_before_a_closed_hour_is_a_conflict_not_a_rewrite(prices, reserved_node):
    allocation = AllocationFactory(node=reserved_node, started_at=at(2, 9))
    ledger_close_due(now=at(2, 12, 30))
    allocation.ended_at = at(2, 10, 30)
    allocation.save()
    with pytest.raises(LedgerConflict, match=r"ended at .* but the ledger is closed through"):
        ledger_close_interval(allocation_id=allocation.pk, until=at(3))
    summary = ledger_close_due(now=at(3))
    assert len(summary.failed) == 1 and f"allocation {allocation.pk}" in summary.failed[0]
    assert LedgerEntry.objects.filter(allocation=allocation).count() == 3


def test_an_unknown_mig_profile_is_reported_and_others_still_close(prices, reserved_node):
    bad = AllocationFactory(
        node=reserved_node, gpu_index=0, mig_profile="9g.99gb", mig_start=0, started_at=at(2, 9), ended_at=at(2, 10)
    )
    good = AllocationFactory(node=reserved_node, gpu_index=1, started_at=at(2, 9), ended_at=at(2, 10))
    with pytest.raises(LedgerInputError, match="not a MIG profile of A100-SXM4-80GB"):
        ledger_close_interval(allocation_id=bad.pk, until=at(3))
    summary = ledger_close_due(now=at(3))
    assert summary.entries == 1 and len(summary.failed) == 1
    assert LedgerEntry.objects.filter(allocation=good).count() == 1
