"""``{{ allocation|billed_price }}``: the price per GPU-hour the ledger bills a placement (billing.selectors
``price_shown``), for the job page's placement tables — one price for a node wherever it is shown."""

from __future__ import annotations

from django import template
from django.utils import timezone

from billing.selectors import ShownPrice, price_shown
from jobs.models import Allocation

register = template.Library()


@register.filter
def billed_price(allocation: Allocation) -> ShownPrice:
    """What the allocation's hours are billed at: the catalog price in force now for a live placement, at its
    start for one that ended; the node's price (``fallback``) where the catalog has none."""
    at = timezone.now() if allocation.ended_at is None else allocation.started_at
    return price_shown(
        gpu_model=allocation.node.gpu_model.name,
        tier=allocation.tier,
        node_price=allocation.price_per_gpu_hour,
        at=at,
    )
