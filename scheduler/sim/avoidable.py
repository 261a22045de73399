"""Avoidable production wait: could a waiting production job have been placed at that cycle? (B2, an oracle.)

A production job's waiting second is **avoidable** when, at that cycle, a placement existed for it within its
team's burst limit using free capacity and evicting only lower-priority work. The check is a pure function of
the simulator's snapshot of the cluster as the cycle's plan left it, and it is deliberately *not* the engine's
placement code: a simple count of places per node, summed per GPU class, so it cannot agree with the engine by
construction. Its rules, on the nodes the job may use (they take new work — schedulable, no MIG reconfiguration
under way —, their tier is one the job may use, :func:`scheduler.core.rules.tiers.allowed_tiers`, and their model
can serve it, :func:`scheduler.core.sizing.rightsize.resolve`):

1. **Available**: a slot that is free or held by work of a lower priority class (production evicts lower work
   of any team, preemptible or not; it never evicts production).
2. **A whole GPU** is one with MIG off whose holders are all available, or a MIG-split one whose every instance
   is available. A replica of n whole GPUs takes n whole GPUs of one node.
3. **A MIG replica** takes an available instance of its profile *or of a larger one* (at least its compute
   slices and its memory), or a whole GPU (which serves any profile: used whole, or re-split): a whole GPU
   counts as many places as it has available instances that hold the replica, at least one.
4. **A share** (milli-GPU) takes a whole GPU, or a time-sliced GPU with MIG off whose held milli (by work that
   is not available) leaves room for it.
5. **Room**: on one GPU class, the places of its nodes add up to the job's replicas.
6. **Within the burst limit**: on that class, the team's production work (which the job may not evict) plus
   the job's own right-sized GPU-equivalents stays within the team's burst limit for the class and overall
   (a limit below the guarantee counts as the guarantee; a team without one has no ceiling).

Otherwise the second is unavoidable, and the :class:`Verdict` says why, by GPU class: ``burst`` — room existed
only above the team's burst limit; ``held`` — no room even with every lower-priority job evicted (production
holds the capacity, or the nodes take no new work), named by the class that came closest. The count is
optimistic (it ignores MIG geometry, the time a reconfiguration takes, ping-pong protection and other production
waiting for the same places): what it calls unavoidable no scheduler could have avoided at that cycle.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler.core.gpus.catalog import COMPUTE_SLICES, GPU_MODEL_BY_NAME, ProfileSpec
from scheduler.core.gpus.units import FULL_GPU_MILLI, UNITS_PER_GPU
from scheduler.core.model.cluster_state import gpu_class_of, slot_units
from scheduler.core.model.demand import Demand, DemandKind
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Node, Snapshot, Team
from scheduler.core.model.vocabulary import PRIORITY_INDEX, Priority
from scheduler.core.rules.tiers import allowed_tiers
from scheduler.core.sizing.rightsize import resolve

AVOIDABLE = "avoidable"
BURST = "burst"
HELD = "held"
ANY = "any"
EPSILON = 1e-9


@dataclass(frozen=True, slots=True)
class Verdict:
    """One waiting production job at one cycle: ``cause`` is ``avoidable``, ``burst`` or ``held`` (module doc);
    ``gpu_class``: where room was found (avoidable, burst); for ``held``, the class of the nodes the job may use
    that came closest (most places, then most whole GPUs, then by name), or, with no such node, the class the job
    asks for (``any`` when it names none)."""

    cause: str
    gpu_class: str

    @property
    def avoidable(self) -> bool:
        return self.cause == AVOIDABLE


@dataclass(slots=True)
class _Gpu:
    """What one GPU offers a job of one priority: its layout, and who holds what on it."""

    layout: tuple[tuple[str, int], ...]
    whole_held: bool = False  # MIG off: held whole by work that is not available
    milli_held: int = 0  # MIG off: milli held by work that is not available
    instances_held: set[int] = field(default_factory=set)  # MIG starts held by work that is not available


def judge_pending(snapshot: Snapshot, policy: Policy) -> tuple[tuple[str, Verdict], ...]:
    """The :class:`Verdict` of every pending production job of ``snapshot``, each judged on its own."""
    return tuple(
        (job.id, judge(snapshot, job, policy)) for job in snapshot.pending if job.priority == Priority.PRODUCTION
    )


def judge(snapshot: Snapshot, job: Job, policy: Policy) -> Verdict:
    """Was a placement for pending ``job`` available in ``snapshot`` (module doc)?"""
    gpus = _gpus(snapshot, job)
    tiers = {str(tier) for tier in allowed_tiers(job)}
    places: dict[str, int] = {}  # per GPU class: replicas its available capacity holds
    whole: dict[str, int] = {}  # per GPU class: its whole GPUs (rule 2)
    for node in snapshot.nodes:
        if not node.schedulable or node.reconfiguring_until is not None or str(node.tier) not in tiers:
            continue
        demand = resolve(job, node.gpu_model, policy)
        if demand is None:
            continue
        gpu_class = gpu_class_of(node.gpu_model)
        on_node = [gpus[(node.name, index)] for index in range(node.gpu_count)]
        places[gpu_class] = places.get(gpu_class, 0) + _places(node, demand, on_node)
        whole[gpu_class] = whole.get(gpu_class, 0) + sum(_whole(gpu) for gpu in on_node)
    roomy = sorted(gpu_class for gpu_class, count in places.items() if count >= job.replicas)
    for gpu_class in roomy:
        if _within_burst(snapshot, job, gpu_class, policy):
            return Verdict(AVOIDABLE, gpu_class)
    if roomy:
        return Verdict(BURST, roomy[0])
    if not places:
        return Verdict(HELD, gpu_class_of(job.gpu_model) if job.gpu_model else ANY)
    closest = min(places, key=lambda gpu_class: (-places[gpu_class], -whole[gpu_class], gpu_class))
    return Verdict(HELD, closest)


def _gpus(snapshot: Snapshot, job: Job) -> dict[tuple[str, int], _Gpu]:
    """Every GPU of the snapshot as ``job`` sees it: what work it may not evict holds there."""
    gpus = {(node.name, i): _Gpu(node.layout(i)) for node in snapshot.nodes for i in range(node.gpu_count)}
    rank = PRIORITY_INDEX[job.priority]
    for running in snapshot.running:
        available = PRIORITY_INDEX[running.job.priority] > rank
        for replica in running.slots + running.moving_from:  # a move under way holds both placements
            for slot in replica:
                gpu = gpus.get((slot.node, slot.gpu))
                if gpu is None:
                    continue
                if slot.mig_profile is not None:
                    if not available and slot.mig_start is not None:
                        gpu.instances_held.add(slot.mig_start)
                elif available:
                    continue  # lower work on a GPU with MIG off: evicted, it leaves the GPU whole
                elif slot.milli >= FULL_GPU_MILLI:
                    gpu.whole_held = True
                else:
                    gpu.milli_held += slot.milli
    return gpus


def _whole(gpu: _Gpu) -> bool:
    """Rule 2: MIG off and held only by available work, or every instance available."""
    if gpu.layout:
        return not gpu.instances_held
    return not gpu.whole_held and gpu.milli_held == 0


def _serves(instance: ProfileSpec, wanted: ProfileSpec) -> bool:
    """Rule 3: an instance of this profile or a larger one."""
    return instance.compute_slices >= wanted.compute_slices and instance.memory_mib >= wanted.memory_mib


def _places(node: Node, demand: Demand, gpus: list[_Gpu]) -> int:
    """Replicas of ``demand`` this node's available capacity holds (rules 2–4)."""
    if demand.kind == DemandKind.WHOLE:
        return sum(_whole(gpu) for gpu in gpus) // max(1, demand.gpus)
    if demand.kind == DemandKind.SHARE:
        return sum(
            1
            for gpu in gpus
            if _whole(gpu)
            or (
                not gpu.layout
                and node.sharing
                and not gpu.whole_held
                and gpu.milli_held + demand.milli <= FULL_GPU_MILLI
            )
        )
    spec = GPU_MODEL_BY_NAME.get(node.gpu_model)
    assert spec is not None and demand.mig_profile is not None  # resolve gives a MIG demand only on a MIG model
    profiles = spec.profiles()
    wanted = profiles[demand.mig_profile]
    total = 0
    for gpu in gpus:
        fitting = sum(
            1 for name, start in gpu.layout if start not in gpu.instances_held and _serves(profiles[name], wanted)
        )
        total += max(1, fitting) if _whole(gpu) else fitting
    return total


def _job_units(job: Job, gpu_model: str, policy: Policy) -> float:
    """GPU-equivalents the job's right-sized replicas would count on ``gpu_model``."""
    demand = resolve(job, gpu_model, policy)
    assert demand is not None
    if demand.kind == DemandKind.WHOLE:
        per_replica = float(demand.gpus)
    elif demand.kind == DemandKind.SHARE:
        per_replica = demand.milli / FULL_GPU_MILLI
    else:
        spec = GPU_MODEL_BY_NAME[gpu_model]
        assert demand.mig_profile is not None
        per_replica = spec.profiles()[demand.mig_profile].compute_slices / COMPUTE_SLICES
    return per_replica * job.replicas


def _limit(team: Team | None, gpu_class: str) -> float | None:
    if team is None:
        return None
    burst = team.burst_for(gpu_class)
    if burst is None:
        return None
    guaranteed = team.guaranteed_for(gpu_class)
    return burst if guaranteed is None else max(burst, guaranteed)


def _within_burst(snapshot: Snapshot, job: Job, gpu_class: str, policy: Policy) -> bool:
    """Rule 6 on ``gpu_class``."""
    team = next((t for t in snapshot.teams if t.name == job.team), None)
    model = next(node.gpu_model for node in snapshot.nodes if gpu_class_of(node.gpu_model) == gpu_class)
    units = _job_units(job, model, policy)
    held_class, held_all = _production_held(snapshot, job, gpu_class)
    for limit, held in ((_limit(team, gpu_class), held_class), (_limit(team, ANY), held_all)):
        if limit is not None and held + units > limit + EPSILON:
            return False
    return True


def _production_held(snapshot: Snapshot, job: Job, gpu_class: str) -> tuple[float, float]:
    """GPU-equivalents the team's work that ``job`` may not evict holds: on ``gpu_class``, and overall."""
    models = {node.name: node.gpu_model for node in snapshot.nodes}
    rank = PRIORITY_INDEX[job.priority]
    on_class = overall = 0.0
    for running in snapshot.running:
        if running.job.team != job.team or PRIORITY_INDEX[running.job.priority] > rank:
            continue
        for slot in (slot for replica in running.slots + running.moving_from for slot in replica):
            model = models.get(slot.node)
            if model is None:
                continue
            share = slot_units(slot, GPU_MODEL_BY_NAME.get(model)) / UNITS_PER_GPU
            overall += share
            on_class += share if gpu_class_of(model) == gpu_class else 0.0
    return on_class, overall
