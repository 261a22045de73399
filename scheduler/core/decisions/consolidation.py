"""Consolidation: running production that started on larger capacity than its right size moves to a right-sized slice.

Production inference must start at once, so when no right-sized instance is free it takes larger capacity: an
idle GPU with MIG off or a larger free MIG instance (the steps ``idle_whole_gpu`` and ``fallback`` of
:mod:`scheduler.core.planning.steps`). Left there it would keep a whole GPU for a ``1g.10gb`` service for its
whole life. This module decides, once every pending job has had its turn, which such services *move*
(:class:`~scheduler.core.model.plan.Move`) to their right-sized slice, make-before-break: the new replicas start
while the old ones keep serving, and the old placement is released only once the new replicas are ready — as a
Deployment's rolling update with ``maxSurge: 1, maxUnavailable: 0`` brings a new pod up before it takes an old one
down (kubernetes/kubernetes ``pkg/controller/deployment/rolling.go``). An inference service is restartable by
definition and loses no work; a job opts out with ``consolidate: false`` (``Job.consolidate``).

Contract (:func:`candidates`, :func:`demand`, :func:`plan_moves`; the cycle calls them in that order after every
pending turn, :mod:`scheduler.core.planning.cycle`):

1. **Who.** A running job that is production inference, has not opted out, is not moving already
   (``Running.moving_from`` empty), is placed as the snapshot shows it (not evicted this cycle), and whose
   placement is larger than its right size on the GPU model it runs on — some replica holds more compute slices
   than its right-sized MIG profile, or as many with more memory (:func:`oversized`).
2. **Bounds.** Hysteresis: it has run oversized for at least ``consolidation_hysteresis_cycles`` cycles and has
   not moved in the last ``consolidation_interval_s`` seconds; per job: fewer than ``moves_per_job_per_day`` moves
   in the last 24 hours (``Running.moved_at``); per cycle: at most ``moves_per_cycle`` moves (0 turns
   consolidation off). Candidates are taken in order: the most units they would give back first, then the
   longest running, then the job id.
3. **Where.** A free right-sized placement of every replica (:func:`~scheduler.core.placement.find_slots`: ready
   nodes only, its tiers and GPU model constraint), all in the GPU class it holds now, holding fewer units than
   now (or as many with less memory): once the move completes the team holds less and its quota picture is only
   better. While the move is under way the job holds both placements (``ClusterState.move``), as the cluster
   does.
4. **Never before pending work** — but the way back. Moves are decided after every pending turn and after the
   cycle's reconfigurations, so a move takes only capacity no pending job could take this cycle, and never a node
   a reconfiguration changes. A candidate beyond the fallback's cap (:func:`way_back`: it started oversized, rule
   5) moves *before* the pending turns, within the same bounds (its moves count against ``moves_per_cycle``
   first): the right-sized instance it waits for is the one the reconfiguration made for it, and pending work that
   took it first left it on the larger capacity — measured on B2, services stayed on whole GPUs for the rest of the
   window, and whole-GPU work waited behind them. The move gives back more than it takes (rule 3), and the node it
   moves to takes no reconfiguration this cycle, as a node bound to.
5. **A reconfiguration.** A candidate with no free right-sized placement is demand for its right-sized profile
   (:func:`demand`): the cycle's reconfigurations of idle GPUs count it after the pending demand, aged by the
   time it has run oversized, so the existing reconfiguration hysteresis and node budget bound it. Nothing is
   promised to it: when the new instance is ready, pending work takes it first if it wants it. Which candidates
   ask (:func:`asking`): with the policy's ``consolidation_reconfigures`` (off by default: on B2, asked for every
   oversized service, it closed nodes for a change's minutes and production waited for them,
   docs/benchmarks/consolidation.md), every one; without it, only those that hold more than twice their right
   size (:func:`beyond_fallback`, the **way back**): more than production's fallback ever gives, so they started
   oversized rather than wait for a reconfiguration (the planning step ``oversize``, which also makes the change
   it would have waited for when it starts them). A service the fallback put on at most twice its size waits
   for a slice to free as before. (The criterion reads the placement, not how it was made: a memory-sized
   service that took a free instance of more than twice its size on a partly used GPU (``find_slots``' larger
   instances) asks too — it is as far from its right size.) Without this demand nothing asked for such a
   service's slice once the change it would have waited for was not made: on B2 the fleet filled with services
   on whole GPUs (docs/benchmarks/cost.md, B4 notes).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

from scheduler.core.gpus.catalog import GPU_MODEL_BY_NAME
from scheduler.core.gpus.units import UNITS_PER_GPU, UNITS_PER_SLICE
from scheduler.core.model.cluster_state import ClusterState, slot_units
from scheduler.core.model.demand import Demand, DemandKind
from scheduler.core.model.plan import Move
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Running, Slot, Slots
from scheduler.core.model.vocabulary import JobKind, Priority
from scheduler.core.placement import find_slots
from scheduler.core.placement.fallback import FALLBACK_FACTOR
from scheduler.core.placement.index import CapacityIndex
from scheduler.core.placement.options import options_for
from scheduler.core.sizing.rightsize import resolve

DAY_S = 86400.0  # the per-job budget's window


@dataclass(frozen=True, slots=True)
class Candidate:
    """A running job that may move this cycle (contract, rules 1 and 2): what it holds now, per GPU class and as
    (units, memory) per replica."""

    running: Running
    gpu_class: str
    units: int  # held now, all replicas
    memory_mib: int  # held now, all replicas

    @property
    def job(self) -> Job:
        return self.running.job


def restartable(job: Job) -> bool:
    """Production inference: a service that may be started again elsewhere (a move); every other job stays."""
    return job.priority == Priority.PRODUCTION and job.kind == JobKind.INFERENCE


def held(state: ClusterState, slot: Slot) -> tuple[int, int]:
    """(units, memory in MiB) one slot holds: a MIG instance its compute slices and real memory, a whole GPU the
    GPU, a share its part of both."""
    gpu = state.gpus[(slot.node, slot.gpu)]
    units = slot_units(slot, gpu.spec)
    if gpu.spec is None:
        return units, 0
    if slot.mig_profile is not None:
        return units, gpu.spec.profiles()[slot.mig_profile].memory_mib
    return units, gpu.spec.memory_mib * units // UNITS_PER_GPU


def _sizes(state: ClusterState, running: Running, policy: Policy) -> Iterator[tuple[int, int, int, int]]:
    """Per replica of ``running`` whose right size on the GPU model it runs on is a MIG profile: (units held,
    memory held, the profile's units, the profile's memory). A replica whose right size there is not a MIG
    instance (whole GPUs, a share, a model outside the catalog) yields nothing."""
    for replica in running.slots:
        model = state.nodes[replica[0].node].gpu_model
        spec = GPU_MODEL_BY_NAME.get(model)
        demand = resolve(running.job, model, policy)
        if spec is None or demand is None or demand.kind != DemandKind.MIG or demand.mig_profile is None:
            continue
        profile = spec.profiles()[demand.mig_profile]
        units = sum(held(state, slot)[0] for slot in replica)
        memory = sum(held(state, slot)[1] for slot in replica)
        yield units, memory, profile.compute_slices * UNITS_PER_SLICE, profile.memory_mib


def oversized(state: ClusterState, running: Running, policy: Policy) -> bool:
    """Does some replica of ``running`` hold more than its right-sized MIG profile on the GPU model it runs on
    (more compute slices, or as many with more memory)? A job whose right size is not a MIG instance there
    (whole GPUs, a share, a model outside the catalog) never is."""
    return any(u > ru or (u == ru and m > rm) for u, m, ru, rm in _sizes(state, running, policy))


def beyond_fallback(state: ClusterState, running: Running, policy: Policy) -> bool:
    """Rule 5's way back: does some replica of ``running`` hold more than twice the compute slices of its
    right-sized profile — more than production's fallback gives (:mod:`scheduler.core.placement.fallback`, rule
    3), so it started oversized rather than wait for a reconfiguration (the planning step ``oversize``)?"""
    return any(u > FALLBACK_FACTOR * ru for u, _, ru, _ in _sizes(state, running, policy))


def way_back(state: ClusterState, found: list[Candidate], policy: Policy) -> list[Candidate]:
    """The candidates beyond the fallback's cap (:func:`beyond_fallback`), in order: those that move before the
    pending turns (rule 4) and whose right-sized demand counts in the reconfigurations (rule 5)."""
    return [candidate for candidate in found if beyond_fallback(state, candidate.running, policy)]


def asking(state: ClusterState, found: list[Candidate], policy: Policy) -> list[Candidate]:
    """Rule 5: the candidates whose right-sized demand counts in the cycle's reconfigurations — every one with
    the policy's ``consolidation_reconfigures``, else those beyond the fallback's cap (:func:`way_back`)."""
    return found if policy.consolidation_reconfigures else way_back(state, found, policy)


def _within_bounds(running: Running, policy: Policy, now: float) -> bool:
    """Rule 2's hysteresis and per-job budget."""
    if now - running.started_at < policy.consolidation_hysteresis_cycles * policy.cycle_s:
        return False
    recent = [t for t in running.moved_at if now - t < DAY_S]
    if len(recent) >= policy.moves_per_job_per_day:
        return False
    return not recent or now - max(recent) >= policy.consolidation_interval_s


def candidates(state: ClusterState, policy: Policy, now: float) -> list[Candidate]:
    """The running jobs that may move this cycle (contract, rules 1 and 2), in the order they are considered."""
    if policy.moves_per_cycle <= 0 or not policy.mig:
        return []
    found: list[tuple[tuple[int, float, str], Candidate]] = []
    for job_id in sorted(state.running):
        running = state.running[job_id]
        job = running.job
        if not restartable(job) or not job.consolidate or running.moving_from:
            continue
        if state.placed.get(job_id) != running.slots or not _within_bounds(running, policy, now):
            continue  # evicted this cycle (or placed otherwise): nothing to move
        if not oversized(state, running, policy):
            continue
        first = running.slots[0][0]  # a job's replicas are all in one GPU class (placement never spans classes)
        units, memory = _holding(state, running.slots)
        candidate = Candidate(running, state.gpus[(first.node, first.gpu)].gpu_class, units, memory)
        found.append(((-units, running.started_at, job_id), candidate))
    found.sort(key=lambda item: item[0])
    return [candidate for _, candidate in found]


def _holding(state: ClusterState, slots: Slots) -> tuple[int, int]:
    units = memory = 0
    for replica in slots:
        for slot in replica:
            u, m = held(state, slot)
            units += u
            memory += m
    return units, memory


def _smaller(state: ClusterState, candidate: Candidate, slots: Slots) -> bool:
    """Rule 3: every new slot in the class held now, and the new placement holds less than the old one."""
    if any(state.gpus[(s.node, s.gpu)].gpu_class != candidate.gpu_class for replica in slots for s in replica):
        return False
    units, memory = _holding(state, slots)
    return units < candidate.units or (units == candidate.units and memory < candidate.memory_mib)


def target(state: ClusterState, candidate: Candidate, policy: Policy) -> Slots | None:
    """A free right-sized placement the candidate may move to now (rule 3), or None."""
    slots = find_slots(state, candidate.job, policy)
    return slots if slots is not None and _smaller(state, candidate, slots) else None


def demand(
    state: ClusterState, index: CapacityIndex, found: list[Candidate], policy: Policy
) -> list[tuple[Job, Demand]]:
    """Rule 5: the right-sized MIG demand of the candidates that have no free right-sized placement now, each job
    dated from when it started running oversized (its ``submitted_at`` is what the reconfiguration hysteresis
    ages demand by)."""
    wanted: list[tuple[Job, Demand]] = []
    for candidate in found:
        if target(state, candidate, policy) is not None:
            continue
        job = candidate.job
        option = next((o for o in options_for(index, job, policy) if o.demand.kind == DemandKind.MIG), None)
        if option is not None:
            wanted.append((replace(job, submitted_at=candidate.running.started_at), option.demand))
    return wanted


def plan_moves(state: ClusterState, found: list[Candidate], policy: Policy, made: int = 0) -> list[Move]:
    """Rules 2–4: the moves of this cycle, at most ``moves_per_cycle`` with the ``made`` earlier in the cycle, each
    applied to ``state`` (the job then holds its new placement and, until the move completes, its old one)."""
    moves: list[Move] = []
    for candidate in found:
        if made + len(moves) >= policy.moves_per_cycle:
            break
        slots = target(state, candidate, policy)
        if slots is None:
            continue
        state.move(candidate.job.id, slots)
        moves.append(Move(candidate.job.id, slots, candidate.running.slots))
    return moves
