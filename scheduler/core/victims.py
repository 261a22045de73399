"""Eviction candidates team by team, remembered for the cycle: the fast half of :func:`preemption.candidates`.

The rules (protections, grounds, preference order) are :mod:`scheduler.core.preemption`'s; this module
applies them to one team's running jobs and keeps the answer. A team's candidates for a pending job depend
only on:

- which of the team's snapshot-running jobs are still placed (:meth:`FairShare.running_jobs`): that also
  fixes which of them are borrowed (:meth:`FairShare.borrowed`, rule 4 of :mod:`fairshare`) and which are
  preemptible of lower priority (:meth:`FairShare.lower_preemptible`);
- the pending job's team (same or another), priority, whether it is production, whether reclaim is allowed,
  and what decides whether a victim's slots could help it (:func:`could_help`): its ``gpu_model``
  constraint and, for another team's victim, its request and kind (the demand per GPU model) and whether
  it states CPU or host memory;
- facts that stay put within a cycle: a running job's slots, priority, start and checkpoint times, ``now``
  and the policy, and which nodes are ready.

So :class:`Victims` keeps each team's list per (team, those job facts) together with the running-jobs tuple
it was computed for, and hands it out again while that tuple is unchanged (evictions change it; their undo
restores it). Ping-pong protection depends on the job's identity and is applied by the caller, after.
Readiness is the one cycle fact that can move: a MIG change closes its node (:mod:`placement.relayout`), so
the cycle builds a new :class:`Victims` after one. A list handed out must not be modified.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from operator import attrgetter

from scheduler.core.capacity import UNITS_PER_GPU, ClusterState, model_matches
from scheduler.core.demand import DemandKind
from scheduler.core.fairshare import PRIORITY_INDEX, FairShare
from scheduler.core.policy import Policy
from scheduler.core.rightsize import resolve
from scheduler.core.shape import Shape
from scheduler.core.speedups.memo import current_memo
from scheduler.core.state import Job, Slots
from scheduler.core.vocabulary import EvictionReason, Priority

_Facts = tuple[Job, int, bool, float, float, "Slots", tuple[tuple[str, bool], ...]]
_PRODUCTION_RANK = PRIORITY_INDEX[Priority.PRODUCTION]

PRIORITY = EvictionReason.PRIORITY
RECLAIM = EvictionReason.RECLAIM
PRODUCTION = EvictionReason.PRODUCTION


@dataclass(frozen=True, slots=True)
class Candidate:
    job: Job
    slots: Slots
    reason: EvictionReason
    key: tuple[int, int, int, float, float, str]


_Grounded = tuple[tuple[tuple[str, bool], ...], Candidate]  # a candidate with its (node, holds MIG) pairs


class Victims:
    """Per-cycle memory of each team's eviction candidates (module doc) for ``state``, ``fairness``, ``policy``
    and ``now``; valid while no node's readiness changes."""

    def __init__(self, state: ClusterState, fairness: FairShare, policy: Policy, now: float) -> None:
        self.state = state
        self.fairness = fairness
        self.policy = policy
        self.now = now
        memo = current_memo()
        self._lists: dict[Hashable, tuple[tuple[str, ...], list[Candidate]]] = memo.table()
        # Per running job: what the rules read of it, fixed for the cycle.
        self._facts: dict[str, _Facts] = memo.table()
        # Job facts → spot → could_help there.
        self._spot_helps: dict[Hashable, dict[tuple[str, bool], bool]] = memo.table()
        self._grounds: dict[Hashable, tuple[tuple[str, ...], list[_Grounded]]] = memo.table()

    def of_team(self, team: str, job: Job, allow_reclaim: bool) -> list[Candidate]:
        """The candidates of ``team``'s running jobs for ``job`` (preemption rules, ping-pong aside), in
        victim-preference order; [] when no ground reaches the team. Do not modify the list."""
        fairness = self.fairness
        production = job.priority == Priority.PRODUCTION
        same_team = team == job.team
        if not (production or same_team or (allow_reclaim and fairness.over_guarantee(team))):
            return []
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
        # could_help, spot by spot, remembered per job facts and then per spot (a spot's node and grain are
        # fixed): one lookup of the facts per scan, so that the loop hashes spots only, never a Request.
        spot_helps = self._spot_helps.setdefault(helps_key, {})
        found: list[Candidate] = []
        for spots, candidate in self._grounded(team, job, running, allow_reclaim):
            for spot in spots:
                answer = spot_helps.get(spot)
                if answer is None:
                    answer = spot_helps[spot] = could_help(state, (spot,), job, policy, now, kinds)
                if answer:
                    found.append(candidate)
                    break
        found.sort(key=by_key)  # in preference order: the pool is a merge of these runs
        return found

    def _grounded(
        self, team: str, job: Job, running: tuple[str, ...], allow_reclaim: bool
    ) -> list[tuple[tuple[tuple[str, bool], ...], Candidate]]:
        """The team's running jobs that a protection spares and a ground reaches, with their spots: what the
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
            victim, rank, fresh, lost, neg_started, slots, spots = facts
            reason = ground(job, victim, victim_id in borrowed, allow_reclaim, fresh, self.policy)
            if reason is None:
                continue
            key = (int(not victim.preemptible), int(victim_id not in borrowed), -rank, lost, neg_started, victim_id)
            found.append((spots, Candidate(victim, slots, reason, key)))
        self._grounds[context] = (running, found)
        return found

    def _victim_facts(self, victim_id: str) -> _Facts:
        """A running job's facts the rules read: job, priority rank, fresh (min runtime), work lost since its
        checkpoint, minus its start, slots and spots — none of which changes within the cycle."""
        entry = self.state.running[victim_id]
        fairness = self.fairness
        since = max(entry.started_at, entry.last_checkpoint_at or entry.started_at)
        units = sum(fairness.running_units(victim_id).values())
        lost = max(0.0, self.now - since) * units / UNITS_PER_GPU
        fresh = self.now - entry.started_at < self.policy.min_runtime_s
        rank = PRIORITY_INDEX[entry.job.priority]
        slots = self.state.placed[victim_id]
        return (entry.job, rank, fresh, lost, -entry.started_at, slots, fairness.running_spots(victim_id))


by_key = attrgetter("key")  # sort candidates in victim-preference order


def ground(
    job: Job, victim: Job, borrowed: bool, allow_reclaim: bool, fresh: bool, policy: Policy
) -> EvictionReason | None:
    """The first ground of :mod:`preemption` on which ``job`` may evict running ``victim`` — ``borrowed``: the
    victim sits on borrowed capacity; ``allow_reclaim``: the job's team may reclaim from other teams; ``fresh``:
    the victim is within its minimum runtime — or None. The one statement of the grounds: the candidate scan
    and the reservations' expected-free times (:mod:`reservation`) both ask it."""
    rank = PRIORITY_INDEX[victim.priority]
    if rank == _PRODUCTION_RANK:
        return None
    lower = rank > PRIORITY_INDEX[job.priority]
    same_team = victim.team == job.team
    if victim.preemptible and not fresh:
        if same_team and lower:
            return PRIORITY
        if borrowed and (reclaims_own(job, policy) if same_team else allow_reclaim):
            return RECLAIM  # the team's own borrowed work, or (reclaim allowed) another team's
    if job.priority == Priority.PRODUCTION and lower:
        return PRODUCTION
    return None


def reclaims_own(job: Job, policy: Policy) -> bool:
    """Does ``job`` take back its own team's borrowed preemptible work (:mod:`preemption`'s same-team
    ``"reclaim"`` ground)? Non-preemptible work other than production, under fair share."""
    return policy.fairness and not job.preemptible and job.priority != Priority.PRODUCTION


def could_help(
    state: ClusterState,
    spots: tuple[tuple[str, bool], ...],
    job: Job,
    policy: Policy,
    now: float,
    kinds: dict[str, DemandKind | None] | None,
) -> bool:
    """Does some spot of the victim (:meth:`FairShare.running_spots`: a node and whether the slot there is a
    MIG instance) sit on a ready GPU ``job`` accepts and, when ``kinds`` is given, free capacity of the grain
    the job needs there? Layouts are fixed within a cycle, so a MIG demand takes only a free instance and a
    whole or shared demand only a GPU without a layout: a slot of the other grain frees nothing the job can
    use — unless the job also needs the node's host CPU or memory, which any victim on the node frees.
    ``kinds`` caches the job's demand kind per GPU model (None: the model cannot serve it); pass None for a
    victim of the job's own team, whose eviction also frees the team's quota, whatever its grain."""
    for node_name, mig_slot in spots:
        node = state.nodes[node_name]
        ready = node.reconfiguring_until is None or node.reconfiguring_until <= now
        if not (node.schedulable and ready and model_matches(node.gpu_model, job.gpu_model)):
            continue
        if kinds is None:
            return True
        if node.gpu_model not in kinds:
            demand = resolve(job, node.gpu_model, policy)
            kinds[node.gpu_model] = demand.kind if demand is not None else None
        kind = kinds[node.gpu_model]
        if kind is None:
            continue
        if mig_slot == (kind == DemandKind.MIG) or _host_bound(state, node_name, job):
            return True
    return False


def _host_bound(state: ClusterState, node_name: str, job: Job) -> bool:
    """Could the node's host CPU or memory be what keeps ``job`` off it (traces state them)?"""
    node = state.nodes[node_name]
    return bool((job.cpu_milli and node.cpu_milli is not None) or (job.memory_mib and node.memory_mib is not None))
