"""Was a capacity block capacity? Room for a job in the cluster as one cycle's plan left it.

When the engine says a pending job waits for ``capacity``, two questions about the cluster after that cycle's
plan (its evictions, MIG reconfigurations and binds applied) tell a rule from a real lack of capacity:

(a) **Room free.** On *ready* nodes (schedulable, no MIG reconfiguration under way or planned by the cycle) whose
    GPU model can serve the job (:func:`scheduler.core.sizing.rightsize.resolve`), are there enough free *places*
    with the memory one replica needs, one per replica? A place is a free MIG instance whose real memory holds
    the replica, or an idle GPU (nothing on it) whose memory does (an idle GPU already split into instances
    counts as many places as it has fitting free instances, at least one); a replica that needs n whole GPUs
    takes n idle GPUs of one node, and a gang of whole GPUs counts on one GPU model (placement's rule). If so,
    the job waited for a rule — the size cap of the production fallback, its quota at what the place would
    count, a MIG reconfiguration it waits for — not for capacity. Where:

    - ``room-instance``: free MIG instances alone hold every replica (no MIG reconfiguration needed);
    - ``room-idle-gpu``: idle GPUs are needed (used whole, or after a MIG reconfiguration);
    - ``room-forbidden-tier``: enough places only with nodes of tiers the job may not use
      (:func:`scheduler.core.rules.tiers.allowed_tiers`: production never runs on spot).

(b) **Lower-priority work.** Is work of a lower priority class placed (running, or bound by this cycle) on a
    ready node the job may use (its tiers, a model that can serve it)? For production the engine may evict
    any of it that ran before this cycle, preemptible first (:mod:`scheduler.core.decisions.preemption`, ground
    ``production``), so such a wait asks why it did not. The answer splits it by what taking away all of
    that work that ran before the cycle would leave on the job's tiers: ``lower-would-free`` — room *as the
    GPUs are*, with no MIG reconfiguration (a replica of whole GPUs on idle GPUs with MIG off; a right-sized one on
    a free instance that holds it, or on a whole idle GPU with MIG off, as the production fallback may take)
    — so the engine could have evicted and bound now, and did not; ``lower-would-free-reconfiguration`` — room by
    (a) only after MIG reconfigurations of the GPUs the victims leave (the engine's drain-and-reconfigure path,
    300 s each); ``lower-too-small`` — no room even then (the victims' slots do not add up to the job's shape).
    :attr:`Room.lower_preemptible` says whether any of that work is preemptible, :attr:`Room.lower_bound_now`
    whether some was bound by this very cycle.

:attr:`Room.category` makes one exclusive label per blocked cycle, in the order room → lower → ``full``
(``full``: no room, and nothing of lower priority where the job could run).
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass

from scheduler.core.gpus.units import FULL_GPU_MILLI
from scheduler.core.model.cluster_state import ClusterState, Gpu
from scheduler.core.model.demand import Demand, DemandKind
from scheduler.core.model.plan import Plan
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Snapshot
from scheduler.core.model.vocabulary import PRIORITY_INDEX
from scheduler.core.rules.tiers import allowed_tiers
from scheduler.core.sizing.rightsize import memory_need_mib, resolve

ROOM_INSTANCE = "room-instance"
ROOM_IDLE_GPU = "room-idle-gpu"
ROOM_FORBIDDEN_TIER = "room-forbidden-tier"
LOWER_WOULD_FREE = "lower-would-free"
LOWER_WOULD_FREE_RECONFIGURATION = "lower-would-free-reconfiguration"
LOWER_TOO_SMALL = "lower-too-small"
FULL = "full"
CATEGORIES = (
    ROOM_INSTANCE,
    ROOM_IDLE_GPU,
    ROOM_FORBIDDEN_TIER,
    LOWER_WOULD_FREE,
    LOWER_WOULD_FREE_RECONFIGURATION,
    LOWER_TOO_SMALL,
    FULL,
)
LABELS = {
    ROOM_INSTANCE: "(a) room: free MIG instances",
    ROOM_IDLE_GPU: "(a) room: idle GPUs",
    ROOM_FORBIDDEN_TIER: "(a) room only on tiers it may not use",
    LOWER_WOULD_FREE: "(b) no room; evicting lower work makes room",
    LOWER_WOULD_FREE_RECONFIGURATION: "(b) no room; evicting + MIG reconfiguration would",
    LOWER_TOO_SMALL: "(b) no room; lower work there, too small",
    FULL: "no room, no lower-priority work there",
}


@dataclass(frozen=True, slots=True)
class Room:
    """The answers for one job at one cycle (module doc): ``room`` one of the ``ROOM_*`` or None; ``lower``
    one of the ``LOWER_*`` or None, and two facts about that lower work: some of it is preemptible, some of it
    was bound by this very cycle."""

    room: str | None
    lower: str | None
    lower_preemptible: bool = False
    lower_bound_now: bool = False

    @property
    def category(self) -> str:
        return self.room or self.lower or FULL


def after_plan(snapshot: Snapshot, plan: Plan, now: float) -> tuple[ClusterState, frozenset[str]] | None:
    """The cluster with ``plan`` applied as the replay applies it, and the names of its ready nodes; None when
    the plan cannot be applied (the replay then stops the run with the violation itself)."""
    state = ClusterState(snapshot)
    pending = {job.id: job for job in snapshot.pending}
    try:
        for evict in plan.evictions:
            state.remove(evict.job)
        for change in plan.reconfigurations:
            state.set_layout(change.node, change.gpu, change.new)
        for bind in plan.binds:
            state.place(pending[bind.job], bind.slots)
    except (KeyError, ValueError):
        return None
    changing = {change.node for change in plan.reconfigurations if change.ready_at > now}
    ready = frozenset(
        node.name
        for node in snapshot.nodes
        if node.schedulable
        and (node.reconfiguring_until is None or node.reconfiguring_until <= now)
        and node.name not in changing
    )
    return state, ready


def room_for(job: Job, state: ClusterState, ready: Set[str], started_at: Mapping[str, float], policy: Policy) -> Room:
    """The :class:`Room` of pending ``job`` in ``state`` (module doc); ``started_at``: the start of each job
    running before the cycle (a placed job missing from it was bound by the cycle). ``state`` is left as it
    was."""
    tiers = {str(tier) for tier in allowed_tiers(job)}
    need_mib = memory_need_mib(job.request, policy)
    demands = {}
    for name in sorted(ready):
        demand = resolve(job, state.nodes[name].gpu_model, policy)
        if demand is not None:
            demands[name] = demand
    usable = {name for name in demands if str(state.nodes[name].tier) in tiers}
    gang = job.replicas > 1
    allowed, instances, anywhere = _count(state, demands, usable, need_mib, gang)
    room = None
    if allowed >= job.replicas:
        room = ROOM_INSTANCE if instances >= job.replicas else ROOM_IDLE_GPU
    elif anywhere >= job.replicas:
        room = ROOM_FORBIDDEN_TIER
    lower = _lower_work(job, state, usable)
    if not lower:
        return Room(room, None)
    evictable = [other for other in lower if other in started_at]  # work bound this cycle is not a candidate
    statement = state.begin()  # take the evictable lower work away, count, put it back
    for other in evictable:
        state.remove(other)
    freed, _, _ = _count(state, demands, usable, need_mib, gang)
    as_is, _, _ = _count(state, demands, usable, need_mib, gang, as_is=True)
    statement.rollback()
    verdict = LOWER_TOO_SMALL
    if as_is >= job.replicas:
        verdict = LOWER_WOULD_FREE
    elif freed >= job.replicas:
        verdict = LOWER_WOULD_FREE_RECONFIGURATION
    return Room(
        room,
        verdict,
        lower_preemptible=any(state.jobs[other].preemptible for other in lower),
        lower_bound_now=len(evictable) < len(lower),
    )


def _count(
    state: ClusterState,
    demands: Mapping[str, Demand],
    usable: Set[str],
    need_mib: int | None,
    gang: bool,
    as_is: bool = False,
) -> tuple[int, int, int]:
    """(places on the nodes of the job's tiers, how many of them are free MIG instances, places on nodes of any
    tier). A gang of whole GPUs stays on one GPU model (placement's rule, :mod:`scheduler.core.placement.topology`): its
    places are those of its best model; other replicas may spread. ``as_is``: only places usable without a
    MIG reconfiguration (module doc, (b))."""
    allowed: dict[str, int] = {}
    anywhere: dict[str, int] = {}
    instances = 0
    for name, demand in demands.items():
        places, instance_places = _places(demand, need_mib, state.node_gpus(name), as_is)
        group = state.nodes[name].gpu_model if gang and demand.kind == DemandKind.WHOLE else ""
        anywhere[group] = anywhere.get(group, 0) + places
        if name in usable:
            allowed[group] = allowed.get(group, 0) + places
            instances += instance_places
    return max(allowed.values(), default=0), instances, max(anywhere.values(), default=0)


def _places(demand: Demand, need_mib: int | None, gpus: tuple[Gpu, ...], as_is: bool = False) -> tuple[int, int]:
    """(places for one replica on these GPUs of one node, how many of them are free MIG instances); ``as_is``:
    only those usable without a MIG reconfiguration."""
    idle = [gpu for gpu in gpus if gpu.idle and not (as_is and gpu.mig_on)]
    if demand.kind == DemandKind.WHOLE:
        return len(idle) // max(1, demand.gpus), 0
    if demand.kind == DemandKind.SHARE:
        # A share fits an idle GPU or a time-sliced GPU with milli to spare (sharing nodes only).
        fits = [
            gpu
            for gpu in gpus
            if not gpu.mig_on
            and gpu.whole is None
            and (gpu.idle or (gpu.node.sharing and gpu.milli_used + demand.milli <= FULL_GPU_MILLI))
        ]
        return len(fits), 0
    places = instances = 0
    for gpu in gpus:
        fitting = _fitting_instances(gpu, demand, need_mib)
        instances += fitting
        if gpu.idle:
            holds = gpu.spec is not None and (need_mib is None or gpu.spec.memory_mib >= need_mib)
            if as_is:  # a split GPU offers its instances; one with MIG off, itself whole
                places += fitting if gpu.mig_on else int(holds)
            else:
                places += max(int(holds), fitting)
        else:
            places += fitting
    return places, instances


def _fitting_instances(gpu: Gpu, demand: Demand, need_mib: int | None) -> int:
    """Free MIG instances on ``gpu`` that hold one replica: by memory (a right-sized request), else the profile
    asked for."""
    if not gpu.layout or gpu.spec is None:
        return 0
    profiles = gpu.spec.profiles()
    count = 0
    for name, start in gpu.layout:
        if start in gpu.instances:
            continue
        if need_mib is not None:
            count += profiles[name].memory_mib >= need_mib
        else:
            count += name == demand.mig_profile
    return count


def _lower_work(job: Job, state: ClusterState, usable: Set[str]) -> list[str]:
    """The placed jobs of a lower priority class than ``job`` with a slot on the ``usable`` nodes."""
    rank = PRIORITY_INDEX[job.priority]
    found = []
    for other_id, slots in sorted(state.placed.items()):
        if PRIORITY_INDEX[state.jobs[other_id].priority] <= rank:
            continue
        if any(slot.node in usable for replica in slots for slot in replica):
            found.append(other_id)
    return found
