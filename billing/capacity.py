"""What the cluster's capacity cost in a period: registered GPUs at their prices, and reserved commitments.

A node's GPUs are paid from its registration (``Node.created_at``) until it is marked gone (the
``updated_at`` of a node in state ``gone``); a node that comes back under the same name was paid meanwhile,
as a cloud bills a replacement. An autoscaled node is paid from its node request to its release
(:func:`node_lives`). Hours are split at the price catalog's effective days, so each piece is
priced at the rate in force; without a catalog row, the node's own price applies (as in the ledger).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal

from billing.intervals import money
from billing.models import ReservedCommitment
from billing.periods import Period, hours_between
from billing.prices import PriceBook
from billing.report import ZERO, CapacityLine, CommitmentLine
from scheduler.core.model.vocabulary import CapacityTier, NodeState
from scheduler.models import Node


@dataclass(frozen=True)
class NodeLife:
    gpu_model: str
    tier: str
    gpu_count: int
    fallback_price: Decimal
    registered_at: datetime
    gone_at: datetime | None


def node_lives() -> list[NodeLife]:
    """Every node's paid life. An autoscaled node (``Node.pool``) is paid from its node request (``requested_at``: the
    cloud bills the instance from its launch, which the request starts) to its release (``released_at``), when the
    loop linked it to a request; a node without either keeps the registration and the ``gone`` mark."""
    rows = Node.objects.values_list(
        "gpu_model__name",
        "tier",
        "gpu_count",
        "price_per_gpu_hour",
        "created_at",
        "state",
        "updated_at",
        "node_request__requested_at",
        "released_at",
    )
    lives = []
    for model, tier, count, price, created, state, updated, requested, released in rows:
        gone = released or (updated if state == NodeState.GONE else None)
        lives.append(NodeLife(model, tier, count, price, requested or created, gone))
    return lives


def _midnight(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def capacity_lines(
    *, period: Period, lives: Iterable[NodeLife], prices: PriceBook
) -> dict[tuple[str, str], CapacityLine]:
    """GPU-hours registered and their catalog cost, per (GPU model, tier), over ``[period.start, period.as_of)``."""
    lines: dict[tuple[str, str], CapacityLine] = {}
    for life in lives:
        start = max(period.start, life.registered_at)
        end = min(period.as_of, life.gone_at or period.as_of)
        if end <= start:
            continue
        key = (life.gpu_model, life.tier)
        line = lines.setdefault(key, CapacityLine(life.gpu_model, life.tier, ZERO, ZERO))
        cuts = [
            _midnight(day)
            for day in prices.changes_between(gpu_model=life.gpu_model, tier=life.tier, start=start, end=end)
        ]
        for piece_start, piece_end in zip([start, *cuts], [*cuts, end], strict=True):
            gpu_hours = (hours_between(piece_start, piece_end) * life.gpu_count).quantize(Decimal("0.000001"))
            price = prices.price_at(gpu_model=life.gpu_model, tier=life.tier, at=piece_start)
            line.capacity_gpu_hours += gpu_hours
            line.paid_cost += money(gpu_hours, life.fallback_price if price is None else price)
    return lines


def commitment_lines(*, period: Period, reserved: dict[str, CapacityLine]) -> list[CommitmentLine]:
    """Commitments per GPU model over the period: committed GPU-hours and cost (monthly price × share of month).

    ``reserved`` maps GPU model → its reserved capacity line; the line's paid cost is rewritten to what the
    reserved GPUs really cost: the commitments covering them plus the uncovered GPUs at the catalog price.
    """
    by_model: dict[str, CommitmentLine] = {}
    for commitment in ReservedCommitment.objects.select_related("gpu_model"):
        start = max(period.start, _midnight(commitment.start))
        end = min(period.as_of, _midnight(commitment.end))
        if end <= start:
            continue
        hours = hours_between(start, end)
        model = commitment.gpu_model.name
        line = by_model.setdefault(model, CommitmentLine(model, ZERO, ZERO, ZERO))
        line.committed_gpu_hours += (hours * commitment.gpu_count).quantize(Decimal("0.000001"))
        line.cost += (commitment.monthly_price * hours / period.month_hours).quantize(Decimal("0.000001"))
    for model, line in by_model.items():
        capacity = reserved.get(model)
        if capacity is None:
            capacity = reserved[model] = CapacityLine(model, CapacityTier.RESERVED, ZERO, ZERO)
        line.reserved_gpu_hours = capacity.capacity_gpu_hours
        covered_cost = line.cost - line.unused_cost
        uncovered_hours = max(ZERO, capacity.capacity_gpu_hours - line.committed_gpu_hours)
        uncovered_cost = (
            (capacity.paid_cost * uncovered_hours / capacity.capacity_gpu_hours).quantize(Decimal("0.000001"))
            if capacity.capacity_gpu_hours
            else ZERO
        )
        capacity.paid_cost = covered_cost + uncovered_cost
    return [by_model[model] for model in sorted(by_model)]
