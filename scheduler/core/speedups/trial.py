"""The cycle's trial placement for a preemption search, and the exact shortcut that spares most of its trials.

A preemption search (:func:`scheduler.core.decisions.preemption.find_victims`) asks ``try_place()`` after every change
of its tentative victim set. :class:`TrialPlacement` is the cycle's ``try_place``: what the job's turn would
take on free capacity (:func:`~scheduler.core.decisions.choose.choose`: the best placement :func:`find_slots` gives if
:meth:`FairShare.admit` admits the units it holds, else the best among those whose holding it admits).

Its :meth:`TrialPlacement.keeps` answers the question the search's pruning pass asks right after putting a
victim back — would ``try_place()`` still accept a placement? — without placing anything, when it can prove
the answer is yes. It says True only when one of these holds:

1. The victim belongs to another team (so the job's team usage, all that admission reads besides the
   slots, is unchanged) and its slots are unseen by the job's placement
   (:mod:`scheduler.core.speedups.unseen`): ``find_slots`` answers both of ``choose``'s questions exactly as
   before the put-back, and that answer was accepted.
2. The job is one replica that states no CPU or host memory; either the victim's slots are unseen or
   ``slots`` (a placement ``find_slots`` gave for the job earlier in the search) is still free; and every
   placement ``find_slots`` could give the job — each option's GPU class and units, any larger MIG instance
   included for a demand sized from memory — would be admitted at the team's usage now. For one replica
   ``find_slots`` is complete: it finds a placement whenever one of its options has a free slot (best fit
   scans every bucket, MIG every free instance, shares at least the smallest free share that fits), so it
   finds one, and whichever it finds is admitted.

3. The job is one replica that states no CPU or host memory, ``slots`` is still free and the quota admits it
   at the team's usage now. ``choose`` finds a placement whenever a slot of a holding the quota admits is free —
   an instance of the job's own profile, or a larger instance on a GPU in use (putting victims back never
   makes a GPU idle) — so it finds one, and what it finds is admitted.

4. The job is a gang of whole GPUs without host needs, and counting free GPUs proves that ``choose`` finds a
   placement its quota admits (:mod:`scheduler.core.speedups.gangfit`): the pruning of a gang's victims then runs
   no topology search per victim put back.

Anything else (a gang the count cannot decide, or a job with host needs whose victim is seen or of its own team,
an holding admission could refuse) gets False, and the search runs the trial.

5. :meth:`TrialPlacement.first_fit`, for the same one-replica jobs, when ``find_slots`` finds nothing now:
   where the job first fits as the pool is removed is a question about single nodes once what it could hold
   on the first node that fits is admitted at the team's usage now (:mod:`scheduler.core.speedups.firstfit`):
   the search removes only that node's victims, checks with a real trial and prunes them, instead of
   removing and putting back a prefix of the whole pool.
6. ... and when the job fits now but its quota refuses it: :mod:`scheduler.core.speedups.quotafit` replays the team's
   usage (where the quota admits only the cheaper placements, where one first fits; where the victims' nodes
   cannot offer an admitted holding, the usage alone).
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.core.decisions.choose import choose
from scheduler.core.decisions.preemption import NO_SHORTCUTS, Candidate, FirstFit, Shortcuts
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Slots
from scheduler.core.placement import IndexedClusterState, find_slots, index_of
from scheduler.core.placement.holdings import possible_units
from scheduler.core.placement.index import CapacityIndex
from scheduler.core.rules.fairshare import FairShare
from scheduler.core.rules.limits import placement_units
from scheduler.core.speedups.firstfit import first_fit
from scheduler.core.speedups.gangfit import gang_fits
from scheduler.core.speedups.memo import current_memo
from scheduler.core.speedups.quotafit import QuotaFit
from scheduler.core.speedups.unseen import Unseen, unseen_by


class TrialPlacement:
    """``trial()``: admissible slots for ``job`` on the state's free capacity, or None (module doc)."""

    def __init__(
        self, state: IndexedClusterState, index: CapacityIndex, fairness: FairShare, job: Job, policy: Policy
    ) -> None:
        self.state = state
        self.index = index
        self.fairness = fairness
        self.job = job
        self.policy = policy
        self._simple = job.replicas == 1 and not job.cpu_milli and not job.memory_mib
        self._found: Slots | None = None  # what find_slots gave in the last trial
        # Built on first use (plain attributes, not ``functools.cached_property``, which mypyc does not compile).
        self._unseen_built: Unseen | None = None
        self._outcomes_built: tuple[tuple[str, int], ...] | None = None

    def _unseen(self) -> Unseen:
        """Built on first use: most searches end before any put-back (an empty pool, a node model's answer)."""
        if self._unseen_built is None:
            self._unseen_built = unseen_by(self.state, self.index, self.job, self.policy)
        return self._unseen_built

    def _outcomes(self) -> tuple[tuple[str, int], ...]:
        if self._outcomes_built is None:
            self._outcomes_built = possible_units(self.index, self.job, self.policy) if self._simple else ()
        return self._outcomes_built

    def __call__(self) -> Slots | None:
        choice = choose(self.state, self.fairness, self.job, self.policy)
        self._found = choice.best
        return choice.slots

    def shortcuts(self) -> Shortcuts:
        """The shortcuts a preemption search may take with this trial (module doc); none when the cycle's
        speed-ups are off."""
        if not current_memo().enabled:
            return NO_SHORTCUTS
        if not self._simple:
            return Shortcuts(keeps=self.keeps)
        return Shortcuts(keeps=self.keeps, fails_for_less=self.fails_for_less, first_fit=self.first_fit)

    def first_fit(self, pool: Sequence[Candidate]) -> FirstFit | None:
        """Where the search first succeeds as ``pool`` is removed, for a job of one replica without host
        needs (module doc, 5 and 6); None when that cannot be told."""
        index, _ = index_of(self.state)
        if find_slots(self.state, self.job, self.policy) is None:
            slots = [(c.job.id, c.slots) for c in pool]
            return first_fit(self.state, index, self.job, self.policy, slots, self._all_admitted)
        return QuotaFit(self.state, index, self.fairness, self.job, self.policy).first_fit(pool)

    def _all_admitted(self, holdings: set[tuple[str, int]]) -> bool:
        return len(self.fairness.admitted(self.job, tuple(sorted(holdings)))) == len(holdings)

    def keeps(self, victim: Job, victim_slots: Slots, slots: Slots) -> bool:
        """``victim`` has just been put back on ``victim_slots``; ``trial()`` accepted a placement in the state
        just before, and ``slots`` is one ``find_slots`` gave for the job earlier in this search. True
        promises that ``trial()`` would accept a placement now (module doc)."""
        unseen = self._unseen()(victim.id, victim_slots)
        if unseen and victim.team != self.job.team:
            return True
        if not self._simple:
            return gang_fits(index_of(self.state)[0], self.fairness, self.job, self.policy)  # 4 of the module doc
        still_free = all(self.state.slot_free(slot) for replica in slots for slot in replica)
        if still_free and self.fairness.admit(self.job, placement_units(self.state, slots)).ok:
            return True  # 3 of the module doc
        if not unseen and not still_free:
            return False
        return self._admission()[0]

    def fails_for_less(self) -> bool:
        """Asked right after ``trial()`` returned None, for a job of one replica without host needs: True
        promises that ``trial()`` returns None in every state reached from this one by putting victims back
        (module doc)."""
        return self._found is None or self._admission()[1]

    def _admission(self) -> tuple[bool, bool]:
        """(every possible holding admitted, none admitted) at the job's team usage now."""
        outcomes = self._outcomes()
        allowed = self.fairness.admitted(self.job, outcomes)
        return len(allowed) == len(outcomes), not allowed
