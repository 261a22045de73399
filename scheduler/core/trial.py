"""The cycle's trial placement for a preemption search, and the exact shortcut that spares most of its trials.

A preemption search (:func:`scheduler.core.preemption.find_victims`) asks ``try_place()`` after every change
of its tentative victim set. :class:`TrialPlacement` is the cycle's ``try_place``: :func:`find_slots` on free
capacity, accepted only when :meth:`FairShare.admit` admits the units those slots hold (cycle step 3).

Its :meth:`TrialPlacement.keeps` answers the question the search's pruning pass asks right after putting a
victim back — would ``try_place()`` still accept a placement? — without placing anything, when it can prove
the answer is yes. It says True only when one of these holds:

1. The victim belongs to another team (so the job's team usage, all that admission reads besides the
   slots, is unchanged) and its slots are unseen by the job's placement
   (:mod:`scheduler.core.placement.unseen`): ``find_slots`` answers exactly as before the put-back, and that
   answer was accepted.
2. The job is one replica that states no CPU or host memory; either the victim's slots are unseen or
   ``slots`` (a placement ``find_slots`` gave for the job earlier in the search) is still free; and every
   placement ``find_slots`` could give the job — each option's GPU class and units, any larger MIG instance
   included for a demand sized from memory — would be admitted at the team's usage now. For one replica
   ``find_slots`` is complete: it finds a placement whenever one of its options has a free slot (best fit
   scans every bucket, MIG every free instance, shares at least the smallest free share that fits), so it
   finds one, and whichever it finds is admitted.

Anything else (a gang or a job with host needs whose victim is seen or of its own team, an outcome admission
could refuse) gets False, and the search runs the trial.

3. :meth:`TrialPlacement.first_fit`, for the same one-replica jobs, when ``find_slots`` finds nothing now:
   where the job first fits as the pool is removed is a question about single nodes once what it could hold
   on the first node that fits is admitted at the team's usage now (:mod:`scheduler.core.placement.firstfit`):
   the search removes only that node's victims, checks with a real trial and prunes them, instead of
   removing and putting back a prefix of the whole pool.
4. ... and when the job fits now but its quota refuses it: a placement exists in every state the search
   reaches, so ``trial()`` succeeds exactly when admission takes the one ``find_slots`` gives. Admission reads
   only the team's usage, which only the team's own victims change; when, at each usage the search passes
   through, the quota admits either every placement the job could get (each option's own grain — a larger
   MIG instance is never taken while one of the job's own profile is free — or, failing that, every
   possible outcome) or none, the search succeeds at the first position where the own victims bring the
   usage low enough, its pruning keeps exactly the own victims whose return leaves nothing admitted, and
   the other teams' victims are put back whatever happens. Removing only the own victims therefore ends in
   the same state, with the same placement.
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.core.capacity import UNITS_PER_GPU, gpu_class_of
from scheduler.core.catalog import GPU_MODEL_BY_NAME
from scheduler.core.demand import DemandKind
from scheduler.core.fairshare import FairShare, placement_units
from scheduler.core.placement import IndexedClusterState, find_slots, index_of
from scheduler.core.placement.firstfit import NEVER, FirstFit, first_fit
from scheduler.core.placement.index import CapacityIndex, Slots
from scheduler.core.placement.options import options_for
from scheduler.core.placement.unseen import unseen_by
from scheduler.core.policy import Policy
from scheduler.core.preemption import Candidate, Shortcuts
from scheduler.core.state import FULL_GPU_MILLI, Job


class TrialPlacement:
    """``trial()``: admissible slots for ``job`` on the state's free capacity, or None (module doc)."""

    def __init__(
        self, state: IndexedClusterState, index: CapacityIndex, fairness: FairShare, job: Job, policy: Policy
    ) -> None:
        self.state = state
        self.fairness = fairness
        self.job = job
        self.policy = policy
        self._unseen = unseen_by(state, index, job, policy)
        self._simple = job.replicas == 1 and not job.cpu_milli and not job.memory_mib
        self._outcomes = possible_units(index, job, policy) if self._simple else ()
        self._admitted: tuple[tuple[tuple[str, int], ...], bool, bool] | None = None  # (usage, all ok, none ok)
        self._found: Slots | None = None  # what find_slots gave in the last trial

    def __call__(self) -> Slots | None:
        slots = self._found = find_slots(self.state, self.job, self.policy)
        if slots is None or not self.fairness.admit(self.job, placement_units(self.state, slots)).ok:
            return None
        return slots

    def shortcuts(self) -> Shortcuts:
        """The shortcuts a preemption search may take with this trial (module doc)."""
        if not self._simple:
            return Shortcuts(keeps=self.keeps)
        return Shortcuts(keeps=self.keeps, fails_for_less=self.fails_for_less, first_fit=self.first_fit)

    def first_fit(self, pool: Sequence[Candidate]) -> FirstFit | None:
        """Where the search first succeeds as ``pool`` is removed, for a job of one replica without host
        needs (module doc, 3 and 4); None when that cannot be told."""
        index, _ = index_of(self.state)
        if find_slots(self.state, self.job, self.policy) is None:
            slots = [(c.job.id, c.slots) for c in pool]
            return first_fit(self.state, index, self.job, self.policy, slots, self._all_admitted)
        return self._quota_fit(index, pool)

    def _quota_fit(self, index: CapacityIndex, pool: Sequence[Candidate]) -> FirstFit | None:
        """The job fits now and only its quota holds it back (module doc, 4): the first position at which
        the team's own victims bring its usage low enough, and those victims; None when at some usage the
        search passes through its quota would admit some placements the job could get and not others."""
        outcomes = _outcomes_from_fit(index, self.job, self.policy) or set(possible_units(index, self.job, self.policy))
        team = self.job.team
        usage = dict(self.state.usage.get(team, {}))
        own: list[tuple[int, dict[str, int]]] = []  # (position, units per class) of the team's own victims
        for position, candidate in enumerate(pool):
            if candidate.job.team != team:
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
        self, outcomes: set[tuple[str, int]], usage: dict[str, int], own: list[tuple[int, dict[str, int]]]
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

    def _admitted_at(self, outcomes: set[tuple[str, int]], usage: dict[str, int]) -> bool | None:
        """True when the team's quota admits every outcome at ``usage``, False when none, None otherwise."""
        answers = {self.fairness.admit(self.job, {gpu_class: units}, usage).ok for gpu_class, units in outcomes}
        return answers.pop() if len(answers) == 1 else None

    def _all_admitted(self, outcomes: set[tuple[str, int]]) -> bool:
        return all(self.fairness.admit(self.job, {gpu_class: units}).ok for gpu_class, units in outcomes)

    def keeps(self, victim: Job, victim_slots: Slots, slots: Slots) -> bool:
        """``victim`` has just been put back on ``victim_slots``; ``trial()`` accepted a placement in the state
        just before, and ``slots`` is one ``find_slots`` gave for the job earlier in this search. True
        promises that ``trial()`` would accept a placement now (module doc)."""
        unseen = self._unseen(victim.id, victim_slots)
        if unseen and victim.team != self.job.team:
            return True
        if not self._simple:
            return False
        if not unseen and not all(self.state.slot_free(slot) for replica in slots for slot in replica):
            return False
        return self._admission()[0]

    def fails_for_less(self) -> bool:
        """Asked right after ``trial()`` returned None, for a job of one replica without host needs: True
        promises that ``trial()`` returns None in every state reached from this one by putting victims back
        (module doc)."""
        return self._found is None or self._admission()[1]

    def _admission(self) -> tuple[bool, bool]:
        """(every possible outcome admitted, none admitted) at the job's team usage now."""
        usage = tuple(sorted(self.state.usage.get(self.job.team, {}).items()))
        if self._admitted is None or self._admitted[0] != usage:
            answers = [self.fairness.admit(self.job, {gpu_class: units}).ok for gpu_class, units in self._outcomes]
            self._admitted = (usage, all(answers), not any(answers))
        return self._admitted[1], self._admitted[2]


def _shift(usage: dict[str, int], units: dict[str, int], sign: int) -> None:
    for gpu_class, held in units.items():
        usage[gpu_class] = usage.get(gpu_class, 0) + sign * held


def _outcomes_from_fit(index: CapacityIndex, job: Job, policy: Policy) -> set[tuple[str, int]] | None:
    """Every (GPU class, units) one replica of ``job`` — which fits now — could be given in any state reached
    by removing running jobs: each option's own grain (more free capacity never makes ``find_slots`` take a
    larger MIG instance while an instance of the job's own profile is free somewhere). None when a larger
    instance could still be taken: the demand is sized from memory and its profile is free nowhere now."""
    found: set[tuple[str, int]] = set()
    own_free = False
    sized = False
    for option in options_for(index, job, policy):
        demand = option.demand
        gpu_class = gpu_class_of(option.model)
        if demand.kind == DemandKind.WHOLE:
            found.add((gpu_class, demand.gpus * UNITS_PER_GPU))
        elif demand.kind == DemandKind.SHARE:
            found.add((gpu_class, min(demand.milli, FULL_GPU_MILLI) * (UNITS_PER_GPU // FULL_GPU_MILLI)))
        else:
            profile = demand.mig_profile or ""
            found.add((gpu_class, GPU_MODEL_BY_NAME[option.model].profiles()[profile].compute_slices * FULL_GPU_MILLI))
            own_free = own_free or bool(index.mig.get((option.group, profile)))
            sized = sized or demand.memory_mib is not None
    return None if sized and not own_free else found


def possible_units(index: CapacityIndex, job: Job, policy: Policy) -> tuple[tuple[str, int], ...]:
    """Every (GPU class, units) one replica of ``job`` could hold on its options: what admission may be asked."""
    found: set[tuple[str, int]] = set()
    for option in options_for(index, job, policy):
        demand = option.demand
        gpu_class = gpu_class_of(option.model)
        if demand.kind == DemandKind.WHOLE:
            found.add((gpu_class, demand.gpus * UNITS_PER_GPU))
        elif demand.kind == DemandKind.SHARE:
            found.add((gpu_class, min(demand.milli, FULL_GPU_MILLI) * (UNITS_PER_GPU // FULL_GPU_MILLI)))
        else:
            profiles = GPU_MODEL_BY_NAME[option.model].profiles()
            names = profiles if demand.memory_mib is not None else (demand.mig_profile or "",)
            found.update((gpu_class, profiles[name].compute_slices * FULL_GPU_MILLI) for name in names)
    return tuple(sorted(found))
