"""``find_slots``: a placement for every replica of a job on free capacity, or None (a gang binds whole).

Contract: ``find_slots(state, job, policy)`` returns one tuple of :class:`Slot` per replica, all free in ``state`` now,
honouring the ``gpu_model`` constraint, tier routing (:mod:`~scheduler.core.rules.tiers`), node readiness (schedulable,
no MIG reconfiguration in flight at ``now``), CPU and host memory where nodes state them, and the right-sized demand of
:func:`scheduler.core.sizing.rightsize.resolve` on each model. It never leaves the state changed: multi-replica MIG and
share
gangs are searched by tentatively placing each replica inside a Statement (so the next replica sees the previous one's
slot) and rolling back at the end.

Which slots (the rules live in the modules): whole-GPU gangs — every replica whole GPUs, more than one replica — go
through :mod:`~scheduler.core.placement.topology`; otherwise each replica takes the best of :mod:`.whole` (best fit),
:mod:`.mig` and :mod:`.shares` (fragmentation-aware), compared by (tier rank, holding, …).

Speed: on an :class:`IndexedClusterState` the live index is used, a failure is remembered per job shape
until capacity is next freed (only freeing can make a failed shape fit) and a placement until anything
changes (the index's ``version``, which a rollback restores). On a plain ClusterState a fresh index is built
for the call.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import replace

from scheduler.core.model.cluster_state import ClusterState
from scheduler.core.model.demand import DemandKind
from scheduler.core.model.policy import Policy
from scheduler.core.model.shape import placement_shape
from scheduler.core.model.snapshot import Job, Slot, Slots
from scheduler.core.placement.holdings import Holding, holding
from scheduler.core.placement.index import CapacityIndex, IndexedClusterState
from scheduler.core.placement.mig import best_instance
from scheduler.core.placement.mix import mix_of
from scheduler.core.placement.options import Option, options_for
from scheduler.core.placement.shares import best_share
from scheduler.core.placement.topology import place_gang
from scheduler.core.placement.whole import best_whole

_REPLICA_SEPARATOR = "\x1f"  # tentative replicas are placed as "<job id>\x1f<n>", never a real id


def index_of(state: ClusterState, now: float | None = None) -> tuple[CapacityIndex, bool]:
    """The state's live index (brought up to date) and True, or a fresh one for a plain ClusterState and
    False."""
    if isinstance(state, IndexedClusterState) and state.index is not None:
        state.index.flush()
        return state.index, True
    return CapacityIndex(state, now), False


def find_slots(
    state: ClusterState,
    job: Job,
    policy: Policy,
    now: float | None = None,
    allowed: frozenset[Holding] | None = None,
) -> Slots | None:
    """Slots for all ``job.replicas`` replicas, or None (module contract). ``now`` matters only for a plain
    ClusterState (an IndexedClusterState knows its cycle's time). ``allowed`` (a job of one replica only)
    narrows the search to the placements of those holdings (:mod:`.holdings`): the best placement the team's
    quota takes."""
    if job.replicas < 1:
        return None
    index, live = index_of(state, now)
    options = options_for(index, job, policy)
    shape: Hashable = placement_shape(job)
    larger: Callable[[Option, str], bool] | None = None  # any larger instance a sized demand may take
    if allowed is not None:
        assert job.replicas == 1, "only one replica's placement has a holding"
        options = tuple(option for option in options if holding(option) in allowed)
        shape = (shape, allowed)
        larger = _within(allowed)
    if index.failed.get(shape) == index.freed:
        return None
    last = index.found.get(shape)
    if last is not None and last[0] == index.version and last[1] is policy:
        return last[2]  # nothing has changed since this shape was last placed
    found = _search(state, index, live, job, options, policy, larger) if options else None
    if found is None:
        index.failed[shape] = index.freed
    else:
        index.found[shape] = (index.version, policy, found)
    return found


def _within(allowed: frozenset[Holding]) -> Callable[[Option, str], bool]:
    return lambda option, profile: holding(option, profile) in allowed


def _search(
    state: ClusterState,
    index: CapacityIndex,
    live: bool,
    job: Job,
    options: tuple[Option, ...],
    policy: Policy,
    larger: Callable[[Option, str], bool] | None = None,
) -> Slots | None:
    if job.replicas > 1 and all(o.demand.kind == DemandKind.WHOLE for o in options):
        return place_gang(index, job, options)
    if job.replicas == 1:
        found = best_replica(index, job, options, policy, larger)
        return (found,) if found is not None else None
    return replica_by_replica(state, index, job, lambda: best_replica(index, job, options, policy), live)


def replica_by_replica(
    state: ClusterState,
    index: CapacityIndex,
    job: Job,
    pick: Callable[[], tuple[Slot, ...] | None],
    live: bool = True,
) -> Slots | None:
    """Slots for every replica of ``job``, each from ``pick()`` on the capacity the replicas before it left, or
    None if one finds none. Each replica is placed tentatively as a one-replica copy (``"<id>\x1f<n>"``, never a real
    id) inside a Statement, always rolled back: the state is left as found. ``live`` False: ``index`` is not
    the state's own and is told of each one-replica copy here."""
    statement = state.begin()
    placed: list[str] = []
    try:
        replicas: list[tuple[Slot, ...]] = []
        for number in range(job.replicas):
            index.flush()
            found = pick()
            if found is None:
                return None
            replica_job = replace(job, id=f"{job.id}{_REPLICA_SEPARATOR}{number}", replicas=1)
            state.place(replica_job, (found,))
            placed.append(replica_job.id)
            if not live:
                index.occupied(replica_job, (found,))
            replicas.append(found)
        return tuple(replicas)
    finally:
        statement.rollback()
        for stand_in_id in placed:
            state.jobs.pop(stand_in_id, None)
        index.flush()


def best_replica(
    index: CapacityIndex,
    job: Job,
    options: tuple[Option, ...],
    policy: Policy,
    larger: Callable[[Option, str], bool] | None = None,
) -> tuple[Slot, ...] | None:
    """The best slots for one replica over every option, whatever its holding; ``larger(option, profile)``, when
    given, says which larger MIG instances a demand sized from memory may take (by default any)."""
    by_kind: dict[str, list[Option]] = {}
    for option in options:
        by_kind.setdefault(option.demand.kind, []).append(option)
    found: list[tuple[tuple[int, ...], tuple[Slot, ...]]] = []
    if DemandKind.WHOLE in by_kind:
        whole = best_whole(index, job, by_kind[DemandKind.WHOLE])
        if whole is not None:
            found.append(whole)
    if DemandKind.MIG in by_kind:
        mig = best_instance(index, job, by_kind[DemandKind.MIG], mix_of(index, policy), larger)
        if mig is not None:
            found.append(mig)
    if DemandKind.SHARE in by_kind:
        share = best_share(index, job, by_kind[DemandKind.SHARE], mix_of(index, policy))
        if share is not None:
            found.append(share)
    if not found:
        return None
    return min(found, key=lambda f: f[0])[1]
