"""Preemption for a job that fits now but whose quota refuses the placement it gets: where the search succeeds.

A preemption search (:mod:`scheduler.core.decisions.preemption`) asks ``try_place()`` —
:func:`~scheduler.core.decisions.choose.
choose`: the best placement ``find_slots`` gives, or else the best of those whose holding the quota admits —
after removing ever longer prefixes of its pool. For a job of one replica without host needs that fits now, a
placement exists in every state the search reaches, so a trial succeeds exactly when admission takes a
placement ``choose`` finds. Admission reads only the team's usage, which only the team's own victims lower.
:class:`QuotaFit` answers three such searches without touching the state, and gives no answer (None) otherwise:

1. **Uniform admission** (the usual case): at every usage the search passes through, the quota admits either
   every placement the job could get — each option's own holding; a larger MIG instance is never taken while one
   of the job's own profile is free — or none. The search then succeeds at the first position where the
   team's own victims bring the usage low enough, its pruning keeps exactly the own victims whose return
   leaves nothing admitted (replayed on the usage), and every other team's victim is put back whatever
   happens. Removing only the own victims ends in the same state, with the same placement.
2. **Only the cheaper placements admitted** (the quota admits, say, a ``3g.40gb`` instance but not a whole
   GPU, and the job fits now only on the whole GPU): if every placement the quota admits would be preferred
   by ``find_slots`` to every one it refuses — better (tier rank, holding) in its score — and the set admitted
   stays the same over every usage the search can reach, the trial succeeds exactly when some node can give
   an admitted placement, which is :func:`~scheduler.core.speedups.firstfit.first_fit` narrowed to the
   admitted options.
3. **The usage alone decides** (any mix of admitted and refused holdings): ``choose`` finds a placement exactly
   when one of the holdings the quota admits at the team's usage has a free slot. If no victim's node, in any
   combination of removals, can offer an admitted holding that is not on offer already
   (:func:`~scheduler.core.speedups.firstfit.room_added`), the free slots that matter are the same in every
   state the search reaches, and whether a trial succeeds depends on the usage alone: asked of the state as
   it is, with the admitted holdings of each usage along the team's own victims. The search succeeds at the
   first own victim whose removal makes ``choose`` find a placement, its pruning is replayed on the usage, and
   the other teams' victims all go back, as in 1.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from scheduler.core.decisions.preemption import FirstFit
from scheduler.core.model.cluster_state import ClusterState
from scheduler.core.model.demand import DemandKind
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job
from scheduler.core.placement.find import best_replica, find_slots
from scheduler.core.placement.holdings import Holding, holding, possible_units
from scheduler.core.placement.index import CapacityIndex
from scheduler.core.placement.options import KIND_RANK, Option, options_for
from scheduler.core.rules.eviction import Candidate
from scheduler.core.rules.fairshare import FairShare
from scheduler.core.speedups.firstfit import NEVER, first_fit, room_added


class QuotaFit:
    """The three answers of the module doc for ``job`` on ``state`` (whose live ``index`` is current)."""

    def __init__(self, state: ClusterState, index: CapacityIndex, fairness: FairShare, job: Job, policy: Policy):
        self.state = state
        self.index = index
        self.fairness = fairness
        self.job = job
        self.policy = policy
        self.options = options_for(index, job, policy)

    def first_fit(self, pool: Sequence[Candidate]) -> FirstFit | None:
        """Where the search over ``pool`` first succeeds, and the victims to remove (module doc, 1 to 3); None
        when no answer applies."""
        answer = self._uniform_or_cheaper(pool)
        return answer if answer is not None else self._by_usage(pool)

    def _uniform_or_cheaper(self, pool: Sequence[Candidate]) -> FirstFit | None:
        """Answers 1 and 2 of the module doc."""
        by_option = own_grains(self.index, self.options)
        holdings = (
            set(by_option.values()) if by_option is not None else set(possible_units(self.index, self.job, self.policy))
        )
        usage = dict(self.state.usage.get(self.job.team, {}))
        if self._admitted_at(holdings, usage) is None:
            return self._cheaper(pool, by_option, usage) if by_option is not None else None
        own: list[tuple[int, dict[str, int]]] = []  # (position, units per class) of the team's own victims
        for position, candidate in enumerate(pool):
            if candidate.job.team != self.job.team:
                continue  # the job fits already: another team's victim changes nothing admission reads
            units = self.fairness.running_units(candidate.job.id)
            _shift(usage, units, -1)
            own.append((position, units))
            admitted = self._admitted_at(holdings, usage)
            if admitted is None:
                return None
            if admitted:
                return self._pruned_alike(holdings, usage, own)
        return NEVER

    def _pruned_alike(
        self, holdings: set[Holding], usage: dict[str, int], own: list[tuple[int, dict[str, int]]]
    ) -> FirstFit | None:
        """The search succeeds after removing ``own`` (the last one just made it): replay its pruning on the
        usage alone — a victim is kept when putting it back leaves no placement admitted — and give up if
        some usage on the way admits only some placements."""
        for _, units in reversed(own):
            _shift(usage, units, +1)
            admitted = self._admitted_at(holdings, usage)
            if admitted is None:
                return None
            if not admitted:
                _shift(usage, units, -1)  # kept: it goes again
        return FirstFit(own[-1][0] + 1, tuple(position for position, _ in own))

    def _cheaper(
        self, pool: Sequence[Candidate], by_option: dict[Option, Holding], usage: dict[str, int]
    ) -> FirstFit | None:
        """Answer 2 of the module doc: the quota admits some of the job's placements now, not all."""
        admitted = self._allowed(tuple(set(by_option.values())), usage)
        good = [option for option, holding in by_option.items() if holding in admitted]
        bad = [option for option, holding in by_option.items() if holding not in admitted]
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
        if self._allowed(tuple(set(by_option.values())), lowest) != admitted:
            return None
        return fit

    def _by_usage(self, pool: Sequence[Candidate]) -> FirstFit | None:
        """Answer 3 of the module doc: the usage alone decides, once the victims' nodes are shown not to."""
        holdings = possible_units(self.index, self.job, self.policy)
        usage = dict(self.state.usage.get(self.job.team, {}))
        allowed = self._allowed(holdings, usage)
        if self._finds(allowed):
            return None  # the trial succeeds before any removal: not this answer's question
        own: list[tuple[int, dict[str, int]]] = []  # (position, units per class) of the team's own victims
        for position, candidate in enumerate(pool):
            if candidate.job.team != self.job.team:
                continue
            units = self.fairness.running_units(candidate.job.id)
            _shift(usage, units, -1)
            own.append((position, units))
            more = self._allowed(holdings, usage)
            if more != allowed and self._finds(more):
                allowed = more
                break
            allowed = more
        else:
            return None  # never by usage alone; whether the victims' nodes can make room is another question
        length = own[-1][0] + 1
        offered = self._offered(allowed)
        victims = [(c.job.id, c.slots) for c in pool[:length]]
        if room_added(self.state, self.index, self.job, self.policy, victims, allowed, offered):
            return None
        for _, units in reversed(own):  # the pruning, replayed on the usage
            _shift(usage, units, +1)
            if not self._finds(self._allowed(holdings, usage)):
                _shift(usage, units, -1)  # kept: it goes again
        return FirstFit(length, tuple(position for position, _ in own))

    def _allowed(self, holdings: Collection[Holding], usage: dict[str, int]) -> frozenset[Holding]:
        return self.fairness.admitted(self.job, tuple(holdings), usage)

    def _finds(self, allowed: frozenset[Holding]) -> bool:
        """Does the trial find a placement on the state now when the quota admits exactly ``allowed``?"""
        return bool(allowed) and find_slots(self.state, self.job, self.policy, allowed=allowed) is not None

    def _offered(self, allowed: Collection[Holding]) -> set[Holding]:
        """The ``allowed`` holdings some option has a free slot of its own holding for now (no larger instance)."""
        return {
            holding(option)
            for option in self.options
            if holding(option) in allowed and best_replica(self.index, self.job, (option,), self.policy, _no_larger)
        }

    def _admitted_at(self, holdings: set[Holding], usage: dict[str, int]) -> bool | None:
        """True when the team's quota admits every holding at ``usage``, False when none, None otherwise."""
        allowed = self._allowed(holdings, usage)
        return True if len(allowed) == len(holdings) else (False if not allowed else None)


def _no_larger(option: Option, profile: str) -> bool:
    return False


def _rank(option: Option) -> tuple[int, int]:
    """What ``find_slots`` compares first between placements of different options: tier rank, then holding."""
    return (option.tier_rank, KIND_RANK[option.demand.kind])


def _shift(usage: dict[str, int], units: dict[str, int], sign: int) -> None:
    for gpu_class, held in units.items():
        usage[gpu_class] = usage.get(gpu_class, 0) + sign * held


def own_grains(index: CapacityIndex, options: Sequence[Option]) -> dict[Option, Holding] | None:
    """What one replica gets on each option in any state reached by removing running jobs, for a job that
    fits now: the option's own holding (more free capacity never makes ``find_slots`` take a larger MIG
    instance while an instance of the job's own profile is free somewhere). None when a larger instance
    could still be taken: a demand sized from memory whose profile is free nowhere now."""
    mig = [option for option in options if option.demand.kind == DemandKind.MIG]
    sized = any(option.demand.memory_mib is not None for option in mig)
    own_free = any(index.mig.get((option.group, option.demand.mig_profile or "")) for option in mig)
    return None if sized and not own_free else {option: holding(option) for option in options}
