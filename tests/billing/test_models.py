"""LedgerEntry: one row per allocation and interval, positive intervals, no negative money."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import IntegrityError, transaction

from billing.models import LedgerEntry
from tests.factories import AllocationFactory

pytestmark = pytest.mark.django_db


def _entry(**overrides: object) -> LedgerEntry:
    allocation = overrides.pop("allocation", None) or AllocationFactory()
    start = allocation.started_at
    fields: dict[str, object] = {
        "allocation": allocation,
        "team": allocation.job.team,
        "interval_start": start,
        "interval_end": start + timedelta(hours=1),
        "gpu_hours": Decimal("1.000000"),
        "tier": "reserved",
        "price_per_gpu_hour": Decimal("2.1000"),
        "cost": Decimal("2.100000"),
    }
    fields.update(overrides)
    return LedgerEntry.objects.create(**fields)


def test_an_interval_is_closed_once_per_allocation() -> None:
    entry = _entry()
    with pytest.raises(IntegrityError), transaction.atomic():
        _entry(allocation=entry.allocation)


def test_the_next_interval_of_the_same_allocation_is_fine() -> None:
    entry = _entry()
    _entry(
        allocation=entry.allocation,
        interval_start=entry.interval_end,
        interval_end=entry.interval_end + timedelta(minutes=30),
    )
    assert LedgerEntry.objects.filter(allocation=entry.allocation).count() == 2


@pytest.mark.parametrize(
    "overrides",
    [
        {"gpu_hours": Decimal("-0.5")},
        {"cost": Decimal("-1")},
        {"price_per_gpu_hour": Decimal("-1")},
        {"tier": "gold"},
    ],
)
def test_ledger_constraints(overrides: dict[str, object]) -> None:
    with pytest.raises(IntegrityError), transaction.atomic():
        _entry(**overrides)


def test_interval_must_have_positive_length() -> None:
    allocation = AllocationFactory()
    with pytest.raises(IntegrityError), transaction.atomic():
        _entry(allocation=allocation, interval_end=allocation.started_at)


def test_mig_fraction_hours_keep_six_decimals() -> None:
    entry = _entry(gpu_hours=Decimal(3) / Decimal(7))
    entry.refresh_from_db()
    assert entry.gpu_hours == Decimal("0.428571")
