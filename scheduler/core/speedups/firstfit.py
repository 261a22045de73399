"""Where a one-replica job first fits as a preemption pool is removed, found without touching the state.

A preemption search (:mod:`scheduler.core.decisions.preemption`) looks for the shortest prefix of its candidate pool
(victim-preference order) after whose removal ``try_place()`` succeeds. For a job of one replica that states
no CPU or host memory that is mostly a question about nodes: ``find_slots`` finds a placement exactly when
some node of the job's option groups has a free slot of the job's demand there (whole GPUs, a free instance
of its profile — or, sized from memory, a larger one on a GPU in use when its own profile is free nowhere — or
a share of a time-sliced GPU), and each node's free slots change only with the victims on it.
:func:`first_fit` replays the pool's removals on small copies of the nodes they touch and reports the first
position at which one node can take the job. Admission is the other half: removing victims only lowers the
team's usage, so when every placement that node could give (its GPU class, the units of each holding that fits
there) is admitted at the usage *before* any removal, it is admitted in every state the search passes
through, and the trial succeeds exactly where the node fits; otherwise :func:`first_fit` gives no answer.

Its answers are meant to be checked, not trusted: the node model may see a fit a little early (it ignores
that a larger MIG instance is taken only when no instance of the job's own profile is free anywhere), never
late. So the search removes the victims :class:`FirstFit` names and runs the real trial; only if that
succeeds does it use the answer, else it searches the usual way. "Never fits" (``length`` 0) is exact: the
model never misses a fit.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence

from scheduler.core.decisions.preemption import FirstFit
from scheduler.core.gpus.catalog import GPU_MODEL_BY_NAME
from scheduler.core.gpus.units import FULL_GPU_MILLI, UNITS_PER_GPU
from scheduler.core.model.cluster_state import ClusterState, Gpu, gpu_class_of
from scheduler.core.model.demand import Demand, DemandKind
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Slot, Slots
from scheduler.core.placement.holdings import Holding, holding
from scheduler.core.placement.index import CapacityIndex, Group
from scheduler.core.placement.options import options_for

NEVER = FirstFit(0, ())


class _Gpu:
    """A GPU's holders, copied so that removals can be replayed on them."""

    __slots__ = ("instances", "layout", "milli", "whole")

    def __init__(self, layout: tuple[tuple[str, int], ...], whole: bool, instances: set[int], milli: int) -> None:
        self.layout = layout
        self.whole = whole
        self.instances = instances
        self.milli = milli


class _Node:
    """One node's GPUs and the job's demand there; :meth:`fits` asks the question of one GPU or all."""

    def __init__(self, state: ClusterState, name: str, demand: Demand) -> None:
        self.demand = demand
        self.gpu_class = gpu_class_of(state.nodes[name].gpu_model)
        self.sharing = state.nodes[name].sharing
        self.gpus = {
            gpu.index: _Gpu(gpu.layout, gpu.whole is not None, set(gpu.instances), sum(gpu.shares.values()))
            for gpu in state.node_gpus(name)
        }
        self.whole_free = sum(1 for gpu in self.gpus.values() if self._whole_free(gpu))
        spec = GPU_MODEL_BY_NAME.get(state.nodes[name].gpu_model)
        self.profiles = spec.profiles() if spec is not None else {}

    @staticmethod
    def _whole_free(gpu: _Gpu) -> bool:
        return not gpu.layout and not gpu.whole and not gpu.milli

    def remove(self, slots: Slots, node: str) -> list[int]:
        """Free the slots on this node (named ``node``); return the GPU indices touched."""
        touched = []
        for replica in slots:
            for slot in replica:
                if slot.node != node:
                    continue
                gpu = self.gpus[slot.gpu]
                was_free = self._whole_free(gpu)
                if slot.mig_profile is not None:
                    assert slot.mig_start is not None  # a MIG slot always names its instance's start
                    gpu.instances.discard(slot.mig_start)
                elif slot.milli >= FULL_GPU_MILLI:
                    gpu.whole = False
                else:
                    gpu.milli -= slot.milli
                self.whole_free += self._whole_free(gpu) - was_free
                touched.append(slot.gpu)
        return touched

    def fits(self, indices: Sequence[int] | None = None) -> set[tuple[str, int]]:
        """What one replica could hold on this node now, as (GPU class, units) — empty when it does not fit.
        Only GPUs ``indices`` are looked at for the holdings decided per GPU (the others did not change)."""
        demand = self.demand
        if demand.kind == DemandKind.WHOLE:
            return {(self.gpu_class, demand.gpus * UNITS_PER_GPU)} if self.whole_free >= demand.gpus else set()
        gpus = list(self.gpus.values()) if indices is None else [self.gpus[i] for i in indices]
        if demand.kind == DemandKind.SHARE:
            fits = self.sharing and any(
                not gpu.layout and not gpu.whole and FULL_GPU_MILLI - gpu.milli >= demand.milli for gpu in gpus
            )
            return {(self.gpu_class, demand.milli * (UNITS_PER_GPU // FULL_GPU_MILLI))} if fits else set()
        profiles = self.profiles
        if any(self._free(gpu, demand.mig_profile or "") for gpu in gpus):
            return {(self.gpu_class, profiles[demand.mig_profile or ""].compute_slices * FULL_GPU_MILLI)}
        need = demand.memory_mib
        if need is None:
            return set()  # an explicit profile takes only itself
        # A larger instance that holds the memory, on a GPU in use (an idle one is left for reconfiguration).
        return {
            (self.gpu_class, profiles[name].compute_slices * FULL_GPU_MILLI)
            for gpu in gpus
            if gpu.instances
            for name, start in gpu.layout
            if start not in gpu.instances and not profiles[name].media_engines and profiles[name].memory_mib >= need
        }

    @staticmethod
    def _free(gpu: _Gpu, profile: str) -> bool:
        return any(name == profile and start not in gpu.instances for name, start in gpu.layout)


def first_fit(
    state: ClusterState,
    index: CapacityIndex,
    job: Job,
    policy: Policy,
    pool: Sequence[tuple[str, Slots]],
    admitted: Callable[[set[tuple[str, int]]], bool],
    demands: Mapping[Group, Demand] | None = None,
) -> FirstFit | None:
    """Replay the removal of ``pool`` — (job id, slots) of each candidate, in preference order — on the nodes
    it touches, and report where ``job`` first fits (module doc); the caller has checked that it fits nowhere
    before any removal (``find_slots`` returned None). ``admitted(holdings)`` says whether the
    team's quota admits every (GPU class, units) of ``holdings`` now. None when the answer would need more
    than a node model: the job fits somewhere before any removal, two nodes fit at the same position, what the
    first node could give is not all admitted, or a victim on that node also holds another node. ``index``
    must be current (flushed). ``demands`` (group → the job's demand there) narrows the question to some of
    the job's options; by default all of them."""
    if demands is None:
        demands = {option.group: option.demand for option in options_for(index, job, policy)}
    group_of = index.group_of
    nodes: dict[str, _Node] = {}
    for position, (_, slots) in enumerate(pool):
        fitting: list[tuple[str, set[tuple[str, int]]]] = []
        for name in _nodes_of(slots):
            group = group_of.get(name)
            demand = demands.get(group) if group is not None else None
            if demand is None:
                continue  # a node the job may not use now: nothing there matters
            node = nodes.get(name)
            if node is None:
                node = nodes[name] = _Node(state, name, demand)
                if node.fits():
                    return None  # the model sees a fit the index does not: no answer
            holdings = node.fits(node.remove(slots, name))
            if holdings:
                fitting.append((name, holdings))
        if len(fitting) > 1:
            return None
        if fitting:
            name, holdings = fitting[0]
            return _on_node(pool, position + 1, name) if admitted(holdings) else None
    return NEVER


def _nodes_of(slots: Slots) -> list[str]:
    return list(dict.fromkeys(slot.node for replica in slots for slot in replica))


def _on_node(pool: Sequence[tuple[str, Slots]], length: int, name: str) -> FirstFit | None:
    victims = []
    for position in range(length):
        nodes = _nodes_of(pool[position][1])
        if name in nodes:
            if len(nodes) > 1:
                return None
            victims.append(position)
    return FirstFit(length, tuple(victims))


def room_added(
    state: ClusterState,
    index: CapacityIndex,
    job: Job,
    policy: Policy,
    pool: Sequence[tuple[str, Slots]],
    allowed: Collection[Holding],
    offered: Collection[Holding],
) -> bool:
    """Could removing some of ``pool``'s victims — any of them, in any combination — change whether ``job``
    (one replica, no host needs) finds a placement of an ``allowed`` holding? ``offered``: the holdings some
    option offers a slot of its own holding for now; such a slot stays free whatever the search removes or puts
    back, so more of them change nothing. Only the GPUs the victims hold can change, so False (nothing can)
    when, on every such GPU in the job's option groups, with all of them removed, no own holding outside
    ``offered`` fits (whole GPUs: counted with the node's GPUs free now) and no larger MIG instance of an
    allowed holding is free — nor was one before (a larger instance is taken only on a GPU in use, so even
    freeing its neighbours can take one away)."""
    freed: dict[str, dict[int, list[Slot]]] = {}  # node → GPU → the victims' slots there
    for _, slots in pool:
        for replica in slots:
            for slot in replica:
                freed.setdefault(slot.node, {}).setdefault(slot.gpu, []).append(slot)
    by_group = {option.group: option for option in options_for(index, job, policy)}
    for name, gpus in freed.items():
        group = index.group_of.get(name)
        option = by_group.get(group) if group is not None else None
        if option is None:
            continue  # a node the job may not use now
        own = holding(option)
        counts = own in allowed and own not in offered
        demand = option.demand
        if demand.kind == DemandKind.WHOLE:
            if counts and _whole_free_after(state, name, gpus) >= demand.gpus:
                return True
            continue
        for number, victim_slots in gpus.items():
            gpu = state.gpus[(name, number)]
            if demand.kind == DemandKind.SHARE:
                if counts and _share_fits_after(gpu, victim_slots, demand.milli):
                    return True
                continue
            after = set(gpu.instances).difference(slot.mig_start for slot in victim_slots)
            profile = demand.mig_profile or ""
            if counts and any(n == profile and start not in after for n, start in gpu.layout):
                return True
            if _larger_free(gpu, demand, allowed, set(gpu.instances)) or _larger_free(gpu, demand, allowed, after):
                return True
    return False


def _whole_free_after(state: ClusterState, name: str, freed: Mapping[int, list[Slot]]) -> int:
    """Whole GPUs free on node ``name`` once the ``freed`` slots (GPU → slots) are gone."""
    gpus = [gpu for gpu in state.node_gpus(name) if not gpu.layout]
    return sum(1 for gpu in gpus if _held_after(gpu, freed.get(gpu.index, ())) == (False, 0))


def _share_fits_after(gpu: Gpu, slots: Sequence[Slot], milli: int) -> bool:
    if gpu.layout or not gpu.node.sharing:
        return False
    whole, used = _held_after(gpu, slots)
    return not whole and FULL_GPU_MILLI - used >= milli


def _held_after(gpu: Gpu, slots: Sequence[Slot]) -> tuple[bool, int]:
    """(held whole, milli shared) on a GPU without MIG once ``slots`` are gone."""
    whole = gpu.whole is not None and not any(slot.milli >= FULL_GPU_MILLI for slot in slots)
    return whole, sum(gpu.shares.values()) - sum(slot.milli for slot in slots if slot.milli < FULL_GPU_MILLI)


def _larger_free(gpu: Gpu, demand: Demand, allowed: Collection[Holding], held: Collection[int]) -> bool:
    """With the instances at ``held`` starts in use, is a larger MIG instance that a demand sized from memory
    could take, of an ``allowed`` holding, free on ``gpu`` (in use or not)?"""
    need = demand.memory_mib
    if need is None or gpu.spec is None:
        return False  # an explicit profile takes only itself (and a GPU with a layout has a spec)
    own = demand.mig_profile or ""
    profiles = gpu.spec.profiles()
    for name, start in gpu.layout:
        spec = profiles[name]
        if name == own or spec.media_engines or spec.memory_mib < need or start in held:
            continue
        if (gpu.gpu_class, spec.compute_slices * FULL_GPU_MILLI) in allowed:
            return True
    return False
