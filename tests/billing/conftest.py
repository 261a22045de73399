"""Billing fixtures: a priced fleet of two nodes and helpers to make allocations at fixed times."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal

import pytest

from billing.models import GpuPrice
from scheduler.models import GpuModel
from tests.factories import GpuModelFactory, NodeFactory

T0 = datetime(2026, 10, 1, tzinfo=UTC)


def at(day: int, hour: int = 0, minute: int = 0, second: int = 0, month: int = 10) -> datetime:
    return datetime(2026, month, day, hour, minute, second, tzinfo=UTC)


@pytest.fixture
def a100(db) -> GpuModel:
    return GpuModelFactory(name="A100-SXM4-80GB", gpu_class="A100", memory_mib=81920, mig_capable=True)


@pytest.fixture
def h100(db) -> GpuModel:
    return GpuModelFactory(name="H100-SXM5-80GB", gpu_class="H100", memory_mib=81559, mig_capable=True)


@pytest.fixture
def prices(a100, h100) -> dict[tuple[str, str], Decimal]:
    """Catalog prices from 2026-09-01, and a cheaper on-demand A100 from 2026-10-15."""
    table = {
        (a100, "reserved"): Decimal("2.0000"),
        (a100, "on-demand"): Decimal("3.0000"),
        (a100, "spot"): Decimal("1.0000"),
        (h100, "reserved"): Decimal("4.0000"),
        (h100, "on-demand"): Decimal("7.0000"),
        (h100, "spot"): Decimal("2.5000"),
    }
    for (model, tier), price in table.items():
        GpuPrice.objects.create(gpu_model=model, tier=tier, price_per_gpu_hour=price, effective_from=date(2026, 9, 1))
    GpuPrice.objects.create(
        gpu_model=a100, tier="on-demand", price_per_gpu_hour=Decimal("2.5000"), effective_from=date(2026, 10, 15)
    )
    return {(model.name, tier): price for (model, tier), price in table.items()}


@pytest.fixture
def reserved_node(a100):
    return NodeFactory(name="a100-res-01", gpu_model=a100, tier="reserved", price_per_gpu_hour=Decimal("9.9900"))


@pytest.fixture
def spot_node(h100):
    return NodeFactory(name="h100-spot-01", gpu_model=h100, tier="spot", price_per_gpu_hour=Decimal("9.9900"))


@pytest.fixture
def october(db, team, prices, reserved_node, spot_node, a100):
    """October 2026 on a two-node fleet, worked out by hand (744 hours in the month).

    - Reserved A100 node, 8 GPUs: 5,952 GPU-h. A commitment of 12 A100s at $10,000/month covers it; 4 of the
      12 committed GPUs have no node: 2,976 of 8,928 committed GPU-h unused = $3,333.333333; the 8 registered
      are paid by the rest of the commitment, $6,666.666667.
    - Spot H100 node, 8 GPUs: 5,952 GPU-h × $2.50 = $14,880.
    - Cluster cost = 6,666.666667 + 14,880 + 3,333.333333 = $24,880.
    - Usage: team nlp 24 h of one reserved A100 = 24 GPU-h × $2 = $48; team speech 7 h of one spot H100 =
      7 GPU-h × $2.50 = $17.50. Idle = (6,666.666667 − 48) + (14,880 − 17.50) = $21,481.166667.
    """
    from billing.models import ReservedCommitment
    from billing.services import ledger_close_due
    from scheduler.models import Node
    from tests.factories import AllocationFactory, JobFactory, ProjectFactory, TeamFactory

    Node.objects.update(created_at=datetime(2026, 9, 1, tzinfo=UTC))
    ReservedCommitment.objects.create(
        name="a100-1yr",
        gpu_model=a100,
        gpu_count=12,
        term_months=12,
        monthly_price=Decimal("10000.00"),
        start=date(2026, 9, 1),
    )
    speech = TeamFactory(name="Speech", slug="speech", namespace="team-speech")
    pretrain = ProjectFactory(team=team, code="llm-pretrain")
    AllocationFactory(
        job=JobFactory(team=team, project=pretrain, name="pretrain-7b", submitted_at=at(2, 9), started_at=at(2, 10)),
        node=reserved_node,
        tier="reserved",
        started_at=at(2, 10),
        ended_at=at(3, 10),
        end_reason="completed",
    )
    AllocationFactory(
        job=JobFactory(
            team=speech,
            name="detect-train",
            submitted_at=at(5),
            started_at=at(5),
        ),
        node=spot_node,
        tier="spot",
        started_at=at(5),
        ended_at=at(5, 7),
        end_reason="completed",
    )
    ledger_close_due(now=at(1, month=11))
    return {"nlp": team, "speech": speech}


NOW = datetime(2026, 11, 29, 12, 30, tzinfo=UTC)
