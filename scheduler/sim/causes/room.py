"""Was a capacity block capacity? Room for a job in the cluster as one cycle's plan left it.

When the engine says a pending job waits for ``capacity``, two questions about the cluster after that cycle's
plan (its evictions, layout changes and binds applied) tell a rule from a real lack of capacity:

(a) **Room free.** On *ready* nodes (schedulable, no MIG layout change under way or planned by the cycle) whose
    GPU model can serve the job (:func:`scheduler.core.rightsize.resolve`), are there enough free *places*
    with the memory one replica needs, one per replica? A place is a free MIG instance whose real memory holds
    the replica, or an idle GPU (nothing on it) whose memory does (an idle GPU already split into instances
    counts as many places as it has fitting free instances, at least one); a replica that needs n whole GPUs
    takes n idle GPUs of one node. If so, the job waited for a rule — the size cap of the production fallback,
    its quota at what the place would count, a layout change it waits for — not for capacity. Where:

    - ``room-instance``: free MIG instances alone hold every replica (no layout change needed);
    - ``room-idle-gpu``: idle GPUs are needed (used whole, or after a layout change);
    - ``room-forbidden-tier``: enough places only with nodes of tiers the job may not use
      (:func:`scheduler.core.placement.tiers.allowed_tiers`: production never runs on spot).

(b) **Lower-priority work.** Is work of a lower priority class placed (running, or bound by this cycle) on a
    ready node the job may use (its tiers, a model that can serve it)? For production the engine may evict
    any of it, preemptible first (:mod:`scheduler.core.preemption`, ground ``production``), so such a wait
    asks why it did not: the victims' slots may not add up to the job's shape, or the job's quota may refuse
    the placement. ``lower-preemptible`` when some of that work is preemptible, ``lower-non-preemptible``
    when none is.

:attr:`Room.category` makes one exclusive label per blocked cycle, in the order room → lower → ``full``
(``full``: no room, and nothing of lower priority where the job could run).
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass

from scheduler.core.capacity import ClusterState, Gpu
from scheduler.core.demand import Demand, DemandKind
from scheduler.core.fairshare import PRIORITY_INDEX
from scheduler.core.placement.tiers import allowed_tiers
from scheduler.core.plan import Plan
from scheduler.core.policy import Policy
from scheduler.core.rightsize import memory_need_mib, resolve
from scheduler.core.state import FULL_GPU_MILLI, Job, Snapshot

ROOM_INSTANCE = "room-instance"
ROOM_IDLE_GPU = "room-idle-gpu"
ROOM_FORBIDDEN_TIER = "room-forbidden-tier"
LOWER_PREEMPTIBLE = "lower-preemptible"
LOWER_NON_PREEMPTIBLE = "lower-non-preemptible"
FULL = "full"
CATEGORIES = (ROOM_INSTANCE, ROOM_IDLE_GPU, ROOM_FORBIDDEN_TIER, LOWER_PREEMPTIBLE, LOWER_NON_PREEMPTIBLE, FULL)
LABELS = {
    ROOM_INSTANCE: "(a) room: free MIG instances",
    ROOM_IDLE_GPU: "(a) room: idle GPUs",
    ROOM_FORBIDDEN_TIER: "(a) room only on tiers it may not use",
    LOWER_PREEMPTIBLE: "(b) no room; lower-prio. work, some preemptible",
    LOWER_NON_PREEMPTIBLE: "(b) no room; lower-prio. work, none preemptible",
    FULL: "no room, no lower-priority work",
}


@dataclass(frozen=True, slots=True)
class Room:
    """The answers for one job at one cycle (module doc): ``room`` one of the ``ROOM_*`` or None; ``lower``
    one of the ``LOWER_*`` or None; ``lower_bound_now``: some of that lower work was bound by this very cycle."""

    room: str | None
    lower: str | None
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
    running before the cycle (a placed job missing from it was bound by the cycle)."""
    tiers = {str(tier) for tier in allowed_tiers(job)}
    need_mib = memory_need_mib(job.request, policy)
    allowed = instances = forbidden = 0
    usable: set[str] = set()
    for name in sorted(ready):
        node = state.nodes[name]
        demand = resolve(job, node.gpu_model, policy)
        if demand is None:
            continue
        places, instance_places = _places(demand, need_mib, state.node_gpus(name))
        if str(node.tier) in tiers:
            usable.add(name)
            allowed += places
            instances += instance_places
        else:
            forbidden += places
    room = None
    if allowed >= job.replicas:
        room = ROOM_INSTANCE if instances >= job.replicas else ROOM_IDLE_GPU
    elif allowed + forbidden >= job.replicas:
        room = ROOM_FORBIDDEN_TIER
    lower, bound_now = _lower_work(job, state, usable, started_at)
    return Room(room, lower, bound_now)


def _places(demand: Demand, need_mib: int | None, gpus: tuple[Gpu, ...]) -> tuple[int, int]:
    """(places for one replica on these GPUs of one node, how many of them are free MIG instances)."""
    idle = [gpu for gpu in gpus if gpu.idle]
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


def _lower_work(
    job: Job, state: ClusterState, usable: Set[str], started_at: Mapping[str, float]
) -> tuple[str | None, bool]:
    """(``LOWER_*`` or None, whether some of that work was bound by this cycle) on the ``usable`` nodes."""
    rank = PRIORITY_INDEX[job.priority]
    found = preemptible = bound_now = False
    for other_id, slots in state.placed.items():
        other = state.jobs[other_id]
        if PRIORITY_INDEX[other.priority] <= rank:
            continue
        if not any(slot.node in usable for replica in slots for slot in replica):
            continue
        found = True
        preemptible |= other.preemptible
        bound_now |= other_id not in started_at
    if not found:
        return None, False
    return (LOWER_PREEMPTIBLE if preemptible else LOWER_NON_PREEMPTIBLE), bound_now
