"""Take-back's candidates kept per key while the state stands: the fast half of
:func:`~scheduler.core.decisions.reservation.take_back` (rule 6) in a full cluster.

In the live loop's steady state most waiting jobs ask whole GPUs and fewer than ``policy.reservation_depth``
reservations are made (their quota refuses them at the start found), so every such job's turn asks take-back, and
the plain rule (:func:`~scheduler.core.rules.eviction.backfill_candidates`) walks every running job of the job's
team and of each team over its guarantee, only to find, in a steady cycle, nothing or the same few. At 5,000 nodes /
50,000 pending that walk was 739 calls and 19 s of a 48-second cycle (``docs/benchmarks/loop.md``, 2026-12-06).

What the rule reads of the job: its team (which teams' work it looks at, the grounds within the team), priority and
preemptible flag (the grounds, :func:`~scheduler.core.rules.eviction.ground`; the order of pending work), its id
only through ``spared`` (the ping-pong window), and its submit time only in
:func:`~scheduler.core.rules.eviction.yields_to` — as a lower bound, never anything else: the running job must have
started after it, and, at the same priority, been submitted after it. So **a job submitted earlier is yielded to by
every job a later one is** (monotone in the submit time), and with the submit time pushed back to the earliest
there is (``-inf``, the *widest* job of the key) the rule finds every candidate any job of the key could. For a job
of the key, the rule's own candidates are then exactly the widest job's for which ``yields_to`` says yes for the job
itself: each other test of the rule (the team, the minimum runtime, the ground naming the reason, the preference
order) reads nothing of the submit time, and a sub-list of a sorted list keeps its order (the preference key ends
with the victim's id, so no two tie).

:class:`KeptBackfillCandidates` keeps, per (team, priority, preemptible flag), the widest job's candidates with each
one's running entry and borrowed flag, and gives a job those ``yields_to`` admits — one rule call per kept
candidate rather than a walk of the teams' running work, and nothing at all when no running work is past its minimum
runtime. What is kept is forgotten whenever the capacity index's ``version`` moves (any change of the state: who
runs where, hence who is borrowed and past what; a rolled-back Statement restores the state and the token
exactly). A job with ``spared`` jobs (it was evicted within the ping-pong window) asks the rule itself.
``tests/scheduler/core/speedups/test_takeback.py`` compares the candidates and whole steady cycles with the plain
rule's.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import replace

from scheduler.core.model.cluster_state import ClusterState
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Running
from scheduler.core.placement.index import CapacityIndex
from scheduler.core.rules.eviction import Candidate, backfill_candidates, yields_to
from scheduler.core.rules.fairshare import FairShare
from scheduler.core.speedups.memo import Memo

# A kept candidate: the rule's candidate for the widest job, its running entry, and whether it sits on borrowed
# capacity as the rule asks yields_to (fair share's idea: never without it).
_Kept = tuple[Candidate, Running, bool]


class KeptBackfillCandidates:
    """:func:`~scheduler.core.rules.eviction.backfill_candidates` (same signature, same answers), from the widest
    job's candidates kept per key while the capacity index's ``version`` stands (module doc)."""

    def __init__(self, index: CapacityIndex, memo: Memo) -> None:
        self.index = index
        self._version = -1
        self._widest: dict[Hashable, list[_Kept]] = memo.table()

    def __call__(
        self,
        state: ClusterState,
        fairness: FairShare,
        policy: Policy,
        now: float,
        job: Job,
        spared: frozenset[str],
    ) -> list[Candidate]:
        if spared:  # the ping-pong window reads the job's identity: the rule itself
            return backfill_candidates(state, fairness, policy, now, job, spared)
        if self.index.version != self._version:
            self._version = self.index.version
            self._widest.clear()
        key = (job.team, job.priority, job.preemptible)
        kept = self._widest.get(key)
        if kept is None:
            kept = self._widest[key] = self._kept(state, fairness, policy, now, job)
        return [candidate for candidate, entry, borrowed in kept if yields_to(job, entry, borrowed)]

    @staticmethod
    def _kept(state: ClusterState, fairness: FairShare, policy: Policy, now: float, job: Job) -> list[_Kept]:
        """The rule's candidates for ``job`` submitted at the earliest time there is, each with what ``yields_to``
        reads of it."""
        widest = replace(job, submitted_at=float("-inf"))
        found = backfill_candidates(state, fairness, policy, now, widest, frozenset())
        borrowed: dict[str, set[str]] = {}
        kept: list[_Kept] = []
        for candidate in found:
            team = candidate.job.team
            if team not in borrowed:
                borrowed[team] = set(fairness.borrowed(team, fairness.running_jobs(team))) if policy.fairness else set()
            victim = candidate.job.id
            kept.append((candidate, state.running[victim], victim in borrowed[team]))
        return kept
