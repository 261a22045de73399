"""The reservation search's expected-free times, kept per node while the state stands: the fast half of
:meth:`~scheduler.core.decisions.reservation.Reservations.reserve` (rule 2).

The plain search asks, for every GPU of every node of a GPU model, when each job on it frees it for the reserving
job (:meth:`~scheduler.core.planning.run.Run.frees_at`): its expected end, or earlier when the job may evict it
or it would yield to the job. In a full cluster every blocked job of an over-quota team searches the whole model
again only to be refused by its quota, and at 5,000 nodes a steady cycle spent minutes there. Most of that work
does not depend on the job: ``frees_at`` is the holder's expected end unless the holder is *reachable* by the job —

- the job is production and the holder running work other than production (the production ground), or
- the holder is running preemptible work other than production, of the job's team (the priority and reclaim grounds
  within the team, the backfill ground) or borrowed (reclaim across teams, the backfill ground on borrowed capacity).

Every other holder frees its GPUs at its expected end whoever asks (the grounds and
:func:`~scheduler.core.rules.eviction.yields_to` all need one of these), and so does a reachable one whose minimum
runtime ends no earlier than its expected end. Of borrowed work of another team, only a job whose team may reclaim
reaches it on a ground; else only by the backfill ground: when the work started while the job waited and is queued
behind it — a lower priority, or the same and a later submission. So :class:`KeptReservations` keeps, per node, the
GPUs' times from expected ends alone (sorted as the search sorts them) and a summary of what a job could reach
there (:class:`NodeTimes`); a node on which the job reaches nothing, and with no GPU of an earlier reservation,
takes the kept times, and any other node is searched as before, each holder asked once per search. What is kept is
forgotten whenever the capacity index's ``version`` moves (any change to the state; a rolled-back Statement
restores it, and the state is then exactly as it was): expected ends, borrowed work and who holds what all follow
from the state.
``tests/scheduler/core/speedups/test_freetimes.py`` compares the searches with the plain ones.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from scheduler.core.decisions.reservation import GpuKey, Reservations
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Slots
from scheduler.core.model.tables import FORGET, Tables
from scheduler.core.model.vocabulary import PRIORITY_INDEX, Priority
from scheduler.core.placement.index import CapacityIndex, IndexedClusterState
from scheduler.core.rules.eviction import fresh_until
from scheduler.core.rules.fairshare import FairShare, job_class

_Times = list[tuple[float, int]]  # (expected free, GPU index), sorted


@dataclass(frozen=True, slots=True)
class NodeTimes:
    """One node's GPUs (without a MIG layout) freed at their holders' expected ends, and what a job could reach
    there (module doc): its running work other than production (``lower``, what the production ground reaches), and
    of its preemptible work other than production that frees its GPUs earlier once past its minimum runtime, the
    teams (``teams``) and, for the borrowed part, per priority rank the latest start and the latest of (start,
    submission) taken together (``borrowed``: what the backfill ground on borrowed capacity asks)."""

    times: _Times
    lower: bool
    teams: frozenset[str]
    borrowed: dict[int, tuple[float, float]]

    def __init__(
        self, times: _Times, lower: bool, teams: frozenset[str], borrowed: dict[int, tuple[float, float]]
    ) -> None:
        object.__setattr__(self, "times", times)
        object.__setattr__(self, "lower", lower)
        object.__setattr__(self, "teams", teams)
        object.__setattr__(self, "borrowed", borrowed)

    def reached_by(self, job: Job, allow_reclaim: bool, fairness: bool) -> bool:
        """Could ``job`` see any GPU here freed before its holders' expected ends? ``allow_reclaim``: the job's team
        may reclaim from other teams; ``fairness``: the policy's."""
        if job.priority == Priority.PRODUCTION:
            return self.lower  # the production ground reaches all of it, at once; production work stays
        if job.team in self.teams:
            return True  # the grounds within the team, or its own work yielding: asked holder by holder
        if not self.borrowed or allow_reclaim:
            return bool(self.borrowed)  # reclaim across teams takes any borrowed work
        if not fairness:
            return False  # no borrowed work without fair share, so none yields
        rank = PRIORITY_INDEX[job.priority]
        submitted = job.submitted_at
        for victim_rank, (started, both) in self.borrowed.items():
            # It yields when it started while the job waited and is queued behind it (yields_to).
            if (victim_rank > rank and started > submitted) or (victim_rank == rank and both > submitted):
                return True
        return False


class KeptReservations(Reservations):
    """:class:`~scheduler.core.decisions.reservation.Reservations` whose search reads the kept node times (module
    doc); ``expected_end(holder)`` and ``fairness`` are the cycle's (the plain search reaches them through
    ``frees_at``)."""

    def __init__(
        self,
        state: IndexedClusterState,
        index: CapacityIndex,
        policy: Policy,
        now: float,
        frees_at: Callable[[Job, str], float],
        bound: Callable[[Slots], None],
        expected_end: Callable[[str], float],
        fairness: FairShare,
        tables: Tables = FORGET,
    ) -> None:
        super().__init__(state, index, policy, now, frees_at, bound, tables)
        self.expected_end = expected_end
        self.fairness = fairness
        self._version = -1
        self._nodes: dict[str, NodeTimes] = {}
        self._ends: dict[str, float] = {}

    def _earliest(self, job: Job, names: list[str], per_replica: int) -> tuple[float, tuple[GpuKey, ...]] | None:
        """The plain search's answer (same hosts, same order), from kept times on the nodes ``job`` reaches
        nothing on."""
        if self.index.version != self._version:
            self._version = self.index.version
            self._nodes.clear()
            self._ends.clear()
        taken_nodes = {node for node, _ in self._taken}
        allow_reclaim = self.policy.fairness and self.fairness.under_guarantee(job.team, job_class(job))
        asked: dict[str, float] = {}  # holder → when it frees its GPUs for the job, asked once per search
        hosts: list[tuple[float, int, str]] = []
        free_at: dict[str, _Times] = {}
        for name in names:
            kept = self._nodes.get(name)
            if kept is None:
                kept = self._nodes[name] = self._node_times(name)
            times = (
                self._searched(job, name, asked)
                if name in taken_nodes or kept.reached_by(job, allow_reclaim, self.policy.fairness)
                else kept.times
            )
            free_at[name] = times
            for k in range(1, len(times) // per_replica + 1):
                hosts.append((times[k * per_replica - 1][0], -k, name))
        return self._chosen(job, hosts, free_at, per_replica)

    def _searched(self, job: Job, name: str, asked: dict[str, float]) -> _Times:
        """The plain search's times on one node, each holder asked once."""
        times: _Times = []
        for gpu in self.state.node_gpus(name):
            if gpu.layout or gpu.key in self._taken:
                continue
            if gpu.idle:
                times.append((self.now, gpu.index))
                continue
            latest = None
            for holder in sorted(gpu.holders()):  # the plain search's order: a tie keeps the first
                at = asked.get(holder)
                if at is None:
                    at = asked[holder] = self.frees_at(job, holder)
                latest = at if latest is None or at > latest else latest
            assert latest is not None
            times.append((latest, gpu.index))
        times.sort()
        return times

    def _node_times(self, name: str) -> NodeTimes:
        times: _Times = []
        teams: set[str] = set()
        borrowed: dict[int, tuple[float, float]] = {}
        lower = False
        running = self.state.running
        for gpu in self.state.node_gpus(name):
            if gpu.layout:
                continue
            if gpu.idle:
                times.append((self.now, gpu.index))
                continue
            latest = None
            for holder in sorted(gpu.holders()):
                end = self._ends.get(holder)
                if end is None:
                    end = self._ends[holder] = self.expected_end(holder)
                latest = end if latest is None or end > latest else latest
                entry = running.get(holder)
                if entry is None or entry.job.priority == Priority.PRODUCTION:
                    continue  # bound this cycle, a placeholder, or production: frees its GPUs at its end for all
                lower = True
                victim = entry.job
                if not victim.preemptible or max(self.now, fresh_until(entry, self.policy)) >= end:
                    continue  # no ground but production's reaches it, or reaching it frees nothing earlier
                teams.add(victim.team)
                if self.fairness.is_borrowed(victim.team, holder):
                    rank = PRIORITY_INDEX[victim.priority]
                    started, both = borrowed.get(rank, (float("-inf"), float("-inf")))
                    start = entry.started_at
                    borrowed[rank] = (max(started, start), max(both, min(start, victim.submitted_at)))
            assert latest is not None
            times.append((latest, gpu.index))
        times.sort()
        return NodeTimes(times, lower, frozenset(teams), borrowed)
