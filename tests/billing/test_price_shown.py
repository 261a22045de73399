"""One price for a node: the cluster map and a job's page show what the ledger bills (the catalog's price in
force), and the node's own price only where the catalog has none, labelled as such."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from billing.selectors import price_shown
from billing.services import price_book_load
from scheduler.cluster_map import cluster_map
from tests.factories import AllocationFactory, GpuModelFactory, JobFactory, NodeFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def repriced(prices, reserved_node):
    """The reserved A100 node was registered at $9.99; finance's catalog bills reserved A100s at $2.00."""
    return reserved_node


def test_the_catalog_price_is_shown_and_the_node_price_only_as_a_labelled_fallback(repriced):
    now = timezone.now()
    shown = price_shown(gpu_model="A100-SXM4-80GB", tier="reserved", node_price=Decimal("9.99"), at=now)
    assert (shown.price_per_gpu_hour, shown.fallback) == (Decimal("2.0000"), False)
    bare = GpuModelFactory(name="A100-PCIE-40GB", gpu_class="A100", memory_mib=40960, mig_capable=True)
    shown = price_shown(gpu_model=bare.name, tier="spot", node_price=Decimal("0.70"), at=now, prices=price_book_load())
    assert (shown.price_per_gpu_hour, shown.fallback) == (Decimal("0.70"), True)


def test_the_cluster_map_shows_the_price_the_ledger_bills(repriced, client, lead):
    (row,) = [n for n in cluster_map(visible_team_ids=None).nodes if n.name == "a100-res-01"]
    assert (row.price_per_gpu_hour, row.price_is_fallback) == (2.0, False)
    client.force_login(lead)
    page = client.get(reverse("cluster")).content.decode()
    assert "$2.00/GPU-h" in page and "$9.99" not in page


def test_a_node_without_a_catalog_price_shows_its_own_price_labelled(db, client, lead):
    model = GpuModelFactory(name="A100-PCIE-40GB", gpu_class="A100", memory_mib=40960, mig_capable=True)
    NodeFactory(name="pcie-01", gpu_model=model, tier="on-demand", price_per_gpu_hour=Decimal("2.7400"))
    (row,) = [n for n in cluster_map(visible_team_ids=None).nodes if n.name == "pcie-01"]
    assert (row.price_per_gpu_hour, row.price_is_fallback) == (2.74, True)
    client.force_login(lead)
    assert "$2.74/GPU-h (node price: no catalog price)" in client.get(reverse("cluster")).content.decode()


def test_the_job_page_shows_the_billed_price_and_an_outsider_gets_404(repriced, team, client, lead, outsider):
    hour_ago = timezone.now() - timedelta(hours=1)
    job = JobFactory(team=team, state="running", submitted_at=hour_ago, started_at=hour_ago)
    AllocationFactory(job=job, node=repriced, price_per_gpu_hour=Decimal("9.9900"), started_at=job.started_at)
    client.force_login(lead)
    page = client.get(reverse("jobs:detail", args=[job.pk])).content.decode()
    assert "$2.00/GPU-h" in page and "$9.99" not in page
    client.force_login(outsider)
    assert client.get(reverse("jobs:detail", args=[job.pk])).status_code == 404
