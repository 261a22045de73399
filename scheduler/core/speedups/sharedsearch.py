"""The reservation search shared by the jobs of one key while the state stands: the fast half of
:meth:`~scheduler.core.decisions.reservation.Reservations.reserve` (rule 2) in a full cluster, on top of the kept node
times of :mod:`.freetimes`.

In the live loop's steady state fewer than ``policy.reservation_depth`` reservations are made for most of the cycle
(the quota refuses the start found), so every capacity-blocked job asking whole GPUs searches its GPU models again:
1,717 searches at 5,000 nodes / 50,000 pending, 25 s of a 48-second cycle (``docs/benchmarks/loop.md``,
2026-12-06), most of it the nodes searched holder by holder where the job's own team runs preemptible work.

What a search reads of the job (:meth:`~scheduler.core.planning.run.Run.frees_at`,
:meth:`.freetimes.NodeTimes.reached_by`): its team, priority and preemptible flag, whether its team may reclaim
(``allow_reclaim``), its replicas, and its submit time — only in the backfill ground's time tests
(:func:`~scheduler.core.rules.eviction.yields_to`): a running job yields only if it started after the job was
submitted and, at the same priority, was itself submitted after it. So for a running job ``r`` and a job of
priority rank ``p``, those tests answer alike for every submit time on one side of one *bound* (:func:`submit_bound`):
``r``'s start when ``r`` has a lower priority, the earlier of its start and its submission at the same priority
(none above: it never yields). Two jobs of one key whose submit times fall between the same two bounds of every
running job on a node see the same times on that node, and between the same two bounds of every running job on the
nodes searched, the same answer.

:class:`SharedSearches` keeps, per key (the above, the nodes searched, GPUs per replica, reservations made) and while
the capacity index's ``version`` stands:

- the nodes on which no job of the key reaches anything (:meth:`~.freetimes.NodeTimes.reached_by` for the key's
  *widest* job, submitted at ``-inf``, which reaches whatever a later one does: each of its time tests is a lower
  bound on the submit time), and which hold no GPU of an earlier reservation: they take their kept times whatever
  the job, so their hosts are read in one order kept per node set (the first ``replicas`` of them suffice);
- the other nodes' times per band of the submit time between their running jobs' bounds, worked out by the plain
  path (:meth:`~.freetimes.KeptReservations._earliest`'s) for the first job of a band;
- the whole answer per band of the submit time between the bounds of every node that is not in the first set.

Bounds are taken over every running job on such a node (more than the ones that matter: narrower bands, never a
wrong one). ``tests/scheduler/core/speedups/test_sharedsearch.py`` compares every search with the plain one and
whole steady cycles with the speed-ups on and off.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Callable, Hashable
from dataclasses import dataclass, replace

from scheduler.core.decisions.reservation import GpuKey
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Running, Slots
from scheduler.core.model.tables import FORGET, Tables
from scheduler.core.model.vocabulary import PRIORITY_INDEX, Priority
from scheduler.core.placement.index import CapacityIndex, IndexedClusterState
from scheduler.core.rules.eviction import fresh_until
from scheduler.core.rules.fairshare import FairShare, job_class
from scheduler.core.speedups.freetimes import KeptReservations, NodeTimes

_Times = list[tuple[float, int]]  # (expected free, GPU index), sorted
_Host = tuple[float, int, str]  # (time a node hosts its k-th replica, -k, node)
_Answer = tuple[float, tuple[GpuKey, ...]] | None


def submit_bound(entry: Running, rank: int) -> float | None:
    """The submit time below which a job of priority rank ``rank`` passes the backfill ground's time tests against
    running ``entry`` (module doc), and at or above which it fails them; None when it fails them whatever its
    submit time (``entry`` has a higher priority)."""
    victim_rank = PRIORITY_INDEX[entry.job.priority]
    if victim_rank > rank:
        return entry.started_at
    if victim_rank == rank:
        return min(entry.started_at, entry.job.submitted_at)
    return None


def hosts_of(name: str, times: _Times, per_replica: int) -> list[_Host]:
    """The hosts the plain search files for node ``name`` with GPU ``times``: one per replica it can take."""
    return [(times[k * per_replica - 1][0], -k, name) for k in range(1, len(times) // per_replica + 1)]


@dataclass
class _Group:
    """What the jobs of one team, priority, reclaim standing, node set and count of reservations made share (module
    doc): which nodes move with the submit time and where, and what was worked out per band."""

    moving: list[str]  # the nodes whose times may depend on the job's submit time, in the search's order
    moving_set: frozenset[str]
    bounds: dict[str, list[float]]  # per moving node, the bounds of its running jobs that matter, sorted
    all_bounds: list[float]  # every moving node's bounds, sorted
    times: dict[Hashable, _Times]  # (preemptible, node, band) → its times
    hosts: dict[Hashable, list[_Host]]  # (preemptible, node, band, GPUs per replica) → its hosts
    answers: dict[Hashable, _Answer]  # (preemptible, replicas, GPUs per replica, band over all_bounds) → answer


class SharedSearches(KeptReservations):
    """:class:`~.freetimes.KeptReservations` whose searches are shared by the jobs of one key (module doc)."""

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
        super().__init__(state, index, policy, now, frees_at, bound, expected_end, fairness, tables)
        self._groups: dict[Hashable, _Group] = tables.table()
        self._still: dict[Hashable, list[_Host]] = tables.table()  # (nodes, per replica) → kept hosts, sorted

    def _earliest(self, job: Job, names: list[str], per_replica: int) -> tuple[float, tuple[GpuKey, ...]] | None:
        """The plain search's answer, shared with the earlier jobs of ``job``'s key in its band (module doc)."""
        if self.index.version != self._version:  # what the kept node times hold for, too
            self._version = self.index.version
            self._nodes.clear()
            self._ends.clear()
            self._groups.clear()
            self._still.clear()
        allow_reclaim = self.policy.fairness and self.fairness.under_guarantee(job.team, job_class(job))
        nodes = tuple(names)
        key = (job.team, job.priority, allow_reclaim, nodes, len(self.made))
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = self._group(job, names, allow_reclaim)
        submitted, preemptible = job.submitted_at, job.preemptible
        answer_key = (preemptible, job.replicas, per_replica, bisect_right(group.all_bounds, submitted))
        if answer_key in group.answers:
            return group.answers[answer_key]
        asked: dict[str, float] = {}
        free_at: dict[str, _Times] = {}
        hosts: list[_Host] = []
        for name in group.moving:
            node_key = (preemptible, name, bisect_right(group.bounds[name], submitted))
            times = group.times.get(node_key)
            if times is None:
                times = group.times[node_key] = self._moving_times(job, name, allow_reclaim, asked)
            free_at[name] = times
            hosts_key = (*node_key, per_replica)
            found = group.hosts.get(hosts_key)
            if found is None:
                found = group.hosts[hosts_key] = hosts_of(name, times, per_replica)
            hosts.extend(found)
        still = self._still.get((nodes, per_replica))
        if still is None:
            still = self._still[(nodes, per_replica)] = sorted(
                host for name in names for host in hosts_of(name, self._kept(name).times, per_replica)
            )
        first_still: list[_Host] = []
        for host in still:  # only the first ``replicas`` of them can be among the chosen
            if len(first_still) == job.replicas:
                break
            if host[2] not in group.moving_set:
                first_still.append(host)
        chosen = heapq.nsmallest(job.replicas, hosts + first_still)
        for _, _, name in chosen:
            if name not in free_at:
                free_at[name] = self._kept(name).times
        answer = group.answers[answer_key] = self._chosen(job, chosen, free_at, per_replica)
        return answer

    def _kept(self, name: str) -> NodeTimes:
        kept = self._nodes.get(name)
        if kept is None:
            kept = self._nodes[name] = self._node_times(name)
        return kept

    def _moving_times(self, job: Job, name: str, allow_reclaim: bool, asked: dict[str, float]) -> _Times:
        """The plain path's times on node ``name`` for ``job`` (:meth:`.freetimes.KeptReservations._earliest`)."""
        kept = self._kept(name)
        taken = any(node == name for node, _ in self._taken)
        if taken or kept.reached_by(job, allow_reclaim, self.policy.fairness):
            return self._searched(job, name, asked)
        return kept.times

    def _group(self, job: Job, names: list[str], allow_reclaim: bool) -> _Group:
        """Which of ``names`` may see different times for different jobs of ``job``'s group, and their bounds."""
        widest = replace(job, submitted_at=float("-inf"))
        taken_nodes = {node for node, _ in self._taken}
        moving: list[str] = []
        bounds: dict[str, list[float]] = {}
        every: set[float] = set()
        for name in names:
            kept = self._kept(name)
            if name not in taken_nodes and not kept.reached_by(widest, allow_reclaim, self.policy.fairness):
                continue
            moving.append(name)
            found = self._bounds(job, name)
            bounds[name] = found
            every.update(found)
        return _Group(moving, frozenset(moving), bounds, sorted(every), {}, {}, {})

    def _bounds(self, job: Job, name: str) -> list[float]:
        """The bounds (:func:`submit_bound`) of the running jobs on node ``name`` whose yielding to ``job`` could
        change when the node's GPUs are free for it: preemptible work other than production, of the job's team or
        borrowed (:func:`~scheduler.core.rules.eviction.may_yield`), whose minimum runtime ends before its expected
        end (else it frees its GPUs at that end either way: :meth:`~scheduler.core.planning.run.Run.frees_at`).
        They include every bound :meth:`~.freetimes.NodeTimes.reached_by` reads."""
        rank = PRIORITY_INDEX[job.priority]
        running = self.state.running
        found: set[float] = set()
        for gpu in self.state.node_gpus(name):
            for holder in gpu.holders():
                entry = running.get(holder)
                if entry is None or entry.job.priority == Priority.PRODUCTION or not entry.job.preemptible:
                    continue
                bound = submit_bound(entry, rank)
                if bound is None or max(self.now, fresh_until(entry, self.policy)) >= self._end(holder):
                    continue
                if entry.job.team == job.team or self.fairness.is_borrowed(entry.job.team, holder):
                    found.add(bound)
        return sorted(found)

    def _end(self, holder: str) -> float:
        end = self._ends.get(holder)
        if end is None:
            end = self._ends[holder] = self.expected_end(holder)
        return end
