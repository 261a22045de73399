"""Node requests and autoscaled nodes in the loop (the rows in :mod:`scheduler.autoscaled`): the plan's
``Provision`` / ``Withdraw`` / ``Release`` recorded, and the requests reconciled with what the autoscaler reports.

Recorded before applied, as everything the loop decides (RELIABILITY.md, A node request that fails leaves the
job waiting):

- a ``Provision`` is a :class:`~scheduler.autoscaled.NodeRequest` row (pending) written in the record's transaction,
  then asked of the gateway (:class:`~scheduler.loop.apply.ProvisionOp`). A refusal marks the row failed; a worker
  that dies between the two leaves a pending row the gateway does not report, which the next cycle asks again
  (``nodes_request`` is idempotent on the request's id);
- a ``Withdraw`` marks the row withdrawn, then withdraws it at the gateway; a row given up that the gateway still
  reports is withdrawn again, every cycle until it is gone;
- a ``Release`` stamps the node's ``released_at`` (its cost stops there, docs/billing.md), then releases it at the
  gateway; a released node the cluster still reports as open is released again.

Reconciled each cycle (:func:`requests_reconcile`), by what the gateway reports of each request in flight:

=============================  ====================================================================================
gateway reports                row becomes
=============================  ====================================================================================
nothing (pending row)          asked again (recorded, not applied)
pending, past the timeout      ``timed-out``, withdrawn (``SCHEDULER["node_request_timeout_s"]``)
provisioned                    ``provisioned`` (``provisioned_at``: the pool's arrival history); ``fulfilled`` once
                               every node it names is in the observation (then withdrawn, a clean-up: the nodes
                               stay), ``timed-out`` when they have not joined within the timeout
failed / revoked               ``failed`` / ``revoked`` with the autoscaler's message, withdrawn; the job's reason
                               says so and it asks again ``Policy.provision_retry_s`` later
nothing (provisioned row)      as provisioned, from the names it recorded
settled, still reported        withdrawn again (failed, revoked, withdrawn, timed out or fulfilled)
=============================  ====================================================================================

Every step of a request, and every release of a node one brought, is a ``node_request`` event on its job's timeline
(:mod:`scheduler.loop.provisioning_events`), written with the row.

The nodes a request brought are linked to it by the names the autoscaler gave, once the inventory has them
(:func:`_nodes_link`: billed from the request). And the autoscaled nodes' ``idle_since`` (:func:`idle_track`): when
a node of a pool last became empty, while it holds no live allocation (what ``Release`` waits
``Policy.release_idle_s`` on).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.db.models import F, Max, OuterRef, Q, Subquery
from django.db.models.functions import Coalesce

from jobs.models import Allocation, Job
from scheduler.autoscaled import IN_FLIGHT, SETTLED, AutoscaledPool, NodeRequest, NodeRequestStatus
from scheduler.bridge.provisioning import pool_prices
from scheduler.core import Plan
from scheduler.core.model.vocabulary import JobState
from scheduler.gateways.protocol import NodeRequestSpec, NodeRequestState, Observation
from scheduler.loop.apply import NodeReleaseOp, Op, ProvisionOp, WithdrawOp
from scheduler.loop.provisioning_events import releases_event, request_event
from scheduler.models import Node

DEFAULT_TIMEOUT_S = 1800.0  # SCHEDULER["node_request_timeout_s"]'s default: a request not provisioned in 30 min


def request_spec(row: NodeRequest, *, namespace: str, price_per_gpu_hour: float) -> NodeRequestSpec:
    """The gateway's view of a recorded request (its pool loaded)."""
    pool = row.pool
    return NodeRequestSpec(
        id=str(row.pk),
        job=str(row.job_id),
        namespace=namespace,
        pool=pool.name,
        nodes=row.nodes,
        gpu_model=pool.gpu_model.name,
        gpus_per_node=row.gpus_per_node,
        placement_group=row.placement_group,
        autoscaler=pool.autoscaler,
        provisioning_class=pool.provisioning_class,
        node_selector={str(k): str(v) for k, v in (pool.node_selector or {}).items()},
        price_per_gpu_hour=price_per_gpu_hour,
        provisioning_parameters={str(k): str(v) for k, v in (pool.provisioning_parameters or {}).items()},
    )


# --- record -------------------------------------------------------------------------------------------------------


def provisioning_record(plan: Plan, *, at: datetime, ops: list[Op]) -> dict[str, list[dict[str, Any]]]:
    """Inside the record's transaction: write the plan's provisions, withdrawals and releases (module doc) and
    append their operations; nothing is read when the plan has none."""
    done: dict[str, list[dict[str, Any]]] = {"provisions": [], "withdrawals": [], "releases": []}
    if plan.provisions:
        done["provisions"] = _provisions(plan, at, ops)
    if plan.withdrawals:
        done["withdrawals"] = _withdrawals(plan, at, ops)
    if plan.releases:
        done["releases"] = _releases(plan, at, ops)
    return done


def _provisions(plan: Plan, at: datetime, ops: list[Op]) -> list[dict[str, Any]]:
    """A pending row per provision whose job still waits and whose pool exists and is enabled; none for a job that
    has a request in flight already (a plan applied twice asks once)."""
    jobs = {
        str(job.pk): job
        for job in Job.objects.filter(pk__in=[int(p.job) for p in plan.provisions], state=JobState.PENDING)
        .select_related("team")
        .select_for_update(of=("self",))
    }
    pools = {
        pool.name: pool
        for pool in AutoscaledPool.objects.filter(
            name__in={p.pool for p in plan.provisions}, enabled=True
        ).select_related("gpu_model")
    }
    asking = set(
        NodeRequest.objects.filter(job_id__in=[int(j) for j in jobs], state__in=IN_FLIGHT).values_list(
            "job_id", flat=True
        )
    )
    prices = pool_prices(pools.values(), at) if pools else {}
    done = []
    for provision in plan.provisions:
        job, pool = jobs.get(provision.job), pools.get(provision.pool)
        if job is None or pool is None or job.pk in asking:
            continue
        row = NodeRequest.objects.create(
            job=job,
            pool=pool,
            nodes=provision.nodes,
            gpus_per_node=provision.gpus_per_node,
            placement_group=provision.placement_group,
            gpu_hours=Decimal(str(round(provision.gpu_hours, 3))),
            requested_at=at,
            state_since=at,
            arrives_at=datetime.fromtimestamp(provision.arrives_at, tz=UTC),
        )
        asking.add(job.pk)
        request_event(row, at)
        ops.append(
            ProvisionOp(spec=request_spec(row, namespace=job.team.namespace, price_per_gpu_hour=prices[pool.pk]))
        )
        done.append({"job": provision.job, "pool": pool.name, "nodes": provision.nodes, "request": str(row.pk)})
    return done


def _withdrawals(plan: Plan, at: datetime, ops: list[Op]) -> list[dict[str, Any]]:
    ids = [int(w.request) for w in plan.withdrawals if w.request.isdigit()]
    rows = {
        str(row.pk): row
        for row in NodeRequest.objects.select_for_update(of=("self",))
        .filter(pk__in=ids, state__in=IN_FLIGHT)
        .select_related("job__team", "pool")
    }
    done = []
    for withdraw in plan.withdrawals:
        row = rows.get(withdraw.request)
        if row is None:
            continue
        _settle(row, NodeRequestStatus.WITHDRAWN, at, withdraw.reason)
        ops.append(WithdrawOp(request=str(row.pk), namespace=row.job.team.namespace))
        done.append({"request": withdraw.request, "job": withdraw.job, "reason": withdraw.reason})
    return done


def _releases(plan: Plan, at: datetime, ops: list[Op]) -> list[dict[str, Any]]:
    """Stamp each released node (an autoscaled node not released yet) and release it."""
    names = [release.node for release in plan.releases]
    nodes = set(
        Node.objects.filter(name__in=names, released_at__isnull=True).exclude(pool="").values_list("name", flat=True)
    )
    Node.objects.filter(name__in=nodes).update(released_at=at)
    releases_event(nodes, at)
    done = []
    for release in plan.releases:
        if release.node not in nodes:
            continue
        ops.append(NodeReleaseOp(node=release.node))
        done.append({"node": release.node, "pool": release.pool})
    return done


def _settle(row: NodeRequest, state: NodeRequestStatus, at: datetime, message: str) -> None:
    """Record ``row``'s new state, and the step on its job's timeline (its pool loaded)."""
    row.state, row.state_since, row.message = state, at, message[:500]
    row.save(update_fields=["state", "state_since", "message"])
    request_event(row, at)


def provisions_refused(refused: Sequence[tuple[ProvisionOp, str]], *, at: datetime) -> list[str]:
    """Requests the autoscaler refused outright (``GatewayConflict``): failed, with its words; their jobs ask again
    ``Policy.provision_retry_s`` later."""
    if not refused:
        return []
    failed = []
    with transaction.atomic():
        rows = {
            str(row.pk): row
            for row in NodeRequest.objects.select_for_update(of=("self",))
            .filter(pk__in=[int(op.spec.id) for op, _ in refused], state__in=IN_FLIGHT)
            .select_related("pool")
        }
        for op, message in refused:
            row = rows.get(op.spec.id)
            if row is not None:
                _settle(row, NodeRequestStatus.FAILED, at, f"refused: {message}")
                failed.append(op.spec.id)
    return failed


# --- reconcile ----------------------------------------------------------------------------------------------------


@dataclass
class RequestRepairs:
    ops: list[Op] = field(default_factory=list)
    asked_again: list[str] = field(default_factory=list)
    provisioned: list[str] = field(default_factory=list)
    fulfilled: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    timed_out: list[str] = field(default_factory=list)
    withdrawn_again: list[str] = field(default_factory=list)
    released_again: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, list[str]]:
        return {
            "requests_asked_again": self.asked_again,
            "requests_provisioned": self.provisioned,
            "requests_fulfilled": self.fulfilled,
            "requests_failed": self.failed,
            "requests_timed_out": self.timed_out,
            "requests_withdrawn_again": self.withdrawn_again,
            "nodes_released_again": self.released_again,
        }


def requests_reconcile(observation: Observation, *, at: datetime, timeout_s: float) -> RequestRepairs:
    """Inside the reconcile's transaction: bring the node request rows and the autoscaled nodes' idle times in line
    with ``observation`` (module doc); return the operations that repair the cluster's side."""
    repairs = RequestRepairs()
    observed = {request.id: request for request in observation.node_requests}
    present = {node.name for node in observation.nodes}
    reported_ids = [int(i) for i in observed if i.isdigit()]
    rows = list(
        NodeRequest.objects.select_for_update(of=("self",))
        .filter(Q(state__in=IN_FLIGHT) | Q(pk__in=reported_ids, state__in=SETTLED))
        .select_related("job__team", "pool__gpu_model")
        .order_by("pk")
    )
    prices = pool_prices({row.pool_id: row.pool for row in rows}.values(), at) if rows else {}
    joined = _Joined(observation, rows, at) if rows else None
    for row in rows:
        seen = observed.get(str(row.pk))
        if row.state in SETTLED:  # the gateway still holds a request settled: withdraw it again
            repairs.ops.append(WithdrawOp(request=str(row.pk), namespace=row.job.team.namespace))
            repairs.withdrawn_again.append(str(row.pk))
            continue
        assert joined is not None  # rows were read
        _reconcile_one(row, seen, present, at, timeout_s, prices, repairs, joined)
    _nodes_link(at)
    _released_again(observation, repairs)
    idle_track()
    return repairs


def _reconcile_one(
    row: NodeRequest,
    seen: Any,
    present: set[str],
    at: datetime,
    timeout_s: float,
    prices: Mapping[int, float],
    repairs: RequestRepairs,
    joined: _Joined,
) -> None:
    request = str(row.pk)
    namespace = row.job.team.namespace
    state = seen.state if seen is not None else None
    if state in (NodeRequestState.FAILED, NodeRequestState.REVOKED):
        status = NodeRequestStatus.REVOKED if state == NodeRequestState.REVOKED else NodeRequestStatus.FAILED
        _settle(row, status, at, seen.message or f"the autoscaler reports the request {state}")
        repairs.ops.append(WithdrawOp(request=request, namespace=namespace))
        repairs.failed.append(request)
        return
    if state == NodeRequestState.PROVISIONED or (seen is None and row.state == NodeRequestStatus.PROVISIONED):
        names = list(seen.nodes) if seen is not None and seen.nodes else list(row.node_names)
        if seen is None or not seen.nodes:  # the autoscaler cannot say which nodes: the pool's that joined since
            names += joined.claim(row.pool.name, row.nodes - len(names))
        if row.state != NodeRequestStatus.PROVISIONED:
            since = datetime.fromtimestamp(seen.since, tz=UTC) if seen is not None and seen.since else at
            row.provisioned_at, row.node_names = since, names
            _settle(row, NodeRequestStatus.PROVISIONED, at, seen.message if seen is not None else "")
            row.save(update_fields=["provisioned_at", "node_names"])
            repairs.provisioned.append(request)
        elif names != row.node_names:
            row.node_names = names
            row.save(update_fields=["node_names"])
        # Every node it asked for is there: fulfilled, ordinary on-demand nodes now. The request itself is
        # withdrawn, a clean-up: the nodes it brought stay.
        if len(names) >= row.nodes and all(name in present for name in names):
            _settle(row, NodeRequestStatus.FULFILLED, at, "")
            repairs.fulfilled.append(request)
            if seen is not None:
                repairs.ops.append(WithdrawOp(request=request, namespace=namespace))
        elif (at - (row.provisioned_at or at)).total_seconds() > timeout_s:
            _settle(row, NodeRequestStatus.TIMED_OUT, at, f"its nodes did not join within {timeout_s / 60:g} min")
            repairs.ops.append(WithdrawOp(request=request, namespace=namespace))
            repairs.timed_out.append(request)
        return
    # Pending, or not reported at all; the autoscaler's words on it kept (a stockout: its job's reason says so).
    if seen is not None and seen.message and seen.message[:500] != row.message:
        row.message = seen.message[:500]
        row.save(update_fields=["message"])
    if (at - row.requested_at).total_seconds() > timeout_s:
        said = f" ({row.message})" if row.message else ""
        _settle(row, NodeRequestStatus.TIMED_OUT, at, f"not provisioned within {timeout_s / 60:g} min{said}")
        repairs.ops.append(WithdrawOp(request=request, namespace=namespace))
        repairs.timed_out.append(request)
        return
    if seen is None:  # recorded, never asked (or the ask was lost): ask again, idempotent
        repairs.ops.append(
            ProvisionOp(spec=request_spec(row, namespace=namespace, price_per_gpu_hour=prices.get(row.pool_id, 0.0)))
        )
        repairs.asked_again.append(request)


class _Joined:
    """Nodes of each pool that no request accounts for yet, for the requests whose autoscaler cannot name the nodes
    it brought (the Cluster Autoscaler: a ProvisioningRequest is ``Provisioned`` once the scale-up is asked, and its
    nodes register minutes later with only their node group's label, scheduler/gateways/kube/provisioning.py).
    Such a request stays provisioned — capacity coming, in flight for the engine — until as many unaccounted nodes
    of its pool as it asked for are observed; those are its nodes (:meth:`claim`, oldest request first), linked to
    it and billed from it. A node is accounted for when the inventory links it to a request or has released it, or
    a request provisioned in the last day names it."""

    def __init__(self, observation: Observation, rows: Sequence[NodeRequest], at: datetime) -> None:
        pooled = {node.name: node.pool for node in observation.nodes if node.pool}
        taken = set(
            Node.objects.filter(name__in=list(pooled))
            .filter(Q(node_request__isnull=False) | Q(released_at__isnull=False))
            .values_list("name", flat=True)
        )
        recent = NodeRequest.objects.filter(
            state__in=(NodeRequestStatus.PROVISIONED, NodeRequestStatus.FULFILLED),
            provisioned_at__gte=at - timedelta(days=1),
        ).values_list("node_names", flat=True)
        for names in [*recent, *(row.node_names for row in rows)]:
            taken.update(str(name) for name in names or [])
        self.free: dict[str, list[str]] = {}
        for name, pool in sorted(pooled.items()):
            if name not in taken:
                self.free.setdefault(pool, []).append(name)

    def claim(self, pool: str, count: int) -> list[str]:
        """Up to ``count`` of ``pool``'s unaccounted nodes, taken from the others' reach."""
        free = self.free.get(pool, [])
        mine, self.free[pool] = free[: max(0, count)], free[max(0, count) :]
        return mine


def _nodes_link(at: datetime) -> None:
    """Autoscaled nodes not linked to the request that brought them yet point at it, by the names the autoscaler gave
    (``NodeRequest.node_names``): billed from the request (docs/billing.md). A node joins the inventory when the
    cluster sync registers it, which may be after its request was fulfilled: so the requests of the last day are
    matched, and only when some autoscaled node is unlinked (one read otherwise).

    A node the cluster reported no price for (a Kubernetes node carries none: the sync registers it at 0) takes its
    pool's price per GPU-hour when linked: the price the engine asked it at, and what the ledger bills it at when the
    price catalog has none for its GPU model (billing.capacity)."""
    unlinked = set(
        Node.objects.exclude(pool="")
        .filter(node_request__isnull=True, released_at__isnull=True)
        .values_list("name", flat=True)
    )
    if not unlinked:
        return
    recent = NodeRequest.objects.filter(
        state__in=(NodeRequestStatus.PROVISIONED, NodeRequestStatus.FULFILLED),
        provisioned_at__gte=at - timedelta(days=1),
    ).select_related("pool__gpu_model")
    prices: dict[int, float] = {}
    for row in recent:
        mine = sorted(unlinked.intersection(str(name) for name in row.node_names or []))
        if not mine:
            continue
        Node.objects.filter(name__in=mine, node_request__isnull=True).update(node_request_id=row.pk)
        if row.pool_id not in prices:
            prices.update(pool_prices([row.pool], at))
        unpriced = Node.objects.filter(name__in=mine, price_per_gpu_hour=0)
        unpriced.update(price_per_gpu_hour=Decimal(str(prices[row.pool_id])))


def _released_again(observation: Observation, repairs: RequestRepairs) -> None:
    """A released node the cluster still reports open: its release was recorded, not applied (or undone)."""
    open_nodes = [node.name for node in observation.nodes if node.schedulable and node.pool]
    if not open_nodes:
        return
    for name in Node.objects.filter(name__in=open_nodes, released_at__isnull=False).values_list("name", flat=True):
        repairs.ops.append(NodeReleaseOp(node=name))
        repairs.released_again.append(name)


def idle_track() -> None:
    """Autoscaled nodes not released: ``idle_since`` is when one last became empty — the end of its last allocation,
    or its arrival when it never held one — while it holds no live allocation, and empty while it holds one. Two
    statements for every node; from the allocations' own times, so a cycle's timing never moves it."""
    busy = Allocation.objects.filter(ended_at__isnull=True).values("node_id")
    last_end = (
        Allocation.objects.filter(node_id=OuterRef("pk")).order_by().values("node_id").annotate(at=Max("ended_at"))
    )
    autoscaled = Node.objects.exclude(pool="").filter(released_at__isnull=True)
    autoscaled.exclude(pk__in=busy).update(idle_since=Coalesce(Subquery(last_end.values("at")), F("created_at")))
    autoscaled.filter(idle_since__isnull=False, pk__in=busy).update(idle_since=None)
