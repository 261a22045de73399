"""Preemption for a job that fits now but whose quota refuses the placement it gets: where the search succeeds.

A preemption search (:mod:`scheduler.core.preemption`) asks ``try_place()`` — ``find_slots``, then
:meth:`FairShare.admit` on the units of the placement found — after removing ever longer prefixes of its
pool. For a job of one replica without host needs that fits now, a placement exists in every state the
search reaches, so a trial succeeds exactly when admission takes the placement ``find_slots`` picks.
Admission reads only the team's usage, which only the team's own victims lower. :class:`QuotaFit` answers
two such searches without touching the state, and gives no answer (None) otherwise:

1. **Uniform admission** (:meth:`QuotaFit.first_fit`, the usual case): at every usage the search passes
   through, the quota admits either every placement the job could get — each option's own grain; a larger
   MIG instance is never taken while one of the job's own profile is free — or none. The search then
   succeeds at the first position where the team's own victims bring the usage low enough, its pruning keeps
   exactly the own victims whose return leaves nothing admitted (replayed on the usage), and every other
   team's victim is put back whatever happens. Removing only the own victims ends in the same state, with
   the same placement.
2. **Only the cheaper placements admitted** (the quota admits, say, a ``3g.40gb`` instance but not a whole
   GPU, and the job fits now only on the whole GPU): if every placement the quota admits would be preferred
   by ``find_slots`` to every one it refuses — better (tier rank, grain) in its score — and the set admitted
   stays the same over every usage the search can reach, the trial succeeds exactly when some node can give
   an admitted placement, which is :func:`~scheduler.core.placement.firstfit.first_fit` narrowed to the
   admitted options.
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.core.capacity import UNITS_PER_GPU, ClusterState, gpu_class_of
from scheduler.core.catalog import GPU_MODEL_BY_NAME
from scheduler.core.demand import DemandKind
from scheduler.core.fairshare import FairShare
from scheduler.core.placement.firstfit import NEVER, FirstFit, first_fit
from scheduler.core.placement.index import CapacityIndex
from scheduler.core.placement.options import KIND_RANK, Option, options_for
from scheduler.core.policy import Policy
from scheduler.core.state import FULL_GPU_MILLI, Job
from scheduler.core.victims import Candidate

Outcome = tuple[str, int]  # (GPU class, units)


class QuotaFit:
    """The two answers of the module doc for ``job`` on ``state`` (whose live ``index`` is current)."""

    def __init__(self, state: ClusterState, index: CapacityIndex, fairness: FairShare, job: Job, policy: Policy):
        self.state = state
        self.index = index
        self.fairness = fairness
        self.job = job
        self.policy = policy
        self.options = options_for(index, job, policy)

    def first_fit(self, pool: Sequence[Candidate]) -> FirstFit | None:
        """Where the search over ``pool`` first succeeds, and the victims to remove (module doc); None when
        neither answer applies."""
        by_option = own_grains(self.index, self.options)
        outcomes = (
            set(by_option.values()) if by_option is not None else set(possible_units(self.index, self.job, self.policy))
        )
        usage = dict(self.state.usage.get(self.job.team, {}))
        if self._admitted_at(outcomes, usage) is None:
            return self._cheaper(pool, by_option, usage) if by_option is not None else None
        own: list[tuple[int, dict[str, int]]] = []  # (position, units per class) of the team's own victims
        for position, candidate in enumerate(pool):
            if candidate.job.team != self.job.team:
                continue  # the job fits already: another team's victim changes nothing admission reads
            units = self.fairness.running_units(candidate.job.id)
            _shift(usage, units, -1)
            own.append((position, units))
            admitted = self._admitted_at(outcomes, usage)
            if admitted is None:
                return None
            if admitted:
                return self._pruned_alike(outcomes, usage, own)
        return NEVER

    def _pruned_alike(
        self, outcomes: set[Outcome], usage: dict[str, int], own: list[tuple[int, dict[str, int]]]
    ) -> FirstFit | None:
        """The search succeeds after removing ``own`` (the last one just made it): replay its pruning on the
        usage alone — a victim is kept when putting it back leaves no placement admitted — and give up if
        some usage on the way admits only some placements."""
        for _, units in reversed(own):
            _shift(usage, units, +1)
            admitted = self._admitted_at(outcomes, usage)
            if admitted is None:
                return None
            if not admitted:
                _shift(usage, units, -1)  # kept: it goes again
        return FirstFit(own[-1][0] + 1, tuple(position for position, _ in own))

    def _cheaper(
        self, pool: Sequence[Candidate], by_option: dict[Option, Outcome], usage: dict[str, int]
    ) -> FirstFit | None:
        """Answer 2 of the module doc: the quota admits some of the job's placements now, not all."""
        admitted = {o for o in set(by_option.values()) if self._admits(o, usage)}
        good = [option for option, outcome in by_option.items() if outcome in admitted]
        bad = [option for option, outcome in by_option.items() if outcome not in admitted]
        if max(_rank(option) for option in good) >= min(_rank(option) for option in bad):
            return None  # find_slots could prefer a refused placement to an admitted one
        slots = [(c.job.id, c.slots) for c in pool]
        demands = {option.group: option.demand for option in good}
        fit = first_fit(self.state, self.index, self.job, self.policy, slots, lambda o: o <= admitted, demands)
        if fit is None:
            return None
        # The admitted set must hold still over every usage the search reaches: down to the usage with all the
        # team's victims before the answer gone (all of the pool's when it never fits).
        lowest = dict(usage)
        for candidate in pool[: fit.length or len(pool)]:
            if candidate.job.team == self.job.team:
                _shift(lowest, self.fairness.running_units(candidate.job.id), -1)
        if {o for o in set(by_option.values()) if self._admits(o, lowest)} != admitted:
            return None
        return fit

    def _admits(self, outcome: Outcome, usage: dict[str, int]) -> bool:
        gpu_class, units = outcome
        return self.fairness.admit(self.job, {gpu_class: units}, usage).ok

    def _admitted_at(self, outcomes: set[Outcome], usage: dict[str, int]) -> bool | None:
        """True when the team's quota admits every outcome at ``usage``, False when none, None otherwise."""
        first: bool | None = None
        for outcome in outcomes:
            answer = self._admits(outcome, usage)
            if first is None:
                first = answer
            elif answer != first:
                return None  # mixed: no need to ask the rest
        return first


def _rank(option: Option) -> tuple[int, int]:
    """What ``find_slots`` compares first between placements of different options: tier rank, then grain."""
    return (option.tier_rank, KIND_RANK[option.demand.kind])


def _shift(usage: dict[str, int], units: dict[str, int], sign: int) -> None:
    for gpu_class, held in units.items():
        usage[gpu_class] = usage.get(gpu_class, 0) + sign * held


def _grain(option: Option, profile: str | None = None) -> Outcome:
    """(GPU class, units) of one replica on ``option``: its whole GPUs, its share, or a MIG instance of
    ``profile`` (by default the option's own)."""
    demand = option.demand
    gpu_class = gpu_class_of(option.model)
    if demand.kind == DemandKind.WHOLE:
        return (gpu_class, demand.gpus * UNITS_PER_GPU)
    if demand.kind == DemandKind.SHARE:
        return (gpu_class, min(demand.milli, FULL_GPU_MILLI) * (UNITS_PER_GPU // FULL_GPU_MILLI))
    name = profile or demand.mig_profile or ""
    return (gpu_class, GPU_MODEL_BY_NAME[option.model].profiles()[name].compute_slices * FULL_GPU_MILLI)


def own_grains(index: CapacityIndex, options: Sequence[Option]) -> dict[Option, Outcome] | None:
    """What one replica gets on each option in any state reached by removing running jobs, for a job that
    fits now: the option's own grain (more free capacity never makes ``find_slots`` take a larger MIG
    instance while an instance of the job's own profile is free somewhere). None when a larger instance
    could still be taken: a demand sized from memory whose profile is free nowhere now."""
    mig = [option for option in options if option.demand.kind == DemandKind.MIG]
    sized = any(option.demand.memory_mib is not None for option in mig)
    own_free = any(index.mig.get((option.group, option.demand.mig_profile or "")) for option in mig)
    return None if sized and not own_free else {option: _grain(option) for option in options}


def possible_units(index: CapacityIndex, job: Job, policy: Policy) -> tuple[Outcome, ...]:
    """Every (GPU class, units) one replica of ``job`` could hold on its options: what admission may be asked
    (a MIG demand sized from memory may also take any larger instance)."""
    found: set[Outcome] = set()
    for option in options_for(index, job, policy):
        if option.demand.kind == DemandKind.MIG and option.demand.memory_mib is not None:
            found.update(_grain(option, name) for name in GPU_MODEL_BY_NAME[option.model].profiles())
        else:
            found.add(_grain(option))
    return tuple(sorted(found))
