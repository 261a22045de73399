"""Reclaim and preemption: which running jobs a pending job may evict, and the fewest that make room.

The rules — protections, grounds and the order victims are preferred in — are :mod:`scheduler.core.rules.eviction`'s;
this module finds, among the candidates they allow, the fewest that make room.

``preemptible_only`` restricts the candidates to preemptible jobs: production asks so first, before a MIG
reconfiguration, and takes non-preemptible work only after (:mod:`scheduler.core.planning.cycle`, step 3).

Choice: candidates are ordered by (non-preemptible last, borrowed first, lower priority first, least work lost
since the last checkpoint — ``(now - max(started_at, last_checkpoint_at)) × GPU-equivalents`` — first, most
recently started first, id). The victims are the fewest candidates that make room; among equally few, the set
whose least preferred victim comes earliest in that order, the next least preferred breaking a tie
(:func:`rank`). Three searches, each through ``try_place()`` alone, propose sets and the best is kept:

1. The prefix search on the whole pool: the shortest prefix after whose removal ``try_place()`` succeeds
   (doubling then bisection: the same prefix as adding one by one when placement is monotone, in O(log n)
   placement calls), then a pruning pass that puts back, from the least preferred victim to the most
   preferred, every victim the placement does not need — a set from which no victim can be spared. When it
   is one victim it is the best there is: no set is smaller, and it is the earliest that works alone (any
   such victim ends the prefix).
2. The same on each domain — the candidates holding a slot on one node, as Kubernetes' default preemption
   weighs each node's victims (``pickOneNodeForPreemption``): a prefix of the whole pool reaches every node's
   candidates in turn, so it may empty a full node where another node needs two. A domain is skipped when
   its nodes, emptied, could host no replica, or a gang's replicas with the cluster's idle GPUs (:class:`_Rooms`).
3. Every set smaller than the best so far, smallest first, on each domain and then on the whole pool, when
   they number at most :data:`EXHAUSTIVE_TRIALS`: the best-ranked set of the first size that makes room.

A job of one replica needs one node, so (2) and (3) make its set the fewest there is whenever no domain has
more smaller sets than that. A gang across nodes gets the fewest on a small pool, else the best of (1) and (2).
If removing every candidate does not make room, nothing is evicted.

Speed, never a different choice: the caller may pass :class:`Shortcuts`, exact answers about ``try_place()``
that let the search skip a trial — a pruning put-back proven to leave a placement, or (for a pool of at most
:data:`FAIL_FAST_POOL` candidates, tried whole first) a search proven hopeless because nothing fits with
every candidate gone and less room cannot help — and :class:`TeamCandidates`, each team's candidates as the rule
gives them, remembered while the team's running jobs stay put. This module states what it asks of them; the
cycle hands them in while its speed-ups are on (:mod:`scheduler.core.speedups.switch`), and without them the
search is the plain one: every trial run, each team's candidates found afresh by the rule.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence, Set
from dataclasses import dataclass
from itertools import combinations
from math import comb
from typing import Protocol

from scheduler.core.model.cluster_state import ClusterState
from scheduler.core.model.plan import Evict
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Preemption, Slots
from scheduler.core.model.vocabulary import EvictionReason, Priority
from scheduler.core.rules.eviction import (
    Candidate,
    Preference,
    as_production,
    by_key,
    reclaims_own,
    team_candidates,
    within_guarantee_after,
)
from scheduler.core.rules.fairshare import FairShare, job_class

__all__ = ["Candidate", "FirstFit", "Shortcuts", "TeamCandidates", "candidates", "find_victims"]

TryPlace = Callable[[], Slots | None]
Keeps = Callable[[Job, Slots, Slots], bool]

# Pools up to this size are first tried whole when the caller can tell a hopeless search (Shortcuts): most
# searches that fail have small pools, and removing a large pool at once only to put it back costs more than
# the trials the probe saves. A matter of speed only: the answer is the same either way.
FAIL_FAST_POOL = 32

# Every set smaller than the best found is tried when there are at most this many of them (module doc): small
# pools get the fewest victims for certain, large ones the best of the whole pool's and each domain's search.
EXHAUSTIVE_TRIALS = 64


@dataclass(frozen=True, slots=True)
class FirstFit:
    """Where a search first succeeds as its pool is removed, as a :class:`Shortcuts` ``first_fit`` answers:
    ``length``, the shortest pool prefix after whose removal one node takes the job (0: no prefix does);
    ``victims``, the positions, within that prefix, of the candidates on that node — every one of them on that
    node alone."""

    length: int
    victims: tuple[int, ...]


class TeamCandidates(Protocol):
    """Each team's eviction candidates for the cycle, as the plain rule
    (:func:`~scheduler.core.rules.eviction.team_candidates`) finds them: the speed-up
    :class:`scheduler.core.speedups.victims.Victims` remembers them while the team's running jobs stay put, told by
    the cycle of each node a reconfiguration closes."""

    def of_team(self, team: str, job: Job, allow_reclaim: bool) -> list[Candidate]:
        """The candidates among ``team``'s running jobs for ``job`` (ping-pong aside), in victim-preference order;
        the caller does not modify the list."""
        ...

    def closed(self, nodes: Set[str]) -> None:
        """``nodes`` are no longer ready (a reconfiguration closed them): their running jobs may no longer help."""
        ...


@dataclass(frozen=True, slots=True)
class Shortcuts:
    """Exact answers about ``try_place()`` that its owner can give without placing anything; the search then
    skips the trial (:mod:`scheduler.core.speedups.trial` gives the cycle's). Either may be None: no shortcut.

    - ``keeps(victim, victim_slots, slots)`` is asked right after a victim is put back, when ``try_place()``
      accepted a placement in the state just before and ``slots`` is a placement it returned earlier in this
      search: True promises that ``try_place()`` would accept a placement now.
    - ``fails_for_less()`` is asked right after ``try_place()`` returned None: True promises that it would
      return None in every state reached from this one by putting victims back.
    - ``first_fit(pool)`` is asked before the search touches the state: a :class:`FirstFit` promises that
      ``try_place()`` fails after removing every prefix of the pool shorter than ``length`` (0: every prefix),
      and, when it succeeds after removing just the ``victims`` named, that it succeeds after removing the
      prefix of ``length`` and that the pruning below keeps only victims named there and finds the same
      placements with or without the others removed (the speed-up :mod:`scheduler.core.speedups.firstfit` says
      when that holds). None: no promise.
    """

    keeps: Keeps | None = None
    fails_for_less: Callable[[], bool] | None = None
    first_fit: Callable[[Sequence[Candidate]], FirstFit | None] | None = None


NO_SHORTCUTS = Shortcuts()


def find_victims(
    state: ClusterState,
    job: Job,
    fairness: FairShare,
    try_place: TryPlace,
    policy: Policy,
    now: float,
    preemptions: Sequence[Preemption],
    shortcuts: Shortcuts = NO_SHORTCUTS,
    victim_cache: TeamCandidates | None = None,
    preemptible_only: bool = False,
) -> tuple[list[Evict], Slots] | None:
    """The fewest evictions (module doc) that let ``job`` be placed, and the slots it gets; None if there is none.

    ``try_place()`` must return a placement for ``job`` on the state's currently free capacity, or None, and
    must leave the state as it found it; it should also return None when the placement would fail
    admission (:meth:`FairShare.admit`), so that evicting within the team can make room in its quota.

    On success the victims have been removed from ``state`` (recorded in the caller's open Statement, if
    any), ``job`` is NOT placed, and the returned slots are free: the caller places the job. The evictions
    come in victim-preference order, each with its reason and ``by=job.id``; the victims' teams have been
    reported to :meth:`FairShare.changed` (report them again if the caller rolls the evictions back). On
    None the state is unchanged. ``shortcuts`` only spare trials and ``victim_cache`` (the cycle's memory of
    each team's candidates, a :class:`TeamCandidates`) only spares scans: the answer is the same without them.
    """
    allow_reclaim = policy.fairness and fairness.under_guarantee(job.team, job_class(job))

    def search(reclaim: bool) -> tuple[list[Candidate], Slots] | None:
        pool = candidates(state, job, fairness, policy, now, preemptions, reclaim, victim_cache, preemptible_only)
        return fewest_victims(state, job, try_place, pool, shortcuts)

    found = search(allow_reclaim)
    if found is not None and allow_reclaim and any(c.reason == EvictionReason.RECLAIM for c in found[0]):
        victims, slots = found
        if not within_guarantee_after(state, job, fairness, victims, slots):
            # The team would end above its guarantee: this is not a reclaim. Production may still take the
            # same victims on its own ground; anyone else searches again without reclaim.
            if job.priority == Priority.PRODUCTION:
                found = ([as_production(c) for c in victims], slots)
            else:
                found = search(False)
    if found is None:
        return None
    victims, slots = found
    victims_remove(state, fairness, victims)
    return [Evict(job=c.job.id, reason=c.reason, by=job.id) for c in victims], slots


def victims_remove(state: ClusterState, fairness: FairShare, victims: Sequence[Candidate]) -> None:
    """Take ``victims`` off ``state`` and tell fair share which teams' usage changed (once per team)."""
    for victim in victims:
        state.remove(victim.job.id)
    for team in sorted({victim.job.team for victim in victims}):
        fairness.changed(team)


def candidates(
    state: ClusterState,
    job: Job,
    fairness: FairShare,
    policy: Policy,
    now: float,
    preemptions: Sequence[Preemption],
    allow_reclaim: bool,
    victim_cache: TeamCandidates | None = None,
    preemptible_only: bool = False,
) -> list[Candidate]:
    """Every running job ``job`` may evict (module rules), in victim-preference order. ``victim_cache`` is the
    cycle's memory of team candidates (:class:`TeamCandidates`); without one each team's are found by the plain
    rule (:func:`~scheduler.core.rules.eviction.team_candidates`), as with the speed-ups off."""
    production = job.priority == Priority.PRODUCTION
    own = fairness.lower_preemptible(job.team, job.priority) or (
        reclaims_own(job, policy) and fairness.over_guarantee(job.team)
    )
    if not production and not allow_reclaim and not own:
        return []  # no ground applies to anyone: only production and reclaim reach other teams
    found: list[Candidate] = []
    for team in fairness.teams_with_running():
        if victim_cache is None:
            found += team_candidates(state, fairness, policy, now, team, job, allow_reclaim)
        else:
            found += victim_cache.of_team(team, job, allow_reclaim)
    evicted_me = {p.by for p in preemptions if p.victim == job.id and now - p.at < policy.ping_pong_window_s}
    if evicted_me:
        found = [c for c in found if c.job.id not in evicted_me]
    if preemptible_only:
        found = [c for c in found if c.job.preemptible]
    found.sort(key=by_key)  # a merge of the teams' sorted runs
    return found


def fewest_victims(
    state: ClusterState, job: Job, try_place: TryPlace, pool: list[Candidate], shortcuts: Shortcuts
) -> tuple[list[Candidate], Slots] | None:
    """The best victim set (:func:`rank`) the search finds (module doc): the whole pool's, then each domain's
    that could make room, then every smaller set while they are few. Explores inside its own Statements and
    always rolls back."""
    best = _prefix_search(state, try_place, pool, shortcuts)
    if best is None or len(best[0]) <= 1:
        return best  # one victim is the fewest, and the earliest that works alone (module doc)
    rooms = _Rooms(state, job)
    for members in _domains(pool):
        if len(members) == len(pool) or not rooms.could_make_room(members):
            continue
        found = _prefix_search(state, try_place, members, shortcuts)
        if found is not None and rank(found[0]) < rank(best[0]):
            best = found
        best = _fewer(state, try_place, members, best)
    return _fewer(state, try_place, pool, best)


def rank(victims: Sequence[Candidate]) -> tuple[int, list[Preference]]:
    """A victim set's place among those that make room, least first: fewest victims, then the set whose least
    preferred victim comes earliest in the order, the next least preferred breaking a tie, and so on."""
    return len(victims), sorted((c.key for c in victims), reverse=True)


def _fewer(
    state: ClusterState, try_place: TryPlace, pool: list[Candidate], best: tuple[list[Candidate], Slots]
) -> tuple[list[Candidate], Slots]:
    """``best``, or a smaller set found by trying every set of each smaller size, smallest first — when all of
    them together are at most :data:`EXHAUSTIVE_TRIALS`; the best-ranked of the first size that makes room."""
    sizes = range(1, len(best[0]))
    if sum(comb(len(pool), size) for size in sizes) > EXHAUSTIVE_TRIALS:
        return best
    for size in sizes:
        trials = (_trial(state, try_place, subset) for subset in combinations(pool, size))
        made = [found for found in trials if found is not None]
        if made:
            return min(made, key=lambda found: rank(found[0]))
    return best


def _trial(
    state: ClusterState, try_place: TryPlace, victims: Sequence[Candidate]
) -> tuple[list[Candidate], Slots] | None:
    """``victims`` and the placement ``try_place()`` finds with them removed, or None; the state is left as it
    was."""
    statement = state.begin()
    try:
        for victim in victims:
            state.remove(victim.job.id)
        slots = try_place()
    finally:
        statement.rollback()
    return (list(victims), slots) if slots is not None else None


class _Rooms:
    """Whether evicting a domain could let ``job`` in, told from the GPUs alone where that is sure: a job asking
    for whole GPUs and no host CPU or memory, and victims of other teams only (so the job's quota reads the same
    usage). Every GPU without a layout counts, usable by the job or not: too many can only let a domain be
    searched in vain, never skip one that could make room."""

    def __init__(self, state: ClusterState, job: Job) -> None:
        self.state = state
        self.job = job
        self._idle: int | None = None  # replicas the cluster's idle GPUs could host now

    def could_make_room(self, members: Sequence[Candidate]) -> bool:
        """False only when, with every one of ``members`` gone, the nodes they hold could host no replica — or,
        for a gang, fewer than its replicas with the cluster's idle GPUs besides."""
        gpus = self.job.request.gpus
        if not gpus or self.job.cpu_milli or self.job.memory_mib:
            return True
        if any(c.job.team == self.job.team for c in members):
            return True
        gone = {c.job.id for c in members}
        nodes = dict.fromkeys(slot.node for c in members for replica in c.slots for slot in replica)
        after = sum(self._hosts(node, gpus, gone) for node in nodes)
        if after == 0 or self.job.replicas == 1:
            return after > 0
        if self._idle is None:
            self._idle = sum(self._hosts(node, gpus, frozenset()) for node in self.state.nodes)
        return self._idle + after >= self.job.replicas

    def _hosts(self, node: str, gpus: int, gone: Set[str]) -> int:
        """Replicas of ``gpus`` whole GPUs each that ``node``'s GPUs without a layout could host were the jobs
        ``gone`` gone."""
        free = sum(1 for gpu in self.state.node_gpus(node) if not gpu.mig_on and gpu.holders() <= gone)
        return free // gpus


def _domains(pool: Sequence[Candidate]) -> list[list[Candidate]]:
    """The pool's candidates by node, in pool order (a candidate holding several nodes is in each), nodes in the
    order the pool first reaches them: what evictions on one node alone can free."""
    by_node: dict[str, list[Candidate]] = {}
    for candidate in pool:
        for node in dict.fromkeys(slot.node for replica in candidate.slots for slot in replica):
            by_node.setdefault(node, []).append(candidate)
    return list(by_node.values())


def _prefix_search(
    state: ClusterState, try_place: TryPlace, pool: list[Candidate], shortcuts: Shortcuts
) -> tuple[list[Candidate], Slots] | None:
    """Shortest successful prefix of ``pool``, then pruning; explores inside its own Statement and always rolls
    back."""
    if not pool:
        return None
    fit = shortcuts.first_fit(pool) if shortcuts.first_fit is not None else None
    if fit is not None:
        if fit.length == 0:
            return None
        found = _prune_from(state, [pool[i] for i in fit.victims], try_place, shortcuts)
        if found is not None:
            return found  # else the node model saw a fit too early: search the usual way
    statement = state.begin()
    removed = 0  # pool[:removed] are out of the state

    def remove_to(length: int) -> None:
        nonlocal removed
        while removed < length:
            state.remove(pool[removed].job.id)
            removed += 1
        while removed > length:
            removed -= 1
            state.place(pool[removed].job, pool[removed].slots)

    try:
        everyone: Slots | None = None  # try_place() with the whole pool removed, once asked
        fails_for_less = shortcuts.fails_for_less
        probe = fails_for_less is not None and len(pool) <= FAIL_FAST_POOL
        if probe:
            # Fail fast: when nothing fits even with every candidate gone, and that is known to hold for every
            # shorter prefix too, no prefix succeeds and the search below would return None.
            remove_to(len(pool))
            everyone = try_place()
            if everyone is None and fails_for_less is not None and fails_for_less():
                return None
        # Doubling: find a prefix length that succeeds, then bisect between the last failure and it.
        failed, length, slots = 0, 1, None
        while True:
            remove_to(length)
            slots = everyone if probe and length == len(pool) else try_place()
            if slots is not None:
                break
            if length == len(pool):
                return None
            failed, length = length, min(2 * length, len(pool))
        succeeded = length
        while succeeded - failed > 1:
            middle = (failed + succeeded) // 2
            remove_to(middle)
            attempt = try_place()
            if attempt is not None:
                succeeded, slots = middle, attempt
            else:
                failed = middle
        remove_to(succeeded)
        return _prune(state, pool[:succeeded], slots, try_place, shortcuts)
    finally:
        statement.rollback()


def _prune_from(
    state: ClusterState, victims: list[Candidate], try_place: TryPlace, shortcuts: Shortcuts
) -> tuple[list[Candidate], Slots] | None:
    """Remove ``victims``; if the job then fits, prune them; None if it does not. Always rolls back."""
    statement = state.begin()
    try:
        for victim in victims:
            state.remove(victim.job.id)
        slots = try_place()
        return _prune(state, victims, slots, try_place, shortcuts) if slots is not None else None
    finally:
        statement.rollback()


def _prune(
    state: ClusterState, victims: Sequence[Candidate], slots: Slots, try_place: TryPlace, shortcuts: Shortcuts
) -> tuple[list[Candidate], Slots]:
    """Pruning: with ``victims`` out of the state and ``slots`` found, put back, least preferred first, each
    victim the placement can do without. Returns the victims kept, in preference order, and the placement."""
    keeps = shortcuts.keeps
    kept: list[Candidate] = []
    stale = False  # a trial was skipped since ``slots`` was found: the answer here may differ
    for candidate in reversed(victims):
        state.place(candidate.job, candidate.slots)
        if keeps is not None and keeps(candidate.job, candidate.slots, slots):
            stale = True
            continue
        attempt = try_place()
        if attempt is not None:
            slots, stale = attempt, False
        else:
            state.remove(candidate.job.id)
            kept.append(candidate)
    if stale:
        attempt = try_place()
        assert attempt is not None, "keeps() promised that the placement still succeeds"
        slots = attempt
    kept.reverse()
    return kept, slots
