"""The price catalog seed and the Celery task (the demo's billing history: tests/demo/test_demo_history.py)."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

import pytest

from billing.models import GpuPrice
from billing.prices import AFTER_CUTS, BEFORE_CUTS, PriceBook, default_prices
from billing.selectors import Scope, chargeback_report
from billing.services import price_catalog_seed
from billing.tasks import ledger_close_task
from demo.seed import price_per_gpu_hour
from tests.billing.conftest import at
from tests.factories import AllocationFactory, NodeFactory

pytestmark = pytest.mark.django_db


def test_the_price_seed_is_idempotent_and_dated():
    created = price_catalog_seed()
    assert created == len(default_prices()) == GpuPrice.objects.count()
    assert price_catalog_seed() == 0
    assert set(GpuPrice.objects.values_list("effective_from", flat=True)) == {BEFORE_CUTS, AFTER_CUTS}
    assert all(row.source.startswith("docs/gpu-facts.md Prices, AWS us-east-1 ") for row in GpuPrice.objects.all())
    p5 = GpuPrice.objects.get(gpu_model__name="H100-SXM5-80GB", tier="on-demand", effective_from=AFTER_CUTS)
    assert p5.price_per_gpu_hour == Decimal("6.8800")  # $55.04 / 8


def test_the_seed_never_overwrites_a_price_finance_changed():
    price_catalog_seed()
    row = GpuPrice.objects.get(gpu_model__name="A100-SXM4-80GB", tier="spot")
    row.price_per_gpu_hour = Decimal("1.0000")
    row.save()
    price_catalog_seed()
    row.refresh_from_db()
    assert row.price_per_gpu_hour == Decimal("1.0000")


@pytest.mark.parametrize("model", ["A100-SXM4-80GB", "H100-SXM5-80GB", "A100-PCIE-40GB"])
@pytest.mark.parametrize("tier", ["reserved", "on-demand", "spot"])
def test_catalog_prices_today_match_the_demo_fleets_node_prices(model, tier):
    book = PriceBook((r.gpu_model, r.tier, r.effective_from, r.price_per_gpu_hour) for r in default_prices())
    assert book.price_at(gpu_model=model, tier=tier, at=at(1, month=11)) == price_per_gpu_hour(
        gpu_model=model, tier=tier
    )


def test_the_task_closes_what_is_due(prices, reserved_node):
    AllocationFactory(node=reserved_node, started_at=at(2, 9), ended_at=at(2, 11, 30))
    result = ledger_close_task()
    assert (result["entries"], result["gpu_hours"], result["failed"]) == (3, "2.500000", [])
    assert ledger_close_task()["entries"] == 0


def test_a_node_without_catalog_price_falls_back_and_is_flagged(prices, h100):
    node = NodeFactory(gpu_model=h100, tier="on-demand", price_per_gpu_hour=Decimal("7.7700"))
    type(node).objects.filter(pk=node.pk).update(created_at=at(1))
    GpuPrice.objects.filter(gpu_model=h100, tier="on-demand").delete()
    AllocationFactory(
        node=node, tier="on-demand", price_per_gpu_hour=Decimal("7.7700"), started_at=at(2), ended_at=at(2, 1)
    )
    ledger_close_task()
    report = chargeback_report(scope=Scope(all_teams=True), month=date(2026, 10, 1), now=at(1, month=11))
    assert report.usage_total == Decimal("7.770000")
    assert any("node's own price" in w for w in report.warnings)
    assert report.reconciled


def test_the_prices_command_seeds_once(capsys):
    from django.core.management import call_command

    call_command("prices", "seed")
    call_command("prices", "seed")
    assert capsys.readouterr().out.splitlines() == [
        f"price catalog: {len(default_prices())} default price(s) added",
        "price catalog: 0 default price(s) added",
    ]
