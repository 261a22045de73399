"""Eviction candidates team by team, kept for the cycle: the fast half of
:func:`~scheduler.core.decisions.preemption.candidates`.

The rules (protections, grounds, freshness, lost work, preference order) are :mod:`scheduler.core.rules.eviction`'s,
and so is the plain way of applying them, :func:`~scheduler.core.rules.eviction.team_candidates`; this module
gives the same list (``tests/scheduler/core/speedups/test_victims.py`` compares them) by asking the same rule
functions and keeping the answer. A team's candidates for a pending job depend only on:

- which of the team's snapshot-running jobs are still placed (:meth:`FairShare.running_jobs`): that also fixes which of
  them are borrowed (:meth:`FairShare.borrowed`, rule 4 of :mod:`~scheduler.core.rules.fairshare`) and which are
  preemptible of lower priority (:meth:`FairShare.lower_preemptible`);
- the pending job's team (same or another), priority, whether it is production, whether reclaim is allowed,
  and what decides whether a victim's slots could help it (:func:`could_help`): its ``gpu_model``
  constraint and, for another team's victim, its request and kind (the demand per GPU model) and whether
  it states CPU or host memory;
- facts that stay put within a cycle: a running job's slots, priority, start and checkpoint times, ``now``
  and the policy, and which nodes are ready.

So :class:`Victims` keeps each team's list per (team, those job facts) together with the running-jobs tuple it was
computed for, and hands it out again while that tuple is unchanged (evictions change it; their undo restores it).
Ping-pong protection depends on the job's identity and is applied by the caller, after. Readiness is the one cycle fact
that can move: a reconfiguration closes its node (:mod:`~scheduler.core.placement.reconfigurations`), and the cycle
tells :meth:`Victims.closed`. Only :func:`could_help` reads readiness, so only its answers on the closed nodes and the
lists it filtered are forgotten; the running jobs' facts and which of them a ground reaches do not depend on it and are
kept (the cycle used to build a new :class:`Victims` after each reconfiguration, and at 1,000 nodes with 50,000
pending its hundreds of production reconfigurations made every search rescan every team from scratch). A list handed
out must not be modified.
"""

from __future__ import annotations

from collections.abc import Hashable, Set

from scheduler.core.model.cluster_state import ClusterState
from scheduler.core.model.demand import DemandKind
from scheduler.core.model.policy import Policy
from scheduler.core.model.shape import Shape
from scheduler.core.model.snapshot import Job, Slots
from scheduler.core.model.vocabulary import Priority
from scheduler.core.rules.eviction import (
    Candidate,
    by_key,
    could_help,
    ground,
    is_fresh,
    lost_work,
    preference,
    reaches,
    reclaims_own,
)
from scheduler.core.rules.fairshare import FairShare
from scheduler.core.speedups.memo import current_memo

_Facts = tuple[Job, bool, float, float, "Slots", tuple[tuple[str, bool], ...]]

_Grounded = tuple[tuple[tuple[str, bool], ...], Candidate]  # a candidate with its (node, holds MIG) pairs


class Victims:
    """Per-cycle memory of each team's eviction candidates (module doc) for ``state``, ``fairness``, ``policy``
    and ``now``; told by :meth:`closed` when a node's readiness changes."""

    def __init__(self, state: ClusterState, fairness: FairShare, policy: Policy, now: float) -> None:
        self.state = state
        self.fairness = fairness
        self.policy = policy
        self.now = now
        memo = current_memo()
        self._lists: dict[Hashable, tuple[tuple[str, ...], list[Candidate]]] = memo.table()
        # Per running job: what the rules read of it, fixed for the cycle.
        self._facts: dict[str, _Facts] = memo.table()
        # Job facts → slot node → could_help there.
        self._helps_at: dict[Hashable, dict[tuple[str, bool], bool]] = memo.table()
        self._grounds: dict[Hashable, tuple[tuple[str, ...], list[_Grounded]]] = memo.table()

    def closed(self, nodes: Set[str]) -> None:
        """``nodes`` are no longer ready (a reconfiguration closed them): forget what their readiness decided."""
        self._lists.clear()  # each was filtered by could_help; a rescan of the kept grounds is cheap
        for helps_at in self._helps_at.values():
            for node in nodes:
                helps_at.pop((node, True), None)
                helps_at.pop((node, False), None)

    def of_team(self, team: str, job: Job, allow_reclaim: bool) -> list[Candidate]:
        """:func:`~scheduler.core.rules.eviction.team_candidates` from memory: the candidates of ``team``'s running
        jobs for ``job`` (ping-pong aside), in victim-preference order. Do not modify the list."""
        fairness = self.fairness
        if not reaches(fairness, team, job, allow_reclaim):
            return []
        production = job.priority == Priority.PRODUCTION
        same_team = team == job.team
        running = fairness.running_jobs(team)
        helps: Hashable = job.gpu_model if same_team else Shape.of(job).helps
        context = (team, job.priority, production, same_team, allow_reclaim, helps, job.preemptible)
        cached = self._lists.get(context)
        if cached is not None and (cached[0] is running or cached[0] == running):
            return cached[1]
        found = self._scan(team, job, running, allow_reclaim)
        self._lists[context] = (running, found)
        return found

    def _scan(self, team: str, job: Job, running: tuple[str, ...], allow_reclaim: bool) -> list[Candidate]:
        """The team's grounded candidates (:meth:`_grounded`) that could help ``job`` (:func:`could_help`)."""
        state, policy, now = self.state, self.policy, self.now
        same_team = team == job.team
        kinds: dict[str, DemandKind | None] | None = None if same_team else {}
        helps_key: Hashable = ("own team", job.gpu_model) if same_team else Shape.of(job).helps
        # could_help, slot node by slot node, remembered per job facts and then per slot node (its node and
        # whether it is a MIG instance are fixed): one lookup of the facts per scan, so that the loop hashes
        # slot nodes only, never a Request.
        helps_at = self._helps_at.setdefault(helps_key, {})
        found: list[Candidate] = []
        for slot_nodes, candidate in self._grounded(team, job, running, allow_reclaim):
            for slot_node in slot_nodes:
                answer = helps_at.get(slot_node)
                if answer is None:
                    answer = helps_at[slot_node] = could_help(state, (slot_node,), job, policy, now, kinds)
                if answer:
                    found.append(candidate)
                    break
        found.sort(key=by_key)  # in preference order: the pool is a merge of these runs
        return found

    def _grounded(
        self, team: str, job: Job, running: tuple[str, ...], allow_reclaim: bool
    ) -> list[tuple[tuple[tuple[str, bool], ...], Candidate]]:
        """The team's running jobs that a protection spares and a ground reaches, with their slot nodes: what the
        rules decide before asking whether a victim could help. It depends on the job only through its team,
        priority and whether it is production, so it is remembered per those (and the running tuple) and
        shared by jobs of different requests — production jobs, which reach every team, above all."""
        production = job.priority == Priority.PRODUCTION
        same_team = team == job.team
        own_reclaim = same_team and reclaims_own(job, self.policy)
        context = (team, job.priority, production, same_team, allow_reclaim, own_reclaim)
        cached = self._grounds.get(context)
        if cached is not None and (cached[0] is running or cached[0] == running):
            return cached[1]
        fairness = self.fairness
        # Each branch scans the team's running jobs at most once: the borrowed fill reuses the scan.
        if production:
            ids = running
            borrowed_ids = fairness.borrowed(team, ids) if ids else ()
        elif own_reclaim:  # lower preemptible work, and borrowed work at any priority (preemptible: checked below)
            borrowed_ids = fairness.borrowed(team, running)
            ids = tuple(dict.fromkeys(fairness.lower_preemptible(team, job.priority) + borrowed_ids))
        elif same_team:
            ids = fairness.lower_preemptible(team, job.priority)
            borrowed_ids = fairness.borrowed(team, running) if ids else ()
        else:
            ids = borrowed_ids = fairness.borrowed(team, running)
        borrowed = set(borrowed_ids)
        found: list[tuple[tuple[tuple[str, bool], ...], Candidate]] = []
        for victim_id in ids:
            facts = self._facts.get(victim_id)
            if facts is None:
                facts = self._facts[victim_id] = self._victim_facts(victim_id)
            victim, fresh, lost, started_at, slots, slot_nodes = facts
            victim_borrowed = victim_id in borrowed
            reason = ground(job, victim, victim_borrowed, allow_reclaim, fresh, self.policy)
            if reason is None:
                continue
            key = preference(victim, victim_borrowed, lost, started_at)
            found.append((slot_nodes, Candidate(victim, slots, reason, key)))
        self._grounds[context] = (running, found)
        return found

    def _victim_facts(self, victim_id: str) -> _Facts:
        """A running job's facts the rules read: job, fresh (:func:`~scheduler.core.rules.eviction.is_fresh`), work
        lost (:func:`~scheduler.core.rules.eviction.lost_work`), start, slots and slot nodes — none of which
        changes within the cycle."""
        entry = self.state.running[victim_id]
        fairness = self.fairness
        lost = lost_work(entry, sum(fairness.running_units(victim_id).values()), self.now)
        fresh = is_fresh(entry, self.policy, self.now)
        slots = self.state.placed[victim_id]
        return (entry.job, fresh, lost, entry.started_at, slots, fairness.running_slot_nodes(victim_id))
