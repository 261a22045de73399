"""A move is billed as it was held: both placements through the overlap (the new replicas start before the old
ones stop), the old one to the move's completion, and no lost work, for a move loses none."""

from __future__ import annotations

from decimal import Decimal

import pytest

from billing.models import LedgerEntry, LostWork
from billing.services import ledger_close_interval
from jobs.models import Allocation
from jobs.services import job_move_complete, job_move_start
from scheduler.core import Slot
from tests.billing.conftest import at
from tests.factories import AllocationFactory, JobFactory

pytestmark = pytest.mark.django_db


def test_the_overlap_is_billed_on_both_placements_and_no_work_is_lost(prices, reserved_node):
    job = JobFactory(kind="inference", state="running", submitted_at=at(2, 9), started_at=at(2, 10))
    old = AllocationFactory(job=job, node=reserved_node, gpu_index=3, started_at=at(2, 10))
    slice_ = ((Slot(node=reserved_node.name, gpu=0, mig_profile="3g.40gb", mig_start=4),),)
    (new,) = job_move_start(job=job, slots=slice_, nodes={reserved_node.name: reserved_node}, at=at(2, 11))
    job_move_complete(job=job, generation=new.generation, at=at(2, 11, 30))

    old.refresh_from_db()
    assert (old.ended_at, old.end_reason) == (at(2, 11, 30), "moved")
    for allocation in (old, new):
        ledger_close_interval(allocation_id=allocation.pk, until=at(2, 12, 30))

    billed = {
        a.pk: sum((e.gpu_hours for e in LedgerEntry.objects.filter(allocation=a)), Decimal(0))
        for a in Allocation.objects.filter(job=job)
    }
    # The whole GPU from 10:00 to the move's completion at 11:30; the 3g.40gb slice (3/7) from 11:00 on.
    assert billed[old.pk] == Decimal("1.500000")
    assert billed[new.pk] == Decimal("0.428571")  # 11:00–12:00, the live hour closed so far
    assert not LostWork.objects.exists()
