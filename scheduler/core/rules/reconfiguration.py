"""MIG reconfiguration: new layouts for idle GPUs when pending MIG demand does not match the current ones.

:func:`plan_reconfiguration` is pure: it reads the :class:`ClusterState` and returns :class:`Reconfigure`
operations; the cycle applies them (``state.set_layout``) and records them in the plan. The rules:

1. **Which demand.** ``pending_mig`` holds the MIG demands that placement could not serve this cycle (so
   the free instances that exist do not serve them: the cycle calls this after placement). A job counts
   ``replicas`` instances. Its profile is re-resolved on each candidate GPU model
   (:func:`scheduler.core.sizing.rightsize.resolve`): a memory request may be ``1g.20gb`` on an H100 and
   ``3g.20gb`` on an A100-40GB. Tier routing applies: a node counts only demand its tier may serve.
   ``pending_whole`` (optional) holds whole-GPU demands that could not be placed: idle MIG GPUs may be turned
   back into whole GPUs for them.
2. **Hysteresis.** Only demand unmet for ``policy.reconfiguration_hysteresis_cycles`` consecutive cycles acts.
   ``demand_age`` maps a demand key (:func:`demand_key`: the profile name, or ``"whole"``) to that count,
   kept by the caller; without it the age is derived from the job's wait, ``(now − submitted_at) //
   cycle_s`` cycles (a pending job has been unmet every cycle since it arrived). Younger demand does not
   trigger a change, but when a change happens it shapes the layout (rule 4).
3. **Which GPUs.** Only GPUs with no instance in use are changed (a geometry change destroys every instance on the
   GPU: ``docs/gpu-facts.md``, MIG Manager reconfiguration flow; we never evict for a reconfiguration), on catalog
   MIG-capable models, on nodes that are schedulable, not already reconfiguring, not held for production's change
   next cycle (``ClusterState.held``) and not in ``exclude`` (the cycle
   passes the nodes that took a bind this cycle: the MIG Manager pauses a node's device plugin while it works, same
   section, so a node is either bound to or reconfigured in one plan, never both). MIG-off idle GPUs are converted
   only when no aged whole-GPU demand could use them, and nodes needing fewer conversions are preferred, so MIG
   demand must dominate before whole GPUs are given up. (Measured on B2: letting MIG demand convert idle GPUs that
   waiting whole-GPU gangs could not use yet raised utilization by ~3 points but doubled evictions — the gangs then
   preempted — so whole-GPU demand keeps its idle GPUs.)
4. **Which layout.** GPU by GPU (MIG-on idle GPUs first, then by index), the candidate is every maximal
   layout of the model (:func:`scheduler.core.sizing.layouts.maximal_layouts`, ``+me`` ones only when some demand
   asks for ``+me``), plus "MIG off" when aged whole demand waits. Value, compared in order: aged demand
   served (compute slices; a whole GPU is 7), younger demand served, instances kept from the current
   layout, compute slices used, then the enumeration order. A GPU changes only when its new layout serves
   strictly more aged demand than its current one, and what it serves is taken off the demand before the
   next GPU is considered.
5. **One node per call.** The GPU Operator applies a configuration per node and pauses that node's GPU clients while
   it works (``docs/gpu-facts.md``, MIG Manager reconfiguration flow), so one call changes one node: the node whose
   changes serve the most aged demand, then the fewest MIG-off conversions, a node whose change is ready at once
   (rule 6) before one that relabels, the fewest GPUs changed, and the node name. The cycle may call again for the
   demand still unserved, up to :func:`nodes_per_cycle` relabelled nodes a cycle (one per :data:`NODES_PER_CHANGE`
   MIG-capable ready nodes that relabel, at least 1, at most :data:`MAX_NODES_PER_CYCLE`): a fleet of 100+ nodes
   follows a demand shift in a few cycles, while the churn a wrong guess can cause stays bounded (with the
   hysteresis of rule 2) and most of the fleet keeps serving. A node in a DRA driver's dynamic MIG
   (:class:`~scheduler.core.model.vocabulary.ReconfigurationMode`) is outside that budget: nothing there is drained
   or paused, so the cycle calls again for it as long as demand is left (``modes`` limits a call to such nodes once
   the budget is spent).
6. Every new layout is checked with :func:`scheduler.core.gpus.catalog.validate_layout`; ``ready_at`` is
   ``now + reconfigure_s(node)`` (:func:`reconfigure_s`): the policy's ``mig_reconfigure_s`` on a node that
   relabels, at once (:data:`DYNAMIC_READY_S`) on a dynamic-MIG node, where the change is only the layout
   Microcosm keeps and each instance is made when its claim is prepared. On a node whose GPUs cannot change MIG mode
   without a reset (``DYNAMIC_FIXED_MODE``: an A100 under dynamic MIG) only MIG-enabled GPUs change, never to MIG off.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import final

from scheduler.core.gpus.catalog import COMPUTE_SLICES, GPU_MODEL_BY_NAME, validate_layout
from scheduler.core.model.cluster_state import ClusterState, Gpu
from scheduler.core.model.demand import Demand, DemandKind
from scheduler.core.model.plan import Reconfigure
from scheduler.core.model.policy import Policy
from scheduler.core.model.shape import sizing_shape
from scheduler.core.model.snapshot import Job, MigLayout, Node
from scheduler.core.model.vocabulary import ReconfigurationMode
from scheduler.core.rules.tiers import allowed_tiers
from scheduler.core.sizing.layouts import maximal_layouts
from scheduler.core.sizing.rightsize import resolve

WHOLE_KEY = "whole"
# A dynamic-MIG node's change is ready at once. The NVIDIA DRA driver makes the MIG instance when the claim that
# allocates it is prepared, as the kubelet starts the pod (kubernetes-sigs/dra-driver-nvidia-gpu
# cmd/gpu-kubelet-plugin/device_state.go ``prepareDevices`` → nvlib.go ``createMigDevice``, seconds): the bind need
# not wait for it; the pod's start does, as it waits for its image.
DYNAMIC_READY_S = 0.0
NODES_PER_CHANGE = 8  # one node may change per cycle for every 8 MIG-capable ready nodes (rule 5)
MAX_NODES_PER_CYCLE = 16
_MIG_OFF: MigLayout = ()

Pending = Sequence[tuple[Job, Demand]]


# (GPU model, capacity tier, layouts of the idle GPUs it may change in order, how it changes them)
IdleKey = tuple[str, str, tuple[MigLayout, ...], ReconfigurationMode]


def idle_order(gpus: Iterable[Gpu], mode: ReconfigurationMode = ReconfigurationMode.RELABEL) -> list[Gpu]:
    """A node's idle GPUs that a reconfiguration in ``mode`` may change, in the order it considers them (rule 4):
    MIG-on first (reconfiguring them gives up nothing), then by index. A GPU whose MIG mode cannot change (rule 6)
    is left out when MIG is off."""
    fixed = mode is ReconfigurationMode.DYNAMIC_FIXED_MODE
    return sorted(
        (gpu for gpu in gpus if gpu.idle and (gpu.layout or not fixed)), key=lambda gpu: (not gpu.layout, gpu.index)
    )


def idle_key(state: ClusterState, name: str) -> IdleKey | None:
    """Node ``name``'s idle class — all that reconfiguration judges a node by besides its name: its GPU model,
    capacity tier, the layouts of the idle GPUs it may change in :func:`idle_order` and how it changes them — or
    None when it has no such GPU or its model cannot do MIG. Readiness is the caller's to check."""
    node = state.nodes[name]
    spec = GPU_MODEL_BY_NAME.get(node.gpu_model)
    if spec is None or not spec.mig_capable:
        return None
    layouts = tuple(gpu.layout for gpu in idle_order(state.node_gpus(name), node.reconfiguration))
    return (node.gpu_model, str(node.tier), layouts, node.reconfiguration) if layouts else None


def reconfigure_s(node: Node, policy: Policy) -> float:
    """How long after it is planned a reconfiguration of ``node`` is ready (rule 6)."""
    return policy.mig_reconfigure_s if node.reconfiguration is ReconfigurationMode.RELABEL else DYNAMIC_READY_S


def demand_key(demand: Demand) -> str:
    """The key ``demand_age`` is counted by: the MIG profile's name, or ``"whole"`` for whole GPUs."""
    if demand.kind == DemandKind.MIG and demand.mig_profile is not None:
        return demand.mig_profile
    return WHOLE_KEY


@final
@dataclass(frozen=True, slots=True)
class _Need:
    """Demand one node may serve: instances per profile (aged and younger) and aged whole GPUs."""

    aged: tuple[tuple[str, int], ...]
    young: tuple[tuple[str, int], ...]
    whole_gpus: int

    def __init__(self, aged: tuple[tuple[str, int], ...], young: tuple[tuple[str, int], ...], whole_gpus: int) -> None:
        object.__setattr__(self, "aged", aged)
        object.__setattr__(self, "young", young)
        object.__setattr__(self, "whole_gpus", whole_gpus)

    def __eq__(self, other: object) -> bool:
        if type(other) is not _Need:  # final: the generated method's check, other.__class__ is self.__class__
            return NotImplemented
        return (self.aged, self.young, self.whole_gpus) == (other.aged, other.young, other.whole_gpus)

    def __hash__(self) -> int:
        return hash((self.aged, self.young, self.whole_gpus))

    @property
    def wants_me(self) -> bool:
        return any(name.endswith("+me") for name, _ in self.aged + self.young)


def plan_reconfiguration(
    state: ClusterState,
    pending_mig: Pending,
    policy: Policy,
    now: float,
    demand_age: Mapping[str, int] | None = None,
    pending_whole: Pending = (),
    exclude: Collection[str] = (),
    modes: Collection[ReconfigurationMode] | None = None,
) -> list[Reconfigure]:
    """The reconfigurations of this cycle: on at most one node, only idle GPUs, never an illegal layout; ``modes``
    (None: any) limits the nodes to those that change their layout so (rule 5).

    Does not mutate ``state``. Returns the operations sorted by GPU index (module docstring for the rules).
    """
    if not policy.mig:
        return []
    aged_mig, young_mig = _split(pending_mig, DemandKind.MIG, policy, now, demand_age)
    aged_whole, _ = _split(pending_whole, DemandKind.WHOLE, policy, now, demand_age)
    if not aged_mig and not aged_whole:
        return []
    shapes = (_by_shape(aged_mig), _by_shape(young_mig), _by_shape(aged_whole))
    needs: dict[tuple[str, str], _Need] = {}
    best: tuple[tuple[int, int, bool, int, str], IdleKey] | None = None
    # Nodes of one idle class differ only by name (:func:`idle_key`): the first one not excluded stands for it.
    names, classes = _idle_classes(state, now)
    for key, ordinals in classes.items():
        model, tier, layouts, mode = key
        if modes is not None and mode not in modes:
            continue
        group = (model, tier)
        if group not in needs:
            needs[group] = _need(model, tier, *shapes, policy)
        need = needs[group]
        if not need.aged and not need.whole_gpus:
            continue
        served, changes = _plan_node(model, layouts, _capped(need, len(layouts)), _may_turn_off(mode))
        if served <= 0:
            continue
        name = next((names[i] for i in ordinals if names[i] not in exclude), None)
        if name is None:
            continue
        conversions = sum(1 for i, new in changes if not layouts[i] and new)
        score = (-served, conversions, mode is ReconfigurationMode.RELABEL, len(changes), name)
        if best is None or score < best[0]:
            best = (score, key)
    if best is None:
        return []
    name, (model, tier, layouts, mode) = best[0][4], best[1]
    order = idle_order(state.node_gpus(name), mode)
    _, changes = _plan_node(model, layouts, _capped(needs[(model, tier)], len(layouts)), _may_turn_off(mode))
    return sorted((_reconfigure(order[i], new, now, policy) for i, new in changes), key=lambda op: op.gpu)


def _may_turn_off(mode: ReconfigurationMode) -> bool:
    """May a reconfiguration in ``mode`` turn a MIG-enabled GPU back into a whole GPU (rule 6)?"""
    return mode is not ReconfigurationMode.DYNAMIC_FIXED_MODE


def _idle_classes(state: ClusterState, now: float) -> tuple[list[str], dict[IdleKey, list[int]]]:
    """The idle classes (:func:`idle_key`) of the nodes a reconfiguration may use at ``now`` (rule 3), each a list
    of ordinals into the returned node names, in name order: kept by the capacity index of the state when it is
    the index for ``now`` and keeps them (the cycle's speed-ups give it an
    :class:`~scheduler.core.placement.index.IdleTracker`), else found by the plain scan (:func:`_scanned_classes`)."""
    index = getattr(state, "index", None)
    if index is not None and index.now == now and index.idle is not None:
        index.flush()
        return index.node_names, index.idle.classes
    return _scanned_classes(state, now)


def _scanned_classes(state: ClusterState, now: float) -> tuple[list[str], dict[IdleKey, list[int]]]:
    """:func:`_idle_classes` by a scan of every node."""
    names = sorted(state.nodes)
    classes: dict[IdleKey, list[int]] = {}
    for ordinal, name in enumerate(names):
        node = state.nodes[name]
        ready = node.reconfiguring_until is None or node.reconfiguring_until <= now
        if node.schedulable and ready and name not in state.held:
            key = idle_key(state, name)
            if key is not None:
                classes.setdefault(key, []).append(ordinal)
    return names, classes


def nodes_per_cycle(state: ClusterState, now: float) -> int:
    """How many nodes that relabel may be reconfigured this cycle (rule 5)."""
    ready = 0
    for node in state.nodes.values():
        spec = GPU_MODEL_BY_NAME.get(node.gpu_model)
        busy = node.reconfiguring_until is not None and node.reconfiguring_until > now
        relabels = node.reconfiguration is ReconfigurationMode.RELABEL
        if spec is not None and spec.mig_capable and node.schedulable and not busy and relabels:
            ready += 1
    return max(1, min(MAX_NODES_PER_CYCLE, -(-ready // NODES_PER_CHANGE)))


def _split(
    pending: Pending, kind: DemandKind, policy: Policy, now: float, demand_age: Mapping[str, int] | None
) -> tuple[list[Job], list[Job]]:
    """Jobs of ``pending`` with a ``kind`` demand, split into aged (past the hysteresis) and younger."""
    aged: list[Job] = []
    young: list[Job] = []
    for job, demand in pending:
        if demand.kind != kind:
            continue
        if demand_age is not None:
            age = demand_age.get(demand_key(demand), 0)
        else:
            age = int((now - job.submitted_at) // policy.cycle_s) if policy.cycle_s > 0 else 0
        (aged if age >= policy.reconfiguration_hysteresis_cycles else young).append(job)
    return aged, young


def _by_shape(jobs: Iterable[Job]) -> list[tuple[Job, int]]:
    """One representative job per shape (what right-sizing and tier routing read) with the replicas of all:
    10,000 pending jobs of a few shapes cost a few resolutions per node group."""
    replicas: dict[tuple[object, ...], int] = {}
    first: dict[tuple[object, ...], Job] = {}
    for job in jobs:
        shape = sizing_shape(job)
        replicas[shape] = replicas.get(shape, 0) + job.replicas
        first.setdefault(shape, job)
    return [(first[shape], count) for shape, count in replicas.items()]


def _need(
    model: str,
    tier: str,
    aged_mig: list[tuple[Job, int]],
    young_mig: list[tuple[Job, int]],
    aged_whole: list[tuple[Job, int]],
    policy: Policy,
) -> _Need:
    def instances(shapes: Iterable[tuple[Job, int]]) -> tuple[tuple[str, int], ...]:
        counts: Counter[str] = Counter()
        for job, replicas in shapes:
            demand = _on(job, model, tier, policy)
            if demand is not None and demand.kind == DemandKind.MIG and demand.mig_profile is not None:
                counts[demand.mig_profile] += replicas
        return tuple(sorted(counts.items()))

    whole = 0
    for job, replicas in aged_whole:
        demand = _on(job, model, tier, policy)
        if demand is not None and demand.kind == DemandKind.WHOLE:
            whole += demand.gpus * replicas
    return _Need(instances(aged_mig), instances(young_mig), whole)


def _on(job: Job, model: str, tier: str, policy: Policy) -> Demand | None:
    """The job's demand on ``model`` if a node of ``tier`` may serve it."""
    if tier not in {t.value for t in allowed_tiers(job)}:
        return None
    return resolve(job, model, policy)


def _capped(need: _Need, gpus: int) -> _Need:
    """``need`` as ``gpus`` idle GPUs see it: a GPU holds at most :data:`COMPUTE_SLICES` instances, so demand
    beyond ``gpus`` × that many instances of a profile (or ``gpus`` whole GPUs) changes no choice of
    :func:`_plan_node`; capping it lets nodes facing different backlogs share its cached answer."""
    most = COMPUTE_SLICES * gpus
    aged = tuple((name, min(count, most)) for name, count in need.aged)
    young = tuple((name, min(count, most)) for name, count in need.young)
    return _Need(aged, young, min(need.whole_gpus, gpus))


@dataclass(frozen=True, slots=True)
class _Candidate:
    rank: int  # position in the enumeration order
    layout: MigLayout
    counts: tuple[tuple[str, int, int], ...]  # (profile, instances, compute slices each)
    used: int  # compute slices the layout holds
    instances: dict[str, int] = field(compare=False)  # profile → instances: the sums read only profiles wanted


def _serves(candidate: _Candidate, wanted: tuple[tuple[str, int, int], ...]) -> int:
    """Compute slices of ``wanted`` (profile, instances, compute slices each) the candidate's layout provides."""
    instances = candidate.instances
    served = 0
    for name, n, slices in wanted:
        held = instances.get(name, 0)
        served += (held if held < n else n) * slices
    return served


@lru_cache(maxsize=64)  # a fact of the model's MIG geometry
def _candidates(model: str, with_me: bool) -> tuple[_Candidate, ...]:
    profiles = GPU_MODEL_BY_NAME[model].profiles()
    found = []
    for rank, layout in enumerate(maximal_layouts(model, with_me=with_me)):
        counts = Counter(name for name, _ in layout)
        per = tuple((name, n, profiles[name].compute_slices) for name, n in sorted(counts.items()))
        found.append(_Candidate(rank, layout, per, sum(n * c for _, n, c in per), dict(counts)))
    return tuple(found)


def _served(counts: Iterable[tuple[str, int, int]], wanted: Counter[str]) -> int:
    """Compute slices of ``wanted`` instances that a layout with ``counts`` provides."""
    return sum(min(n, wanted[name]) * slices for name, n, slices in counts)


def _counts(model: str, layout: MigLayout) -> tuple[tuple[str, int, int], ...]:
    profiles = GPU_MODEL_BY_NAME[model].profiles()
    return tuple((name, n, profiles[name].compute_slices) for name, n in Counter(n for n, _ in layout).items())


@lru_cache(maxsize=4096)  # pure: its answer depends on its arguments alone
def _plan_node(
    model: str, layouts: tuple[MigLayout, ...], need: _Need, may_turn_off: bool = True
) -> tuple[int, tuple[tuple[int, MigLayout], ...]]:
    """Greedy per GPU (module rule 4): aged compute slices served and ``(position, new layout)`` changes.

    ``layouts`` are the current layouts of the node's idle GPUs in the order they are considered; ``may_turn_off``
    False: no MIG-enabled GPU becomes whole (rule 6). Cached: nodes with the same idle GPUs and the same demand get
    the same answer.
    """
    aged: Counter[str] = Counter(dict(need.aged))
    young: Counter[str] = Counter(dict(need.young))
    whole = need.whole_gpus if may_turn_off else 0  # rule 6: no GPU of such a node turns whole
    served_total = 0
    changes: list[tuple[int, MigLayout]] = []
    for position, current in enumerate(layouts):
        if whole <= 0 and not any(n > 0 for n in aged.values()):
            break
        # Aged demand the GPU serves as it is: a MIG-off GPU serves aged whole demand, if any.
        current_aged = _served(_counts(model, current), aged) if current else COMPUTE_SLICES * (whole > 0)
        best_value, best_layout = _best_layout(model, need.wants_me, current, _frozen(aged), _frozen(young))
        if whole > 0 and best_value[0] < COMPUTE_SLICES:
            # Turning the GPU back into a whole GPU serves 7 aged slices; a MIG layout must beat that.
            best_value, best_layout = (COMPUTE_SLICES,), _MIG_OFF
        if best_layout == current or best_value[0] <= current_aged:
            continue
        if best_layout:
            for name, n, slices in _counts(model, best_layout):
                taken = min(n, aged[name])
                aged[name] -= taken
                served_total += taken * slices
                young[name] -= min(n - taken, young[name])
        else:
            served_total += COMPUTE_SLICES
            whole -= 1
        changes.append((position, best_layout))
    return served_total, tuple(changes)


def _frozen(counts: Counter[str]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted((name, n) for name, n in counts.items() if n > 0))


@lru_cache(maxsize=16384)  # pure: its answer depends on its arguments alone
def _best_layout(
    model: str, with_me: bool, current: MigLayout, aged: tuple[tuple[str, int], ...], young: tuple[tuple[str, int], ...]
) -> tuple[tuple[int, ...], MigLayout]:
    """Rule 4's value and layout for one GPU now laid out as ``current``, given the demand still unserved:
    the best candidate by (aged served, younger served, instances kept, slices used, enumeration order).
    Cached: the same GPU and the same remaining demand recur across the nodes of a class and across calls."""
    profiles = GPU_MODEL_BY_NAME[model].profiles()
    # Only the profiles wanted count (a profile the model lacks is served by no candidate).
    wanted_aged = tuple((name, n, profiles[name].compute_slices) for name, n in aged if name in profiles)
    wanted_young = tuple((name, n, profiles[name].compute_slices) for name, n in young if name in profiles)
    # Lexicographic: first the candidates that serve the most aged demand, then the rest of the value on those.
    most, tops = -1, []
    for candidate in _candidates(model, with_me):
        served = _serves(candidate, wanted_aged) if wanted_aged else 0
        if served > most:
            most, tops = served, [candidate]
        elif served == most:
            tops.append(candidate)
    current_pairs = set(current)
    return max(
        (
            (
                most,
                _serves(candidate, wanted_young),
                len(current_pairs.intersection(candidate.layout)),
                candidate.used,
                -candidate.rank,
            ),
            candidate.layout,
        )
        for candidate in tops
    )


def _reconfigure(gpu: Gpu, new: MigLayout, now: float, policy: Policy) -> Reconfigure:
    checked = tuple(validate_layout(gpu.node.gpu_model, new))  # never an illegal layout, whatever happened above
    return Reconfigure(
        node=gpu.node.name, gpu=gpu.index, old=gpu.layout, new=checked, ready_at=now + reconfigure_s(gpu.node, policy)
    )
