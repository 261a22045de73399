"""On-demand capacity for peaks (docs/scheduling-rules.md §9): which waiting jobs get on-demand nodes asked for,
which requests are given up, and which autoscaled nodes are given back.

It runs once per cycle after every pending turn and explanation (:mod:`scheduler.core.planning.cycle`), on the
cycle's waiting list, and changes nothing the turns decided: existing capacity — free, backfilled, reserved, freed
by preemption — is always tried first, so a job is asked nodes for only when it still waits, and production
never waits on a request where preemption could have served it (its turn tried that first).

Rules, in the cycle's order of waiting jobs (production first, then fair share):

1. **Who asks.** A waiting job whose tiers allow on-demand (:mod:`scheduler.core.rules.tiers`), blocked by capacity
   (``capacity``, ``reserved`` or ``not-ready``: new nodes change that; a quota's refusal, a reconfiguration under
   way or a node held for production do not), whose ETA is unknown or later than ``Policy.provision_wait_s``,
   and whose last request did not fail within ``Policy.provision_retry_s``.
2. **Capacity already coming first.** A job that fits the spare GPUs of nodes already asked for (in flight, or
   asked earlier this cycle) on a pool that can serve it waits for those instead of asking more: one 8-GPU node
   asked for one GPU serves the next seven 1-GPU jobs of its shape. Spare GPUs are counted per node, whole
   replicas only.
3. **What to ask.** Of the offerings that can serve the job (its request right-sizes on the offering's GPU model and
   one replica fits one node), the cheapest for the whole job (nodes × GPUs × price per GPU-hour); a gang spanning
   nodes prefers a pool that promises one placement group. All the job's nodes are asked at once, all or nothing.
   A pool never holds more than ``max_nodes`` nodes, counting its nodes, its requests in flight and this cycle's.
4. **Budget.** A request is charged ``nodes × GPUs per node × hours`` (the arrival, the job's expected run time and
   the idle time before release) against its team's and the cluster's GPU-hours left today; one that would take
   either below zero is not made, and the job's reason says so.
5. **Giving up.** A request in flight whose job no longer waits (bound elsewhere, finished, cancelled, rejected) is
   withdrawn: its nodes are not needed any more, and an autoscaler bills from the request.
6. **Giving back.** An autoscaled node that has held no work for ``Policy.release_idle_s`` and takes no bind this
   cycle is released.

A job waiting for nodes (its own request, or rule 2's spare) while capacity blocks it is told so — blocker
``provisioning``, the pool and the nodes in its reason — and its ETA is the nodes' expected arrival (plus a MIG
reconfiguration for a MIG demand: new nodes come with MIG off) when that is sooner than what it had. A job with a
request that something else blocks now (its quota) keeps the request and is told what blocks it.

With no offerings, no requests and no idle autoscaled nodes in the snapshot, the plan is left exactly as it was.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from scheduler.core.decisions.reservation import expected_runtime
from scheduler.core.model.demand import DemandKind
from scheduler.core.model.explain import duration_text
from scheduler.core.model.plan import Bind, Waiting
from scheduler.core.model.policy import Policy
from scheduler.core.model.provisioning import NodeRequest, Offering, Provision, Release, Withdraw
from scheduler.core.model.snapshot import Job, Snapshot
from scheduler.core.model.vocabulary import BlockerKind, CapacityTier
from scheduler.core.rules.tiers import allowed_tiers
from scheduler.core.sizing.need import replica_need
from scheduler.core.sizing.rightsize import resolve

# Blockers new nodes can lift (rule 1).
ASKING_BLOCKERS = frozenset({BlockerKind.CAPACITY, BlockerKind.RESERVED, BlockerKind.NOT_READY})
CLUSTER = ""  # the budget key of the whole cluster (Provisioning.budget_gpu_hours)


@dataclass(frozen=True, slots=True)
class Asks:
    """What the rule decided, and the waiting list with the jobs that wait for nodes told so."""

    waiting: tuple[Waiting, ...]
    provisions: tuple[Provision, ...] = ()
    withdrawals: tuple[Withdraw, ...] = ()
    releases: tuple[Release, ...] = ()


def active(snapshot: Snapshot) -> bool:
    """Does the rule have anything to decide (module doc, last paragraph)?"""
    provisioning = snapshot.provisioning
    return bool(provisioning.offerings or provisioning.requests or provisioning.idle_since)


def decide(snapshot: Snapshot, policy: Policy, now: float, waiting: Sequence[Waiting], binds: Sequence[Bind]) -> Asks:
    """The rule's decisions for a cycle whose turns left ``waiting`` and made ``binds`` (module doc)."""
    if not active(snapshot):
        return Asks(waiting=tuple(waiting))
    provisioning = snapshot.provisioning
    pending = {job.id: job for job in snapshot.pending}
    waiting_ids = {entry.job for entry in waiting}
    withdrawals = tuple(
        Withdraw(request=request.id, job=request.job, reason=_gone_reason(request, pending, binds))
        for request in sorted(provisioning.requests, key=lambda r: r.id)
        if request.job not in waiting_ids
    )
    kept = tuple(request for request in provisioning.requests if request.job in waiting_ids)
    ledger = _Ledger(snapshot, policy, kept)
    told: list[Waiting] = []
    provisions: list[Provision] = []
    for entry in waiting:
        job = pending.get(entry.job)
        told.append(entry if job is None else ledger.consider(job, entry, now, provisions))
    return Asks(
        waiting=tuple(told),
        provisions=tuple(provisions),
        withdrawals=withdrawals,
        releases=_releases(snapshot, policy, now, binds),
    )


def _gone_reason(request: NodeRequest, pending: Mapping[str, Job], binds: Sequence[Bind]) -> str:
    if any(bind.job == request.job for bind in binds):
        return "its job started on other capacity"
    if request.job in pending:
        return "its job was rejected"
    return "its job is no longer pending"


def _releases(snapshot: Snapshot, policy: Policy, now: float, binds: Sequence[Bind]) -> tuple[Release, ...]:
    """Rule 6."""
    bound_nodes = {slot.node for bind in binds for replica in bind.slots for slot in replica}
    pools = {node.name: node.pool for node in snapshot.nodes if node.pool}
    return tuple(
        Release(node=name, pool=pools[name], idle_since=since)
        for name, since in sorted(snapshot.provisioning.idle_since)
        if name in pools and name not in bound_nodes and now - since >= policy.release_idle_s
    )


@dataclass(slots=True)
class _Coming:
    """Nodes asked of one pool (in flight or this cycle) and the whole replicas' GPUs left on each (rule 2)."""

    request: str  # the request id, or the job of a request made this cycle
    arrives_at: float
    spare: list[float]  # GPUs left per node


class _Ledger:
    """The rule's running account through one cycle: pools' room, budgets left, capacity coming (rules 2–4)."""

    def __init__(self, snapshot: Snapshot, policy: Policy, requests: Sequence[NodeRequest]) -> None:
        provisioning = snapshot.provisioning
        self.policy = policy
        self.offerings = sorted(provisioning.offerings, key=lambda o: o.pool)
        self.by_pool = {offering.pool: offering for offering in self.offerings}
        self.teams = {team.name: team for team in snapshot.teams}
        self.budget = dict(provisioning.budget_gpu_hours)
        self.failed: dict[str, float] = {}
        for failed_job, at in provisioning.failed:
            self.failed[failed_job] = max(at, self.failed.get(failed_job, at))
        self.held: dict[str, int] = {}  # pool → nodes it has or has been asked for
        for node in snapshot.nodes:
            if node.pool:
                self.held[node.pool] = self.held.get(node.pool, 0) + 1
        pending = {job.id: job for job in snapshot.pending}
        self.coming: dict[str, list[_Coming]] = {}
        self.own: dict[str, NodeRequest] = {}
        for request in sorted(requests, key=lambda r: r.id):
            self.held[request.pool] = self.held.get(request.pool, 0) + request.nodes
            self.own[request.job] = request
            offering = self.by_pool.get(request.pool)
            job = pending.get(request.job)
            if offering is None or job is None:
                continue
            spare = [float(offering.gpu_count)] * request.nodes
            _take(spare, job, offering, policy)
            self.coming.setdefault(request.pool, []).append(_Coming(request.id, request.arrives_at, spare))

    def consider(self, job: Job, entry: Waiting, now: float, provisions: list[Provision]) -> Waiting:
        """``entry`` as the rule leaves it, after asking for nodes for ``job`` when rule 1 says so."""
        own = self.own.get(job.id)
        if own is not None and entry.blocker not in ASKING_BLOCKERS:
            return (
                entry  # it keeps its request (what blocks it may lift before the nodes come), told what blocks it now
            )
        if own is not None:
            offering = self.by_pool.get(own.pool)
            told = _told(entry, job, offering, own.pool, own.nodes, own.arrives_at, now, "asked", self.policy)
            return (
                replace(told, reason=_inserted(told.reason, f"the autoscaler: {own.message}")) if own.message else told
            )
        if not self._asks(job, entry, now):
            return entry
        servable = [offering for offering in self.offerings if _serves(offering, job, self.policy)]
        if not servable:
            return entry
        for offering in servable:  # rule 2: capacity already coming
            for coming in self.coming.get(offering.pool, []):
                if _take(coming.spare, job, offering, self.policy):
                    return _told(entry, job, offering, offering.pool, 0, coming.arrives_at, now, "coming", self.policy)
        return self._ask(job, entry, now, servable, provisions)

    def _asks(self, job: Job, entry: Waiting, now: float) -> bool:
        """Rule 1."""
        if entry.blocker not in ASKING_BLOCKERS or CapacityTier.ON_DEMAND not in allowed_tiers(job):
            return False
        if entry.eta_s is not None and entry.eta_s <= self.policy.provision_wait_s:
            return False
        failed_at = self.failed.get(job.id)
        return failed_at is None or now - failed_at >= self.policy.provision_retry_s

    def _ask(
        self, job: Job, entry: Waiting, now: float, servable: Sequence[Offering], provisions: list[Provision]
    ) -> Waiting:
        """Rules 3 and 4."""
        refusal = ""
        for offering in sorted(servable, key=lambda o: _preference(o, job, self.policy)):
            nodes = _nodes_for(job, offering, self.policy)
            if self.held.get(offering.pool, 0) + nodes > offering.max_nodes:
                refusal = refusal or f"pool {offering.pool} is at its ceiling of {offering.max_nodes} nodes"
                continue
            runtime_s = expected_runtime(job, self.teams.get(job.team), self.policy)
            hours = (offering.arrival_s + runtime_s + self.policy.release_idle_s) / 3600.0
            gpu_hours = nodes * offering.gpu_count * hours
            short = [key for key in (job.team, CLUSTER) if key in self.budget and self.budget[key] < gpu_hours]
            if short:
                whose = "the cluster's" if short[0] == CLUSTER else f"team {job.team}'s"
                refusal = refusal or (
                    f"{whose} on-demand budget has {self.budget[short[0]]:.0f} GPU-hours left today, "
                    f"the {nodes} {offering.gpu_model} node{'s' if nodes != 1 else ''} would take {gpu_hours:.0f}"
                )
                continue
            for key in (job.team, CLUSTER):
                if key in self.budget:
                    self.budget[key] -= gpu_hours
            self.held[offering.pool] = self.held.get(offering.pool, 0) + nodes
            arrives_at = now + offering.arrival_s
            provisions.append(
                Provision(
                    job=job.id,
                    pool=offering.pool,
                    nodes=nodes,
                    gpu_model=offering.gpu_model,
                    gpus_per_node=offering.gpu_count,
                    placement_group=offering.placement_group and nodes > 1,
                    gpu_hours=gpu_hours,
                    arrives_at=arrives_at,
                    team=job.team,
                )
            )
            spare = [float(offering.gpu_count)] * nodes
            _take(spare, job, offering, self.policy)
            self.coming.setdefault(offering.pool, []).append(_Coming(job.id, arrives_at, spare))
            return _told(entry, job, offering, offering.pool, nodes, arrives_at, now, "asking", self.policy)
        return (
            replace(entry, reason=_inserted(entry.reason, f"no on-demand nodes asked: {refusal}")) if refusal else entry
        )


def _serves(offering: Offering, job: Job, policy: Policy) -> bool:
    """Can a node of ``offering`` hold one replica of ``job``?"""
    if resolve(job, offering.gpu_model, policy) is None:
        return False
    return replica_need(job, offering.gpu_model, policy) <= offering.gpu_count


def _per_node(job: Job, offering: Offering, policy: Policy) -> int:
    """Whole replicas of ``job`` one node of ``offering`` holds (≥ 1 for an offering that serves it)."""
    return max(1, int(offering.gpu_count // replica_need(job, offering.gpu_model, policy)))


def _nodes_for(job: Job, offering: Offering, policy: Policy) -> int:
    return math.ceil(job.replicas / _per_node(job, offering, policy))


def _preference(offering: Offering, job: Job, policy: Policy) -> tuple[bool, float, str]:
    """Rule 3's order: a spanning gang's placement group first, then the cost of the whole job per hour."""
    nodes = _nodes_for(job, offering, policy)
    scattered = nodes > 1 and not offering.placement_group
    return (scattered, nodes * offering.gpu_count * offering.price_per_gpu_hour, offering.pool)


def _take(spare: list[float], job: Job, offering: Offering, policy: Policy) -> bool:
    """Place ``job``'s replicas, whole, on the nodes' spare GPUs, first fit; True (and taken) if all fit."""
    need = replica_need(job, offering.gpu_model, policy)
    trial = list(spare)
    for _ in range(job.replicas):
        for index, left in enumerate(trial):
            if left + 1e-9 >= need:
                trial[index] = left - need
                break
        else:
            return False
    spare[:] = trial
    return True


def _told(
    entry: Waiting,
    job: Job,
    offering: Offering | None,
    pool: str,
    nodes: int,
    arrives_at: float,
    now: float,
    how: str,
    policy: Policy,
) -> Waiting:
    """``entry`` for a job that waits for nodes of ``pool`` arriving at ``arrives_at`` (module doc, last rules)."""
    demand = resolve(job, offering.gpu_model, policy) if offering is not None else None
    ready_at = arrives_at + (policy.mig_reconfigure_s if demand is not None and demand.kind == DemandKind.MIG else 0)
    eta = max(0.0, ready_at - now)
    if entry.eta_s is not None and entry.eta_s < eta:
        eta = entry.eta_s
    nodes_text = f"{nodes} on-demand node{'s' if nodes != 1 else ''}"
    when = f"expected in {duration_text(ready_at - now)}"
    text = {
        "asked": f"{nodes_text} asked of pool {pool} for it, {when}",
        "asking": f"asking pool {pool} for {nodes_text}, {when}",
        "coming": f"on-demand nodes already asked of pool {pool} will take it, {when}",
    }[how]
    return replace(entry, reason=_inserted(entry.reason, text), eta_s=eta, blocker=BlockerKind.PROVISIONING)


def _inserted(reason: str, text: str) -> str:
    """``reason`` (need; blocker; standing; place in line, as explain.reason_text writes it) with ``text`` told
    before its last two parts, so explain.reposition still rewrites the place in line."""
    parts = reason.rsplit("; ", 2)
    if len(parts) < 3:
        return f"{reason}; {text}"
    return f"{parts[0]}; {text}; {parts[1]}; {parts[2]}"
