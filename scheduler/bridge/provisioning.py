"""Database rows → the snapshot's :class:`~scheduler.core.model.provisioning.Provisioning`: what the engine is told of
the autoscaled pools (:mod:`scheduler.autoscaled`), the node requests in flight, the recent failures, the empty
autoscaled nodes and the on-demand budget left today.

Read only when some pool is enabled (:func:`pools_read`, one query, tells): a cluster without autoscaled pools pays
that one query a cycle and plans exactly as before (an empty ``Provisioning``).

- An offering's arrival is the median request → provisioned time (real seconds) of the pool's latest
  :data:`ARRIVAL_HISTORY_REQUESTS` provisioned requests; without history, the pool's own default, else
  :func:`scheduler.core.default_arrival_s` for its GPU model (the documented provisioning model) — both in the
  cluster's job time, so divided by the observation's clock speed as the MIG delay is (scheduler.bridge.policy): on
  the simulated fleet they are virtual seconds.
- An offering's price: the pool's, else the price catalog's on-demand price for its GPU model today, else the
  default catalog's (billing.prices), else 0.
- Budget left today (UTC) per team with a budget of its own and for the cluster when it has one: the budget less the
  GPU-hours the autoscaled nodes have stood today (from their request, docs/billing.md; attributed to the requesting
  job's team) and less the charge of the requests in flight (their nodes are not billed yet).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.db.models import F, Q, Window
from django.db.models.functions import RowNumber

from billing.prices import default_prices
from billing.services.ledger import price_book_load
from scheduler.autoscaled import FAILURES, IN_FLIGHT, AutoscaledPool, NodeRequest, OnDemandBudget
from scheduler.core.model.provisioning import NodeRequest as CoreNodeRequest
from scheduler.core.model.provisioning import Offering, Provisioning
from scheduler.core.model.vocabulary import CapacityTier, Fabric, Interconnect, NodeState
from scheduler.models import Node
from teams.models import Team

ARRIVAL_HISTORY_REQUESTS = 20  # a pool's arrival estimate is the median over this many of its latest requests
CLUSTER = ""  # the cluster's key in Provisioning.budget_gpu_hours


@dataclass(frozen=True, slots=True)
class ProvisioningRead:
    """The snapshot's part, and why jobs whose last request failed still wait (job id → the reason to show)."""

    provisioning: Provisioning = field(default_factory=Provisioning)
    failure_notes: Mapping[str, str] = field(default_factory=dict)


def pools_read() -> list[AutoscaledPool]:
    """Every autoscaled pool with its GPU model: one query, the only one a cluster without pools pays."""
    return list(AutoscaledPool.objects.select_related("gpu_model").order_by("name"))


def provisioning_read(
    *, pools: Sequence[AutoscaledPool], now: float, speed: float = 1.0, retry_s: float = 900.0
) -> ProvisioningRead:
    """The engine's view of on-demand capacity at ``now`` (module doc); empty when no pool is enabled. ``retry_s``:
    how long a failed request keeps its job from asking again (``Policy.provision_retry_s``)."""
    enabled = [pool for pool in pools if pool.enabled]
    if not enabled:
        return ProvisioningRead()
    at = datetime.fromtimestamp(now, tz=UTC)
    by_id = {pool.pk: pool for pool in pools}
    arrivals = _arrivals_s([pool.pk for pool in enabled])
    prices = pool_prices(enabled, at)
    offerings = tuple(
        Offering(
            pool=pool.name,
            gpu_model=pool.gpu_model.name,
            gpu_count=pool.gpus_per_node,
            price_per_gpu_hour=prices[pool.pk],
            arrival_s=arrivals.get(pool.pk, pool.arrival_default_s / (speed if speed > 0 else 1.0)),
            max_nodes=pool.max_nodes,
            interconnect=Interconnect(pool.interconnect),
            fabric=Fabric(pool.fabric),
            placement_group=pool.placement_group,
        )
        for pool in enabled
    )
    since = at - timedelta(seconds=retry_s)
    rows = list(
        NodeRequest.objects.filter(Q(state__in=IN_FLIGHT) | Q(state__in=FAILURES, state_since__gte=since))
        .select_related("job__team")
        .order_by("requested_at", "id")
    )
    requests, failed, notes = [], [], {}
    for row in rows:
        pool = by_id.get(row.pool_id)
        if pool is None:
            continue
        if row.state in IN_FLIGHT:
            requests.append(
                CoreNodeRequest(
                    id=str(row.pk),
                    job=str(row.job_id),
                    pool=pool.name,
                    nodes=row.nodes,
                    requested_at=row.requested_at.timestamp(),
                    arrives_at=row.arrives_at.timestamp(),
                    message=row.message,
                )
            )
            continue
        failed.append((str(row.job_id), row.state_since.timestamp()))
        notes[str(row.job_id)] = failure_note(row, now=at, retry_s=retry_s)
    for request in requests:  # a job asking again is told why it waits by the engine, not by its old failure
        notes.pop(request.job, None)
    nodes = _autoscaled_nodes()
    idle = tuple(
        (node.name, node.idle_since.timestamp())
        for node in nodes
        if node.idle_since is not None and node.released_at is None and node.state != NodeState.GONE
    )
    budgets = _budget_left(nodes, [row for row in rows if row.state in IN_FLIGHT], at)
    return ProvisioningRead(
        provisioning=Provisioning(
            offerings=offerings,
            requests=tuple(requests),
            failed=tuple(failed),
            idle_since=idle,
            budget_gpu_hours=budgets,
        ),
        failure_notes=notes,
    )


def census_offerings() -> tuple[Offering, ...]:
    """What each enabled pool can add, for a census (:func:`scheduler.bridge.snapshot.inventory_census`): the node's
    shape and the pool's ceiling only — a census counts nodes, so price and arrival are not read (0 and the pool's
    default). One query."""
    pools = AutoscaledPool.objects.filter(enabled=True).select_related("gpu_model").order_by("name")
    return tuple(
        Offering(
            pool=pool.name,
            gpu_model=pool.gpu_model.name,
            gpu_count=pool.gpus_per_node,
            price_per_gpu_hour=0.0,
            arrival_s=pool.arrival_default_s,
            max_nodes=pool.max_nodes,
            interconnect=Interconnect(pool.interconnect),
            fabric=Fabric(pool.fabric),
            placement_group=pool.placement_group,
        )
        for pool in pools
    )


def failure_note(row: NodeRequest, *, now: datetime, retry_s: float) -> str:
    """Why a job whose request failed still waits: the autoscaler's words and when it asks again."""
    again = row.state_since + timedelta(seconds=retry_s)
    minutes = max(0, round((again - now).total_seconds() / 60))
    what = {"timed-out": "timed out", "revoked": "was revoked"}.get(row.state, "failed")
    message = f": {row.message}" if row.message else ""
    return f"on-demand request {what}{message}; asking again in {minutes} min"


def _arrivals_s(pool_ids: list[int]) -> dict[int, float]:
    """Pool id → the median request → provisioned seconds of its latest provisioned requests (module doc)."""
    latest_first = Window(
        RowNumber(), partition_by=[F("pool_id")], order_by=[F("provisioned_at").desc(), F("id").desc()]
    )
    rows = (
        NodeRequest.objects.filter(pool_id__in=pool_ids, provisioned_at__isnull=False)
        .annotate(latest=latest_first)
        .filter(latest__lte=ARRIVAL_HISTORY_REQUESTS)
        .order_by()
        .values_list("pool_id", "requested_at", "provisioned_at")
    )
    seconds: dict[int, list[float]] = defaultdict(list)
    for pool_id, requested_at, provisioned_at in rows:
        assert provisioned_at is not None  # the query keeps only provisioned rows
        seconds[pool_id].append(max(0.0, (provisioned_at - requested_at).total_seconds()))
    return {pool_id: float(statistics.median(values)) for pool_id, values in seconds.items()}


def pool_prices(pools: Iterable[AutoscaledPool], at: datetime) -> dict[int, float]:
    """Pool id → its price per GPU-hour at ``at`` (module doc; the pools' GPU models loaded); the catalog is read only
    when a pool has no price of its own."""
    result: dict[int, float] = {}
    unpriced = []
    for pool in pools:
        if pool.price_per_gpu_hour is not None:
            result[pool.pk] = float(pool.price_per_gpu_hour)
        else:
            unpriced.append(pool)
    if unpriced:
        book = price_book_load()
        defaults: dict[str, Decimal] = {}
        for row in sorted(default_prices(), key=lambda r: r.effective_from):
            if row.tier == CapacityTier.ON_DEMAND and row.effective_from <= at.date():
                defaults[row.gpu_model] = row.price_per_gpu_hour
        for pool in unpriced:
            price = book.price_at(gpu_model=pool.gpu_model.name, tier=CapacityTier.ON_DEMAND, at=at)
            result[pool.pk] = float(price if price is not None else defaults.get(pool.gpu_model.name, Decimal(0)))
    return result


@dataclass(frozen=True, slots=True)
class _AutoscaledNode:
    name: str
    gpu_count: int
    state: str
    idle_since: datetime | None
    released_at: datetime | None
    created_at: datetime
    updated_at: datetime
    requested_at: datetime | None  # its request's, when the loop linked it to one
    request_in_flight: bool
    team: str | None  # the requesting job's team (slug)

    def billed(self, start: datetime, end: datetime) -> float:
        """GPU-hours it stood within ``[start, end)``: from its request (or registration) to its release, or to its
        disappearance (docs/billing.md)."""
        since = self.requested_at or self.created_at
        until = self.released_at or (self.updated_at if self.state == NodeState.GONE else end)
        seconds = (min(end, until) - max(start, since)).total_seconds()
        return max(0.0, seconds) / 3600 * self.gpu_count


def _autoscaled_nodes() -> list[_AutoscaledNode]:
    rows = Node.objects.exclude(pool="").values_list(
        "name",
        "gpu_count",
        "state",
        "idle_since",
        "released_at",
        "created_at",
        "updated_at",
        "node_request__requested_at",
        "node_request__state",
        "node_request__job__team__slug",
    )
    nodes = []
    for name, count, state, idle, released, created, updated, requested, request_state, team in rows.order_by("name"):
        in_flight = request_state in IN_FLIGHT
        nodes.append(_AutoscaledNode(name, count, state, idle, released, created, updated, requested, in_flight, team))
    return nodes


def _budget_left(
    nodes: Sequence[_AutoscaledNode], in_flight: Sequence[NodeRequest], at: datetime
) -> tuple[tuple[str, float], ...]:
    """(team slug, GPU-hours left today) for each team with a budget, ("", …) for the cluster's (module doc)."""
    teams = Team.objects.filter(on_demand_gpu_hours_per_day__isnull=False)
    budgets = {slug: float(limit or 0) for slug, limit in teams.values_list("slug", "on_demand_gpu_hours_per_day")}
    cluster = OnDemandBudget.objects.filter(gpu_hours_per_day__isnull=False).values_list("gpu_hours_per_day", flat=True)
    for limit in cluster[:1]:
        budgets[CLUSTER] = float(limit or 0)
    if not budgets:
        return ()
    midnight = at.replace(hour=0, minute=0, second=0, microsecond=0)
    used: dict[str, float] = defaultdict(float)
    for node in nodes:
        if node.request_in_flight:
            continue  # its request's charge counts instead, until the request is fulfilled
        hours = node.billed(midnight, at)
        used[CLUSTER] += hours
        if node.team is not None:
            used[node.team] += hours
    for row in in_flight:  # read with their jobs' teams
        used[CLUSTER] += float(row.gpu_hours)
        used[row.job.team.slug] += float(row.gpu_hours)
    return tuple(sorted((key, max(0.0, limit - used[key])) for key, limit in budgets.items()))
