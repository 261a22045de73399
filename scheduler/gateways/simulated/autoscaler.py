"""The simulated fleet's autoscaler (:class:`~scheduler.gateways.protocol.ProvisioningGateway`): node requests held as
:class:`~scheduler.models.SimulatedNodeRequest` rows, served on the fleet's clock.

It behaves as the Cluster Autoscaler does with a ``best-effort-atomic-scale-up`` ProvisioningRequest
(kubernetes/autoscaler, cluster-autoscaler/apis/provisioningrequest/autoscaling.x-k8s.io/v1/types.go, and the
condition reasons of cluster-autoscaler/provisioningrequest/conditions/conditions.go):

- a request is held from the moment it is asked (``Accepted``; reported ``pending``); asking again with its id does
  nothing;
- after the pool's arrival time (``AutoscaledPool.arrival_s``, else the documented default; virtual seconds, as the
  fleet's other delays) all its nodes join at once, or none do: ``Provisioned`` with the nodes named, or ``Failed``
  with reason ``CapacityIsNotFound`` — a stockout, drawn once per request with
  ``FleetSettings.stockout_probability`` from the fleet's seed (so a seeded fleet is exact), or a pool at its
  ``max_nodes`` (the autoscaler never grows a node group past its maximum size);
- the nodes are on-demand inventory nodes with ``pool`` set, the pool's node labels, its interconnect and fabric, and
  one placement group and leaf per request when asked for one (a gang's);
- withdrawing forgets the request; nodes it brought stay until released;
- a released node goes at once (cordoned and removed: the autoscaler's scale-down of an empty node, or Karpenter's
  deletion of its NodeClaim), and never comes back.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import asdict
from datetime import datetime, timedelta

from django.db import transaction

from scheduler.autoscaled import AutoscaledPool
from scheduler.core.model.vocabulary import CapacityTier, Fabric, NodeState
from scheduler.errors import GatewayConflict
from scheduler.gateways.protocol import NodeRequestObservation, NodeRequestSpec, NodeRequestState
from scheduler.models import Node, SimulatedNodeRequest, SimulatedNodeState
from scheduler.services.fleet import node_register

PENDING, PROVISIONED, FAILED = (NodeRequestState.PENDING, NodeRequestState.PROVISIONED, NodeRequestState.FAILED)


def request_hold(
    spec: NodeRequestSpec,
    *,
    now: datetime,
    real: Callable[[float], timedelta],
    stockout_probability: float,
    seed: int | None,
) -> None:
    """Hold ``spec`` (module doc); ``real`` turns the pool's virtual arrival seconds into the fleet's real time."""
    with transaction.atomic():
        if SimulatedNodeRequest.objects.filter(request_id=spec.id).exists():
            return  # idempotent, as creating an object that exists is refused and the caller's ask stands
        pool = AutoscaledPool.objects.filter(name=spec.pool).first()
        if pool is None:
            raise GatewayConflict(f"no autoscaled pool {spec.pool!r} in the simulated cloud")
        draw = random.Random(None if seed is None else f"{seed}:node-request:{spec.id}").random()
        fails = ""
        if draw < stockout_probability:
            fails = f"CapacityIsNotFound: no {spec.gpu_model} capacity in the simulated cloud (a stockout)"
        elif _pool_nodes(spec.pool) + spec.nodes > pool.max_nodes:
            fails = f"CapacityIsNotFound: pool {spec.pool} is at its maximum size of {pool.max_nodes} nodes"
        details = asdict(spec)
        details["node_selector"] = dict(spec.node_selector)
        details["interconnect"], details["fabric"] = pool.interconnect, pool.fabric
        SimulatedNodeRequest.objects.create(
            request_id=spec.id,
            job=spec.job,
            namespace=spec.namespace,
            pool=spec.pool,
            nodes=spec.nodes,
            spec=details,
            asked_at=now,
            ready_at=now + real(pool.arrival_default_s),
            fails=fails,
            since=now,
        )


def _pool_nodes(pool: str) -> int:
    """The pool's nodes that stand or are coming: not released, not gone, plus the nodes of its requests held."""
    standing = Node.objects.filter(pool=pool, released_at__isnull=True).exclude(state=NodeState.GONE).count()
    coming = sum(SimulatedNodeRequest.objects.filter(pool=pool, state=PENDING).values_list("nodes", flat=True))
    return standing + coming


def requests_advance(now: datetime) -> list[SimulatedNodeRequest]:
    """Serve the requests due by ``now`` (module doc); return every request held, as it stands (one read when none
    is due, the usual case)."""
    rows = list(SimulatedNodeRequest.objects.all())
    due = [row.pk for row in rows if row.state == PENDING and row.ready_at <= now]
    if not due:
        return rows
    with transaction.atomic():
        # Locked and read again: another process observing at the same time serves each request once.
        for row in SimulatedNodeRequest.objects.select_for_update().filter(pk__in=due, state=PENDING):
            if row.fails:
                row.state, row.message, row.since = FAILED, row.fails, row.ready_at
            else:
                row.node_names = _nodes_add(row)
                row.state, row.message, row.since = PROVISIONED, "CapacityIsProvisioned", row.ready_at
            row.save(update_fields=["state", "message", "since", "node_names"])
    return list(SimulatedNodeRequest.objects.all())


def _nodes_add(row: SimulatedNodeRequest) -> list[str]:
    spec = row.spec
    group = f"{row.pool}-{row.request_id}"
    names = []
    for index in range(row.nodes):
        name = f"{group}-{index}"
        node_register(
            name=name,
            gpu_model=str(spec["gpu_model"]),
            gpu_count=int(spec["gpus_per_node"]),
            interconnect=str(spec.get("interconnect") or "nvswitch"),
            # One leaf per request's placement group (the nodes of a gang's request talk through one switch);
            # otherwise each node stands alone.
            leaf_switch=group if spec.get("placement_group") else name,
            spine=f"{row.pool}-spine",
            tier=CapacityTier.ON_DEMAND,
            price_per_gpu_hour=str(spec.get("price_per_gpu_hour") or 0),
            labels={str(k): str(v) for k, v in (spec.get("node_selector") or {}).items()},
            fabric=str(spec.get("fabric") or Fabric.TCP),
            placement_group=group if spec.get("placement_group") else "",
            pool=row.pool,
        )
        names.append(name)
    return names


def request_observations(rows: list[SimulatedNodeRequest]) -> tuple[NodeRequestObservation, ...]:
    return tuple(
        NodeRequestObservation(
            id=row.request_id,
            job=row.job,
            pool=row.pool,
            state=NodeRequestState(row.state),
            message=row.message,
            since=row.since.timestamp() if row.since else None,
            nodes=tuple(row.node_names),
        )
        for row in rows
    )


def request_forget(request: str) -> None:
    """Withdraw: the request is deleted; its nodes stay until released. An unknown id does nothing."""
    SimulatedNodeRequest.objects.filter(request_id=request).delete()


def node_remove(node: str, *, now: datetime) -> None:
    """Release: an autoscaled node goes at once and never comes back; any other node, or one gone, does nothing."""
    with transaction.atomic():
        row = Node.objects.filter(name=node).exclude(pool="").first()
        if row is None:
            return
        state, _ = SimulatedNodeState.objects.select_for_update().get_or_create(node=row)
        if state.gone_at is not None and state.gone_at <= now:
            return
        state.gone_at, state.back_at = now, None
        state.save(update_fields=["gone_at", "back_at"])
