"""Reclaim and preemption: which running jobs a pending job may evict, and the minimal set that makes room.

Rules (issue 3, capability 5). A pending job J of team T may evict a running job V of team U when none of
the protections applies and one of the grounds does:

Protections (V is never a candidate):
- V has ``production`` priority: production is never preempted.
- No ping-pong: V evicted J within ``policy.ping_pong_window_s`` (a :class:`Preemption` with victim J, by V,
  ``now - at < window``), so a victim cannot immediately preempt its preemptor back.
- Minimum runtime: V started less than ``policy.min_runtime_s`` ago — except when J is ``production``,
  which must run now (min-runtime exists to stop churn among ordinary work; production arrivals are rare).
- V was bound in this cycle (it is not running yet), or holds no slot on a schedulable GPU that J's
  ``gpu_model`` constraint accepts (evicting it could not help).

Grounds (the first that applies names the :class:`Evict` reason):
- ``"priority"``: U = T, V is preemptible and of lower priority than J. Priority preemption stays within a team.
- ``"reclaim"``: U ≠ T, V is preemptible and borrowed (:meth:`FairShare.borrowed_jobs`), and T is under its
  guarantee for J's class (:meth:`FairShare.under_guarantee`). After placement J must still be within T's
  guarantee (:meth:`FairShare.within_guarantee` on the slots found): a team reclaims up to its guarantee,
  never beyond. Only borrowed jobs are taken, so U keeps every job that fits in its own guarantee.
  Off when ``policy.fairness`` is off.
- ``"production"``: J is ``production`` and V has lower priority, in any team. Preemptible victims are tried
  before non-preemptible ones (sort key below), so non-preemptible work goes only when nothing else frees
  enough room.

Choice: candidates are ordered by (non-preemptible last, borrowed first, lower priority first, least work lost
since the last checkpoint — ``(now - max(started_at, last_checkpoint_at)) × GPU-equivalents`` — first, most
recently started first, id). The shortest prefix of that order after whose removal ``try_place()`` succeeds is
found (doubling then bisection: the same prefix as adding one by one when placement is monotone, in
O(log n) placement calls), then a pruning pass puts back, from the least preferred victim to the most
preferred, every victim the placement does not need; the result is minimal: putting back any one victim
makes ``try_place()`` fail. If removing every candidate does not make room, nothing is evicted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from scheduler.core.capacity import UNITS_PER_GPU, ClusterState, model_matches
from scheduler.core.demand import DemandKind
from scheduler.core.fairshare import PRIORITY_INDEX, FairShare, job_class, placement_units
from scheduler.core.plan import Evict
from scheduler.core.policy import Policy
from scheduler.core.rightsize import resolve
from scheduler.core.state import Job, Preemption, Slot
from scheduler.core.vocabulary import Priority

Slots = tuple[tuple[Slot, ...], ...]
TryPlace = Callable[[], Slots | None]

PRIORITY = "priority"
RECLAIM = "reclaim"
PRODUCTION = "production"


@dataclass(frozen=True, slots=True)
class Candidate:
    job: Job
    slots: Slots
    reason: str
    key: tuple[int, int, int, float, float, str]


def find_victims(
    state: ClusterState,
    job: Job,
    fairness: FairShare,
    try_place: TryPlace,
    policy: Policy,
    now: float,
    preemptions: Sequence[Preemption],
) -> tuple[list[Evict], Slots] | None:
    """A minimal set of evictions that lets ``job`` be placed, and the slots it gets; None if there is none.

    ``try_place()`` must return a placement for ``job`` on the state's currently free capacity, or None, and
    must leave the state as it found it; it should also return None when the placement would fail
    admission (:meth:`FairShare.admit`), so that evicting within the team can make room in its quota.

    On success the victims have been removed from ``state`` (recorded in the caller's open Statement, if
    any), ``job`` is NOT placed, and the returned slots are free: the caller places the job. The evictions
    come in victim-preference order, each with its reason and ``by=job.id``; the victims' teams have been
    reported to :meth:`FairShare.changed` (report them again if the caller rolls the evictions back). On
    None the state is unchanged.
    """
    allow_reclaim = policy.fairness and fairness.under_guarantee(job.team, job_class(job))
    found = _search(state, job, fairness, try_place, policy, now, preemptions, allow_reclaim)
    if found is not None and allow_reclaim and any(c.reason == RECLAIM for c in found[0]):
        victims, slots = found
        if not _within_guarantee_after(state, job, fairness, victims, slots):
            # The team would end above its guarantee: this is not a reclaim. Production may still take the
            # same victims on its own ground; anyone else searches again without reclaim.
            if job.priority == Priority.PRODUCTION:
                found = ([_as_production(c) for c in victims], slots)
            else:
                found = _search(state, job, fairness, try_place, policy, now, preemptions, False)
    if found is None:
        return None
    victims, slots = found
    for victim in victims:
        state.remove(victim.job.id)
    for team in sorted({victim.job.team for victim in victims}):
        fairness.changed(team)
    return [Evict(job=c.job.id, reason=c.reason, by=job.id) for c in victims], slots


def candidates(
    state: ClusterState,
    job: Job,
    fairness: FairShare,
    policy: Policy,
    now: float,
    preemptions: Sequence[Preemption],
    allow_reclaim: bool,
) -> list[Candidate]:
    """Every running job ``job`` may evict (module rules), in victim-preference order."""
    production = job.priority == Priority.PRODUCTION
    if not production and not allow_reclaim and not fairness.lower_preemptible(job.team, job.priority):
        return []  # no ground applies to anyone: only production and reclaim reach other teams
    my_rank = PRIORITY_INDEX[job.priority]
    kinds: dict[str, DemandKind | None] = {}
    evicted_me = {p.by for p in preemptions if p.victim == job.id and now - p.at < policy.ping_pong_window_s}
    found: list[Candidate] = []
    for team in fairness.teams_with_running():
        same_team = team == job.team
        # Each branch scans the team's running jobs at most once: the borrowed fill reuses the scan.
        if production:
            ids = fairness.running_jobs(team)
            borrowed_ids = fairness.borrowed(team, ids) if ids else ()
        elif same_team:
            ids = fairness.lower_preemptible(team, job.priority)
            borrowed_ids = fairness.borrowed(team) if ids else ()
        elif allow_reclaim and fairness.over_guarantee(team):
            ids = borrowed_ids = fairness.borrowed(team)
        else:
            continue
        if not ids:
            continue
        borrowed = set(borrowed_ids)
        for victim_id in ids:
            running = state.running[victim_id]
            victim = running.job
            rank = PRIORITY_INDEX[victim.priority]
            if victim.priority == Priority.PRODUCTION or victim_id in evicted_me:
                continue
            fresh = now - running.started_at < policy.min_runtime_s
            if same_team and victim.preemptible and rank > my_rank and not fresh:
                reason = PRIORITY
            elif not same_team and victim.preemptible and victim_id in borrowed and allow_reclaim and not fresh:
                reason = RECLAIM
            elif production and rank > my_rank:
                reason = PRODUCTION
            else:
                continue
            if not _could_help(
                state, fairness.running_spots(victim_id), job, policy, now, None if same_team else kinds
            ):
                continue
            since = max(running.started_at, running.last_checkpoint_at or running.started_at)
            units = sum(fairness.running_units(victim_id).values())
            lost = max(0.0, now - since) * units / UNITS_PER_GPU
            key = (int(not victim.preemptible), int(victim_id not in borrowed), -rank, lost, -running.started_at)
            found.append(Candidate(victim, state.placed[victim_id], reason, (*key, victim_id)))
    found.sort(key=lambda c: c.key)
    return found


def _could_help(
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


def _search(
    state: ClusterState,
    job: Job,
    fairness: FairShare,
    try_place: TryPlace,
    policy: Policy,
    now: float,
    preemptions: Sequence[Preemption],
    allow_reclaim: bool,
) -> tuple[list[Candidate], Slots] | None:
    """Shortest successful prefix, then pruning; explores inside its own Statement and always rolls back."""
    pool = candidates(state, job, fairness, policy, now, preemptions, allow_reclaim)
    if not pool:
        return None
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
        # Doubling: find a prefix length that succeeds, then bisect between the last failure and it.
        failed, length, slots = 0, 1, None
        while True:
            remove_to(length)
            slots = try_place()
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
        # Pruning: put back, least preferred first, each victim the placement can do without.
        victims = pool[:succeeded]
        kept: list[Candidate] = []
        for candidate in reversed(victims):
            state.place(candidate.job, candidate.slots)
            attempt = try_place()
            if attempt is not None:
                slots = attempt
            else:
                state.remove(candidate.job.id)
                kept.append(candidate)
        kept.reverse()
        return kept, slots
    finally:
        statement.rollback()


def _within_guarantee_after(
    state: ClusterState, job: Job, fairness: FairShare, victims: list[Candidate], slots: Slots
) -> bool:
    """Would ``job``'s team be within its guarantee once the victims are gone and ``job`` holds ``slots``?"""
    statement = state.begin()
    try:
        for victim in victims:
            state.remove(victim.job.id)
        return fairness.within_guarantee(job.team, placement_units(state, slots))
    finally:
        statement.rollback()


def _as_production(candidate: Candidate) -> Candidate:
    if candidate.reason != RECLAIM:
        return candidate
    return Candidate(candidate.job, candidate.slots, PRODUCTION, candidate.key)
