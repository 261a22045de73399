"""Draining a GPU for production MIG demand that needs a layout no free instance or idle GPU offers.

Reconfiguration changes only idle GPUs (it destroys every instance on the GPU: ``docs/gpu-facts.md``, MIG Manager
reconfiguration flow), and preemption only frees instances that exist. So production inference whose profile exists
nowhere free and that no idle GPU can be reconfigured for would wait forever behind lower work; GPUs whose occupants can
move at acceptable cost are drained first. For production, lower-priority work is an acceptable cost:

1. Candidates: GPUs of ready nodes the job may use (model, tier), not in ``exclude`` (nodes that took a bind
   this cycle: a node is bound to or reconfigured in one plan, never both), in use, whose every occupant is running
   work (not bound this cycle) of lower priority than the job and not ``production``, and did not evict the
   job within ``policy.ping_pong_window_s`` (no ping-pong).
2. Cheapest first: fewest occupants, then fewest GPU-equivalents they hold (a gang spanning other GPUs
   costs all of it), then GPU order.
3. For each candidate (at most :data:`MAX_TRIES`), inside a Statement: evict the occupants, ask
   :func:`~scheduler.core.rules.reconfiguration.plan_reconfiguration` for this job's demand alone, and keep the result
   only if it reconfigures that very GPU to a layout with the job's profile; otherwise roll back.

The evictions carry the reason ``"repartition"`` and ``by`` = the production job; the job itself binds once
the change is done (the node is reconfiguring until then).

Production asking for **whole GPUs** (:func:`drain_whole_for`) meets the same wall from the other side: a replica of
n whole GPUs takes n GPUs with MIG off on one node, and a node whose other GPUs are free may lack only GPUs that are
MIG-split — idle, or holding lower-priority work. Preemption frees the instances but leaves MIG on, and a
reconfiguration changes only idle GPUs, so without a drain such a job waits behind lower work that the rules let it
evict. The rules, per replica:

1. Candidates: ready nodes the job may use (its whole-GPU options), not in ``exclude``, whose idle MIG-off GPUs
   plus their MIG-split GPUs that are idle or hold only movable work (rule 1 above) number at least the
   replica's GPUs.
2. On each node, the MIG-split GPUs it needs, cheapest first (rule 2's order: fewest occupants, fewest
   GPU-equivalents, GPU order); nodes cheapest first by the same figures summed, then by name.
3. For each candidate node (at most :data:`MAX_TRIES`), inside a Statement: evict those GPUs' occupants, ask
   :func:`~scheduler.core.rules.reconfiguration.plan_reconfiguration` to turn them back into whole GPUs for this
   job on that node alone, and keep the result only if it turns every one of them off; otherwise roll back.

No hysteresis here: this completes a preemption, and production's preemption never waits for its demand to age
(the job is here now and must start). Only the GPUs the replica needs are changed.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from scheduler.core.model.cluster_state import ClusterState, Gpu
from scheduler.core.model.demand import Demand, DemandKind
from scheduler.core.model.plan import Evict, Reconfigure
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Preemption
from scheduler.core.model.vocabulary import PRIORITY_INDEX, EvictionReason, Priority
from scheduler.core.placement.index import CapacityIndex
from scheduler.core.placement.options import Option
from scheduler.core.rules.reconfiguration import plan_reconfiguration

MAX_TRIES = 4
REASON = EvictionReason.RECONFIGURE


def drain_for(
    state: ClusterState,
    index: CapacityIndex,
    job: Job,
    options: Sequence[Option],
    policy: Policy,
    now: float,
    preemptions: Sequence[Preemption],
    also: Sequence[tuple[Job, Demand]] = (),
    exclude: Collection[str] = (),
) -> tuple[list[Evict], list[Reconfigure]] | None:
    """Evictions and reconfigurations that make room for production ``job`` (module rules), or None. ``also``:
    other demand the new layout should serve where it can (it never decides which GPU is drained).

    On success the victims are removed from ``state`` (in the caller's open Statement, if any); the layout
    changes are returned, not applied. On None the state is unchanged."""
    movable = _movable_for(state, job, policy, now, preemptions)
    if movable is None:
        return None
    candidates: list[tuple[tuple[int, int, int], int, tuple[str, ...], Option]] = []
    for option in options:
        if option.demand.kind != DemandKind.MIG:
            continue
        for name in index.groups[option.group]:
            if name in exclude:
                continue
            for gpu in state.node_gpus(name):
                holders = tuple(sorted(gpu.holders()))
                if not holders or not all(movable(h) for h in holders):
                    continue
                ordinal = index.gpu_ordinal[gpu.key]
                candidates.append(((*_cost(state, holders), ordinal), ordinal, holders, option))
    for _, ordinal, holders, option in sorted(candidates, key=lambda c: c[0])[:MAX_TRIES]:
        gpu = index.gpus[ordinal]
        statement = state.begin()
        for holder in holders:
            state.remove(holder)
        changes = plan_reconfiguration(state, [(job, option.demand), *also], policy, now, exclude=exclude)
        profile = option.demand.mig_profile
        if any(c.node == gpu.node.name and c.gpu == gpu.index and any(n == profile for n, _ in c.new) for c in changes):
            statement.commit()
            return [Evict(job=holder, reason=REASON, by=job.id) for holder in holders], changes
        statement.rollback()
    return None


def drain_whole_for(
    state: ClusterState,
    index: CapacityIndex,
    job: Job,
    options: Sequence[Option],
    policy: Policy,
    now: float,
    preemptions: Sequence[Preemption],
    exclude: Collection[str] = (),
) -> tuple[list[Evict], list[Reconfigure]] | None:
    """Evictions and MIG-off changes on one node that make room for one replica of production ``job``'s whole-GPU
    demand (module rules, whole GPUs), or None. ``policy`` should carry no hysteresis (rule 3: the caller's eager
    policy). On success the victims are removed from ``state`` (in the caller's open Statement, if any); the
    changes are returned, not applied. On None the state is unchanged."""
    movable = _movable_for(state, job, policy, now, preemptions)
    if movable is None:
        return None
    nodes: list[tuple[tuple[int, int, str], str, list[Gpu], Option]] = []
    for option in options:
        if option.demand.kind != DemandKind.WHOLE:
            continue
        for name in index.groups[option.group]:
            if name in exclude:
                continue
            free = 0
            split: list[tuple[tuple[int, int, int], Gpu]] = []
            for gpu in state.node_gpus(name):
                holders = tuple(sorted(gpu.holders()))
                if not gpu.mig_on:
                    free += gpu.idle
                elif all(movable(h) for h in holders):
                    split.append(((*_cost(state, holders), gpu.index), gpu))
            short = option.demand.gpus - free
            if short <= 0 or len(split) < short:
                continue  # free already (placement's), or not enough even drained
            chosen = sorted(split, key=lambda c: c[0])[:short]
            cost = (sum(c[0][0] for c in chosen), sum(c[0][1] for c in chosen), name)
            nodes.append((cost, name, [gpu for _, gpu in chosen], option))
    everyone = set(state.nodes)
    for _, name, gpus, option in sorted(nodes, key=lambda n: n[0])[:MAX_TRIES]:
        statement = state.begin()
        victims = sorted({h for gpu in gpus for h in gpu.holders()})
        for holder in victims:
            state.remove(holder)
        changes = plan_reconfiguration(
            state, [], policy, now, pending_whole=[(job, option.demand)], exclude=everyone - {name}
        )
        wanted = {gpu.index for gpu in gpus}
        kept = [c for c in changes if c.gpu in wanted and not c.new]
        if len(kept) == len(wanted):
            statement.commit()
            return [Evict(job=holder, reason=REASON, by=job.id) for holder in victims], kept
        statement.rollback()
    return None


def _movable_for(
    state: ClusterState, job: Job, policy: Policy, now: float, preemptions: Sequence[Preemption]
) -> Callable[[str], bool] | None:
    """Whether a running job may be drained for production ``job`` (rule 1: running, placed, of lower priority and
    not production, and it did not evict ``job`` within the ping-pong window); None when ``job`` is no production
    job, which drains nothing."""
    if job.priority != Priority.PRODUCTION:
        return None
    rank = PRIORITY_INDEX[job.priority]
    evicted_me = {p.by for p in preemptions if p.victim == job.id and now - p.at < policy.ping_pong_window_s}

    def movable(job_id: str) -> bool:
        running = state.running.get(job_id)
        if running is None or job_id not in state.placed or job_id in evicted_me:
            return False
        victim = running.job
        return victim.priority != Priority.PRODUCTION and PRIORITY_INDEX[victim.priority] > rank

    return movable


def _cost(state: ClusterState, holders: Sequence[str]) -> tuple[int, int]:
    """Rule 2's cost of draining ``holders``: how many they are, then the GPU-equivalents they hold (a gang
    spanning other GPUs costs all of it)."""
    return len(holders), sum(sum(state.job_units(h).values()) for h in holders)
