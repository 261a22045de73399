"""The one switch, at construction: which engine objects a cycle builds, plain or sped-up.

Rules and placement never open a speed-up (``tests/scheduler/core/test_rules_open_no_speedups.py``). The cycle
builds them here instead, handing them its :class:`~.memo.Memo` as their cache tables
(:class:`~scheduler.core.model.tables.Tables`) and, while the memo is enabled, the speed-ups that wrap a rule behind its
own interface: fair share that remembers its answers and resumes its fill
(:class:`~.fairshare.RememberingFairShare`), the idle classes the capacity index keeps for reconfiguration
(:class:`~.idle.IdleClasses`) and the memory of each team's eviction candidates the preemption search reads
(:class:`~.victims.Victims`), each team's usage at a later time kept while nothing is placed or taken
(:class:`~.ahead.UsageAhead`), and the reservations' search that keeps each node's expected-free times
(:class:`~.freetimes.KeptReservations`, its searches shared by the jobs of one key:
:class:`~.sharedsearch.SharedSearches`), and the memory of the turns that may be repeated without their steps
(:class:`~.repeat.TurnRepeats`), take-back's candidates kept per key while the state stands
(:class:`~.takeback.KeptBackfillCandidates`), and the explanation's ETA replay that reads each plain GPU's empty
time once (:class:`~.supply.PooledSupply`). Disabled, the cycle gets the plain rules, whose tables forget.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping, Sequence, Set

from scheduler.core.decisions.preemption import TeamCandidates
from scheduler.core.decisions.reservation import BackfillCandidates, Reservations
from scheduler.core.model.cluster_state import ClusterState
from scheduler.core.model.explain import Blocker, EtaEstimator
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Slots, Snapshot, Team
from scheduler.core.placement.index import IndexedClusterState
from scheduler.core.rules.eviction import backfill_candidates
from scheduler.core.rules.fairshare import FairShare
from scheduler.core.speedups.ahead import UsageAhead
from scheduler.core.speedups.fairshare import RememberingFairShare
from scheduler.core.speedups.idle import IdleClasses
from scheduler.core.speedups.memo import Memo
from scheduler.core.speedups.repeat import EveryTurn, TurnRepeats
from scheduler.core.speedups.sharedsearch import SharedSearches
from scheduler.core.speedups.supply import PooledSupply
from scheduler.core.speedups.takeback import KeptBackfillCandidates
from scheduler.core.speedups.victims import Victims


def indexed_state(snapshot: Snapshot, now: float, memo: Memo) -> IndexedClusterState:
    """The cycle's state and capacity index at ``now``; the index keeps idle classes while ``memo`` is on."""
    return IndexedClusterState(snapshot, now, memo, IdleClasses if memo.enabled else None)


def fair_share(teams: Sequence[Team], state: IndexedClusterState, policy: Policy, memo: Memo) -> FairShare:
    """The cycle's fair share: it remembers its answers and resumes its guarantee fill while ``memo`` is on, and
    is the plain rule off."""
    ordered = sorted(teams, key=lambda team: team.name)
    return RememberingFairShare(ordered, state, policy, memo) if memo.enabled else FairShare(ordered, state, policy)


def team_candidates(
    state: IndexedClusterState, fairness: FairShare, policy: Policy, now: float, memo: Memo
) -> TeamCandidates | None:
    """Each team's eviction candidates for the cycle's preemption searches: remembered while ``memo`` is on; None
    off, and the search asks the plain rule (:func:`~scheduler.core.rules.eviction.team_candidates`) team by
    team."""
    return Victims(state, fairness, policy, now) if memo.enabled else None


def reservations(
    state: IndexedClusterState,
    fairness: FairShare,
    policy: Policy,
    now: float,
    frees_at: Callable[[Job, str], float],
    expected_end: Callable[[str], float],
    bound: Callable[[Slots], None],
    memo: Memo,
) -> Reservations:
    """The cycle's reservations: their search keeps each node's expected-free times while ``memo`` is on, and asks
    ``frees_at`` of every GPU's holders off."""
    index = state.index
    assert index is not None
    if memo.enabled:
        return SharedSearches(state, index, policy, now, frees_at, bound, expected_end, fairness, memo)
    return Reservations(state, index, policy, now, frees_at, bound, memo)


def usage_ahead(state: IndexedClusterState, expected_end: Callable[[str], float], memo: Memo) -> UsageAhead | None:
    """Each team's usage at a later time for the cycle's quota questions ahead: kept per index version while
    ``memo`` is on; None off, and the run walks its placed work per question
    (:meth:`~scheduler.core.planning.run.Run.usage_at`)."""
    return UsageAhead(state, expected_end, memo) if memo.enabled else None


def turn_repeats(
    state: IndexedClusterState,
    reservations: Reservations,
    policy: Policy,
    past_bound: Set[str],
    blockers: MutableMapping[str, Blocker],
    memo: Memo,
) -> TurnRepeats | EveryTurn:
    """How the cycle takes its turns: a turn a later job of the same key would end alike at an unchanged state is
    repeated without its steps while ``memo`` is on (:mod:`.repeat`); off, every job takes its whole turn."""
    index = state.index
    assert index is not None
    return TurnRepeats(index, reservations, policy, past_bound, blockers, memo) if memo.enabled else EveryTurn()


def eta_estimator(
    state: ClusterState,
    now: float,
    ready_at: Mapping[str, float],
    expected_end: Callable[[str], float],
    skip: Callable[[str], bool],
    reconfigure_s: float,
    cycle_s: float,
    memo: Memo,
) -> EtaEstimator:
    """The explanation's ETA replay: its pools built from each plain GPU's empty time, worked out once, while
    ``memo`` is on (:mod:`.supply`); off, from :func:`~scheduler.core.model.explain.supply` of every GPU per
    shape."""
    if memo.enabled:
        return PooledSupply(state, now, ready_at, expected_end, skip, reconfigure_s, cycle_s, memo)
    return EtaEstimator(state, now, ready_at, expected_end, skip, reconfigure_s, cycle_s, memo)


def take_back_candidates(state: IndexedClusterState, memo: Memo) -> BackfillCandidates:
    """Who take-back may evict for a job (:func:`~scheduler.core.rules.eviction.backfill_candidates`): the widest
    job's candidates kept per key while ``memo`` is on (:mod:`.takeback`); the plain rule off."""
    index = state.index
    assert index is not None
    return KeptBackfillCandidates(index, memo) if memo.enabled else backfill_candidates
