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

:class:`SharedSearches` keeps, while the capacity index's ``version`` stands:

- per node set and GPUs per replica, the hosts of every node at its kept times, sorted;
- per key (the above, the nodes searched, GPUs per replica, reservations made), the *moving* nodes: those on which
  the key's *widest* job, submitted at ``-inf``, reaches something (:meth:`~.freetimes.NodeTimes.reached_by`: it
  reaches whatever a later job of the key does, each of its time tests being a lower bound on the submit time), or
  that hold a GPU of an earlier reservation. Every other node takes its kept times whatever the job, so of those only
  the first ``replicas`` hosts in the kept order can be chosen;
- per moving node, the bounds of the running jobs on it whose yielding could change a time (:meth:`_bounds`), and
  its times and hosts per *band* of the submit time between them, worked out by the plain path
  (:meth:`~.freetimes.KeptReservations._earliest`'s) for the first job of a band;
- per key, the moving nodes sorted by the least host they could offer: their host at band 0 (the widest job's).
  A GPU's time only falls as the submit time does (a holder that yields frees it no later than its end), so every
  host of a node at any band comes no earlier, in the search's order (time, more replicas, name), than that host at
  band 0. The nodes are walked in that order, keeping the ``replicas`` least hosts found, and the walk stops at the
  first node whose least host comes after the last of them: no later node can displace one;
- the answer per band of the submit time between the bounds of every moving node.

A bound taken where it does not matter only narrows a band, never joins two that differ.
``tests/scheduler/core/speedups/test_sharedsearch.py`` compares every search with the plain one for many submit
times per key (through holds, evictions and their undo), and the bound with the backfill ground's time tests;
whole steady cycles are compared with the speed-ups on and off there and in ``test_freetimes.py``.
"""

from __future__ import annotations

from bisect import bisect_right, insort
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
    """What the jobs of one key share (module doc): which nodes move with the submit time and where, their hosts
    at the earliest submit time (the least each can offer), and what was worked out per band."""

    moving: frozenset[str]  # the nodes whose times may depend on the job's submit time
    bounds: dict[str, list[float]]  # per moving node, the bounds of its running jobs that matter, sorted
    all_bounds: list[float]  # every moving node's bounds, sorted
    least: list[tuple[_Host, str]]  # per moving node with a host, its first host at band 0 (the least), sorted
    answers: dict[tuple[int, int], _Answer]  # (replicas, band over all_bounds) → the answer


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
        self._shared_version = -1  # the capacity index's version the tables below hold for
        self._groups: dict[Hashable, _Group] = tables.table()
        self._still: dict[Hashable, list[_Host]] = tables.table()  # (nodes, per replica) → kept hosts, sorted
        # (what the times read of the job and of the reservations made, node, band) → times; with the GPUs per
        # replica too → hosts. Shared by every group the key's node sets and replica sizes make.
        self._bands: dict[Hashable, _Times] = tables.table()
        self._hosts: dict[Hashable, list[_Host]] = tables.table()
        self._bounds_of: dict[Hashable, list[float]] = tables.table()  # (team, priority, node) → its bounds

    def _earliest(self, job: Job, names: list[str], per_replica: int) -> tuple[float, tuple[GpuKey, ...]] | None:
        """The plain search's answer, shared with the earlier jobs of ``job``'s key in its band (module doc)."""
        if self.index.version != self._version:  # the kept node times' own
            self._version = self.index.version
            self._nodes.clear()
            self._ends.clear()
        if self.index.version != self._shared_version:
            self._shared_version = self.index.version
            self._groups.clear()
            self._still.clear()
            self._bands.clear()
            self._hosts.clear()
            self._bounds_of.clear()
        allow_reclaim = self.policy.fairness and self.fairness.under_guarantee(job.team, job_class(job))
        nodes = tuple(names)
        key = (job.team, job.priority, job.preemptible, allow_reclaim, nodes, per_replica, len(self.made))
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = self._group(job, names, per_replica, allow_reclaim)
        submitted, replicas = job.submitted_at, job.replicas
        answer_key = (replicas, bisect_right(group.all_bounds, submitted))
        if answer_key in group.answers:
            return group.answers[answer_key]
        still = self._still.get((nodes, per_replica))
        if still is None:
            still = self._still[(nodes, per_replica)] = sorted(
                host for name in names for host in hosts_of(name, self._kept(name).times, per_replica)
            )
        best: list[_Host] = []  # the least hosts found so far, sorted, at most ``replicas``
        for host in still:  # only the first ``replicas`` of the nodes that do not move can be among the chosen
            if len(best) == replicas:
                break
            if host[2] not in group.moving:
                best.append(host)
        free_at: dict[str, _Times] = {}
        asked: dict[str, float] = {}
        reads = (job.team, job.priority, job.preemptible, allow_reclaim, len(self.made))
        for least, name in group.least:
            if len(best) == replicas and least > best[-1]:
                break  # this node's hosts, and every later node's, come after the chosen ones at any submit time
            band = bisect_right(group.bounds[name], submitted)
            times, hosts = self._band(job, reads, allow_reclaim, name, band, per_replica, asked)
            free_at[name] = times
            for host in hosts:
                if len(best) == replicas:
                    if host > best[-1]:
                        break  # the node's hosts, sorted, come after it too
                    best.pop()
                insort(best, host)
        for _, _, name in best:
            if name not in free_at:
                free_at[name] = self._kept(name).times
        answer = group.answers[answer_key] = self._chosen(job, best, free_at, per_replica)
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

    def _band(
        self,
        job: Job,
        reads: Hashable,
        allow_reclaim: bool,
        name: str,
        band: int,
        per_replica: int,
        asked: dict[str, float],
    ) -> tuple[_Times, list[_Host]]:
        """Node ``name``'s times and hosts for the jobs of ``reads`` (what its times read of them: ``job``'s team,
        priority and preemptible flag, ``allow_reclaim``, the reservations made) whose submit time lies in its
        ``band``, worked out for ``job`` the first time one asks."""
        key = (reads, name, band)
        times = self._bands.get(key)
        if times is None:
            times = self._bands[key] = self._moving_times(job, name, allow_reclaim, asked)
        hosts = self._hosts.get((key, per_replica))
        if hosts is None:
            # Sorted: a later replica at the same time comes first (its -k is less), so the filing order is not.
            hosts = self._hosts[(key, per_replica)] = sorted(hosts_of(name, times, per_replica))
        return times, hosts

    def _group(self, job: Job, names: list[str], per_replica: int, allow_reclaim: bool) -> _Group:
        """Which of ``names`` may see different times for different jobs of ``job``'s key, their bounds, and their
        least hosts (at band 0, the times of the key's widest job: each GPU's time only falls as the submit time
        does, and so does each host's)."""
        widest = replace(job, submitted_at=float("-inf"))
        reads = (job.team, job.priority, job.preemptible, allow_reclaim, len(self.made))
        taken_nodes = {node for node, _ in self._taken}
        moving: set[str] = set()
        bounds: dict[str, list[float]] = {}
        every: set[float] = set()
        least: list[tuple[_Host, str]] = []
        asked: dict[str, float] = {}
        for name in names:
            kept = self._kept(name)
            if name not in taken_nodes and not kept.reached_by(widest, allow_reclaim, self.policy.fairness):
                continue
            moving.add(name)
            found = self._bounds_cached(job, name)
            bounds[name] = found
            every.update(found)
            _, hosts = self._band(widest, reads, allow_reclaim, name, 0, per_replica, asked)
            if hosts:
                least.append((hosts[0], name))
        least.sort()
        return _Group(frozenset(moving), bounds, sorted(every), least, {})

    def _bounds_cached(self, job: Job, name: str) -> list[float]:
        key = (job.team, job.priority, name)
        found = self._bounds_of.get(key)
        if found is None:
            found = self._bounds_of[key] = self._bounds(job, name)
        return found

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
