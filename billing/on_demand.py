"""On-demand overhead: the node-hours an autoscaled node is paid for between its node request and its first work,
attributed to the job that asked for it (docs/billing.md, Autoscaled nodes).

An autoscaled node is paid from its request to its release (:func:`billing.capacity.node_lives`). The hours it then
serves work are ledger entries of the jobs it runs, like any node's; the hours while it is being provisioned and
waits for its first bind are nobody's usage, so without this rule they would fall into the idle-capacity line of
the whole cluster. They were bought for one job, though: this module charges them to that job's team and project,
as a figure of their own beside the ledger (the ledger itself holds only allocations). The hours a node stands
empty after its work, until its release, stay idle capacity: the release rule (``Policy.release_idle_s``) bounds
them, for every team alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db.models import Min

from billing.intervals import money
from billing.periods import Period, hours_between
from billing.prices import PriceBook
from scheduler.core.model.vocabulary import CapacityTier, NodeState
from scheduler.models import Node


@dataclass(frozen=True, slots=True)
class OnDemandOverhead:
    """One autoscaled node's hours from its request to its first work within a period, and their cost."""

    node: str
    job: int
    team: int
    project: int | None
    gpu_model: str
    requested_at: datetime
    first_work_at: datetime | None  # None: no work yet (or never, released empty)
    gpu_hours: Decimal
    cost: Decimal


def on_demand_overheads(*, period: Period, prices: PriceBook) -> list[OnDemandOverhead]:
    """Every autoscaled node's overhead within ``period`` (module doc): from its request to the first allocation on
    it, or to its release, its disappearance or the period's end when it has none, at the catalog's on-demand price
    of the request's day (else the node's own price)."""
    rows = (
        Node.objects.exclude(pool="")
        .filter(node_request__isnull=False)
        .annotate(first_work_at=Min("allocations__started_at"))
        .values_list(
            "name",
            "gpu_model__name",
            "gpu_count",
            "price_per_gpu_hour",
            "state",
            "updated_at",
            "released_at",
            "first_work_at",
            "node_request__requested_at",
            "node_request__job_id",
            "node_request__job__team_id",
            "node_request__job__project_id",
        )
        .order_by("name")
    )
    result = []
    for (
        name,
        model,
        gpu_count,
        node_price,
        state,
        updated_at,
        released_at,
        first_work_at,
        requested_at,
        job,
        team,
        project,
    ) in rows:
        gone_at = released_at or (updated_at if state == NodeState.GONE else None)
        end = min(t for t in (first_work_at, gone_at, period.as_of) if t is not None)
        start = max(requested_at, period.start)
        gpu_hours = (hours_between(start, end) * gpu_count).quantize(Decimal("0.000001"))
        if gpu_hours <= 0:
            continue
        price = prices.price_at(gpu_model=model, tier=CapacityTier.ON_DEMAND, at=requested_at)
        result.append(
            OnDemandOverhead(
                node=name,
                job=job,
                team=team,
                project=project,
                gpu_model=model,
                requested_at=requested_at,
                first_work_at=first_work_at,
                gpu_hours=gpu_hours,
                cost=money(gpu_hours, node_price if price is None else price),
            )
        )
    return result


def on_demand_overhead_by_team(*, period: Period, prices: PriceBook) -> dict[int, tuple[Decimal, Decimal]]:
    """Team id → (GPU-hours, cost) of the overhead of the nodes its jobs asked for within ``period``."""
    totals: dict[int, tuple[Decimal, Decimal]] = {}
    for overhead in on_demand_overheads(period=period, prices=prices):
        hours, cost = totals.get(overhead.team, (Decimal(0), Decimal(0)))
        totals[overhead.team] = (hours + overhead.gpu_hours, cost + overhead.cost)
    return totals
