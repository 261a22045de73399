"""The simulator's autoscaler: carries out a plan's ``Provision``, ``Withdraw`` and ``Release`` the way a cloud's
autoscaler does, with the documented provisioning model (:mod:`scheduler.core.gpus.arrival`), and bills what it
adds.

- **Provision** (a node request for one job, all or nothing): a seeded draw decides its fate. It arrives after the
  drawn delay, and its nodes join the cluster as on-demand nodes whose ``pool`` names the pool (``POOL-1``,
  ``POOL-2`` … in order of arrival); or it stocks out and is known to have failed ``fail_after_s`` after it was made
  (the Cluster Autoscaler's ``max-node-provision-time``), when ``Provisioning.failed`` gets ``(job, at)``.
- **Withdraw**: the request is cancelled at once; its nodes never come.
- **Release**: the node leaves the cluster at once (the replay checks it is empty).

**Billing** (spec/benchmarks.md B4: "billed from request to release"): each node of a request is billed at its
instance price (GPUs × the pool's price per GPU-hour) from the moment it was requested — the instance is launched
and booting, as clouds bill it — to its release, or to the request's withdrawal; a request that stocked out is billed
nothing (no instance was launched) and its node-hours from request to failure are counted apart as ``stocked out``.
Budgets: ``budget_gpu_hours`` is handed to the engine unchanged (B4 sets none: unbounded).

Deterministic: one ``random.Random`` seeded from the run's seed; every request takes exactly two draws.
Pure, no Django.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from scheduler.core.gpus.arrival import ArrivalModel
from scheduler.core.model.provisioning import NodeRequest, Offering, Provision, Provisioning
from scheduler.core.model.snapshot import Node
from scheduler.core.model.vocabulary import CapacityTier

ARRIVED, FAILED, WITHDRAWN, IN_FLIGHT = "arrived", "failed", "withdrawn", "in flight"


class AutoscalerError(ValueError):
    """A plan asked the autoscaler for something it cannot do (unknown pool, too many nodes, no such request)."""


@dataclass(frozen=True, slots=True)
class AutoscaledPool:
    """One pool the autoscaler can grow: what the engine is offered, how its nodes arrive, and the node it adds
    (``template``: its name, ``pool``, tier and price are set by the autoscaler)."""

    offering: Offering
    model: ArrivalModel
    template: Node

    def __post_init__(self) -> None:
        if self.template.gpu_model != self.offering.gpu_model or self.template.gpu_count != self.offering.gpu_count:
            raise ValueError(
                f"pool {self.offering.pool!r}: the template node is {self.template.gpu_count} × "
                f"{self.template.gpu_model}, the offering {self.offering.gpu_count} × {self.offering.gpu_model}"
            )


@dataclass(slots=True)
class RequestLog:
    """One node request's life."""

    id: str
    job: str
    pool: str
    nodes: int
    gpus_per_node: int
    price_per_gpu_hour: float
    requested_at: float
    estimate_at: float  # the engine's estimate when it asked
    due_at: float  # when it arrives, or is known to have failed
    placement_group: bool = False  # its nodes share one placement group (and one leaf)
    stocks_out: bool = False  # the draw's verdict, hidden until due_at as the cloud's is
    outcome: str = IN_FLIGHT
    ended_at: float | None = None  # arrived, failed or withdrawn at
    node_names: tuple[str, ...] = ()


@dataclass(slots=True)
class NodeBill:
    """One autoscaled node's billed interval: from its request to its release (or the run's end)."""

    node: str
    pool: str
    gpus: int
    price_per_gpu_hour: float
    start: float
    end: float | None = None  # None: still held


@dataclass
class Autoscaler:
    """The pools of one run and everything asked of them (module doc). Pass it to
    :func:`scheduler.sim.replay.replay`, then read :meth:`summary` and :meth:`bills`."""

    pools: Sequence[AutoscaledPool]
    seed: int = 0
    budget_gpu_hours: tuple[tuple[str, float], ...] = ()
    requests: dict[str, RequestLog] = field(default_factory=dict)
    node_bills: dict[str, NodeBill] = field(default_factory=dict)
    failed: list[tuple[str, float]] = field(default_factory=list)
    idle_since: dict[str, float] = field(default_factory=dict)
    nodes: dict[str, Node] = field(default_factory=dict)  # every node the autoscaler ever added
    _rng: random.Random = field(init=False, repr=False)
    _by_pool: dict[str, AutoscaledPool] = field(init=False, repr=False)
    _added: dict[str, int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(f"autoscaler:{self.seed}")
        self._by_pool = {}
        for pool in self.pools:
            if pool.offering.pool in self._by_pool:
                raise ValueError(f"two autoscaled pools are named {pool.offering.pool!r}; pool names must be unique")
            self._by_pool[pool.offering.pool] = pool
        self._added = dict.fromkeys(self._by_pool, 0)

    # -- what the engine sees ---------------------------------------------------------------------------------

    def in_flight(self) -> list[RequestLog]:
        return [r for r in self.requests.values() if r.outcome == IN_FLIGHT]

    def provisioning(self, now: float, retry_s: float) -> Provisioning:
        """The snapshot's ``provisioning`` at ``now``; failures older than ``retry_s`` are forgotten (the engine
        only reads them to wait that long before asking again)."""
        self.failed = [(job, at) for job, at in self.failed if now - at < retry_s]
        requests = tuple(
            NodeRequest(r.id, r.job, r.pool, r.nodes, r.requested_at, r.estimate_at) for r in self.in_flight()
        )
        return Provisioning(
            offerings=tuple(pool.offering for pool in self.pools),
            requests=requests,
            failed=tuple(self.failed),
            idle_since=tuple(sorted(self.idle_since.items())),
            budget_gpu_hours=self.budget_gpu_hours,
        )

    def held_nodes(self, pool: str) -> int:
        """The pool's nodes present plus the nodes requested of it and not arrived (its ceiling counts both)."""
        present = sum(1 for bill in self.node_bills.values() if bill.pool == pool and bill.end is None)
        return present + sum(r.nodes for r in self.in_flight() if r.pool == pool)

    def note_idle(self, now: float, busy: Iterable[str]) -> None:
        """Keep ``idle_since`` up to date at a cycle: present autoscaled nodes that hold no work are idle since the
        first cycle that saw them empty (or their arrival); a node holding work is not idle."""
        busy = set(busy)
        for name, bill in self.node_bills.items():
            if bill.end is not None or name in busy:
                self.idle_since.pop(name, None)
            else:
                self.idle_since.setdefault(name, now)

    # -- carrying out the plan --------------------------------------------------------------------------------

    def provision(self, ask: Provision, now: float) -> RequestLog:
        """Make a node request for ``ask``; its fate is drawn now (module doc)."""
        pool = self._by_pool.get(ask.pool)
        if pool is None:
            raise AutoscalerError(f"provisions from pool {ask.pool!r}, which is not offered")
        if ask.nodes < 1:
            raise AutoscalerError(f"provisions {ask.nodes} nodes for {ask.job!r}; a request asks for at least one")
        if self.held_nodes(ask.pool) + ask.nodes > pool.offering.max_nodes:
            raise AutoscalerError(
                f"provisions {ask.nodes} nodes of pool {ask.pool!r} for {ask.job!r}: the pool holds or awaits "
                f"{self.held_nodes(ask.pool)} of at most {pool.offering.max_nodes}"
            )
        delay = pool.model.draw(self._rng, ask.nodes)
        request = RequestLog(
            id=f"req-{len(self.requests) + 1}",
            job=ask.job,
            pool=ask.pool,
            nodes=ask.nodes,
            gpus_per_node=pool.offering.gpu_count,
            price_per_gpu_hour=pool.offering.price_per_gpu_hour,
            requested_at=now,
            estimate_at=ask.arrives_at,
            due_at=now + (pool.model.fail_after_s if delay is None else delay),
            placement_group=ask.placement_group,
            stocks_out=delay is None,
        )
        self.requests[request.id] = request
        return request

    def due(self, request_id: str, now: float) -> tuple[Node, ...]:
        """The request's due time has come: its nodes (arrived, to add to the cluster) or () when it failed or was
        withdrawn before."""
        request = self.requests[request_id]
        if request.outcome != IN_FLIGHT or request.due_at != now:
            return ()
        if request.stocks_out:  # known now
            request.outcome, request.ended_at = FAILED, now
            self.failed.append((request.job, now))
            return ()
        pool = self._by_pool[request.pool]
        added = []
        for _ in range(request.nodes):
            self._added[request.pool] += 1
            name = f"{request.pool}-{self._added[request.pool]}"
            node = replace(
                pool.template,
                name=name,
                pool=request.pool,
                tier=CapacityTier.ON_DEMAND,
                price_per_gpu_hour=pool.offering.price_per_gpu_hour,
            )
            if request.placement_group:  # one placement group, one leaf: the gang's nodes are close
                node = replace(
                    node, placement_group=f"{request.pool}/{request.id}", leaf=f"{request.pool}/{request.id}"
                )
            added.append(node)
            self.nodes[name] = node
            self.node_bills[name] = NodeBill(
                name, request.pool, node.gpu_count, node.price_per_gpu_hour, start=request.requested_at
            )
            self.idle_since[name] = now  # empty on arrival
        request.outcome, request.ended_at, request.node_names = ARRIVED, now, tuple(n.name for n in added)
        return tuple(added)

    def withdraw(self, request_id: str, now: float) -> RequestLog:
        request = self.requests.get(request_id)
        if request is None or request.outcome != IN_FLIGHT:
            raise AutoscalerError(f"withdraws request {request_id!r}, which is not in flight")
        request.outcome, request.ended_at = WITHDRAWN, now
        return request

    def release(self, node: str, now: float) -> NodeBill:
        bill = self.node_bills.get(node)
        if bill is None or bill.end is not None:
            raise AutoscalerError(f"releases {node!r}, which is not an autoscaled node present")
        bill.end = now
        self.idle_since.pop(node, None)
        return bill

    def node_lost(self, node: str, now: float) -> None:
        """An autoscaled node left by itself (removed, interrupted): its billing stops."""
        bill = self.node_bills.get(node)
        if bill is not None and bill.end is None:
            bill.end = now
            self.idle_since.pop(node, None)

    # -- what it cost -----------------------------------------------------------------------------------------

    def bills(self, end: float) -> list[NodeBill]:
        """Every billed interval, those still open closed at ``end``: each node's, and each withdrawn request's
        nodes from request to withdrawal."""
        out = [replace(bill, end=end if bill.end is None else bill.end) for bill in self.node_bills.values()]
        for request in self.requests.values():
            if request.outcome == WITHDRAWN:
                assert request.ended_at is not None
                out += [
                    NodeBill(
                        f"{request.id}/{i}",
                        request.pool,
                        request.gpus_per_node,
                        request.price_per_gpu_hour,
                        request.requested_at,
                        request.ended_at,
                    )
                    for i in range(1, request.nodes + 1)
                ]
        return out

    def _live(self, request: RequestLog, window: tuple[float, float]) -> bool:
        """Made before ``window`` ends, and in flight, or billed (its nodes held), inside it."""
        if request.requested_at >= window[1]:
            return False
        if request.outcome == ARRIVED:
            ends = [self.node_bills[name].end for name in request.node_names]
            return any(end is None or end > window[0] for end in ends)
        return request.ended_at is None or request.ended_at > window[0]

    def summary(self, window: tuple[float, float]) -> dict[str, float | int]:
        """Requests live during ``window`` (made before its end, not ended before its start: a request of the
        warm-up whose nodes are billed in the window counts) by outcome — arrived, failed (stocked out), withdrawn,
        still in flight; billed node-hours and cost inside ``window``; node-hours asked for that stocked out."""
        made = [r for r in self.requests.values() if self._live(r, window)]
        cost = node_hours = 0.0
        for bill in self.bills(window[1]):
            assert bill.end is not None
            hours = max(0.0, min(bill.end, window[1]) - max(bill.start, window[0])) / 3600.0
            node_hours += hours
            cost += hours * bill.gpus * bill.price_per_gpu_hour
        stocked_out = sum(
            r.nodes * (max(0.0, min(r.ended_at, window[1]) - max(r.requested_at, window[0]))) / 3600.0
            for r in self.requests.values()
            if r.outcome == FAILED and r.ended_at is not None
        )
        return {
            "requests": len(made),
            "arrived": sum(r.outcome == ARRIVED for r in made),
            "failed": sum(r.outcome == FAILED for r in made),
            "withdrawn": sum(r.outcome == WITHDRAWN for r in made),
            "in_flight": sum(r.outcome == IN_FLIGHT for r in made),
            "billed_node_hours": node_hours,
            "cost": cost,
            "stocked_out_node_hours": stocked_out,
        }
