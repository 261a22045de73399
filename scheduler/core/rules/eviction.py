"""Eviction: which running jobs a pending job may evict, and on which ground — reclaim, priority, production.

A pending job J of team T may evict a running job V of team U when none of
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
- ``"reclaim"``, from the team itself: U = T, J is not preemptible (and not production), V is preemptible and
  borrowed, at any priority. Admission counts only T's non-preemptible work against the guarantee, so J is
  within it; the team's own borrowed work yields the capacity instead of blocking J (as KAI's proportion
  plugin reclaims for a queue within its deserved share). Off when ``policy.fairness`` is off.
- ``"reclaim"``, from another team: U ≠ T, V is preemptible and borrowed (:meth:`FairShare.borrowed_jobs`),
  and T is under its guarantee for J's class (:meth:`FairShare.under_guarantee`). After placement J must
  still be within T's guarantee (:meth:`FairShare.within_guarantee` on the slots found): a team reclaims up
  to its guarantee, never beyond. Only borrowed jobs are taken, so U keeps every job that fits in its own
  guarantee. Off when ``policy.fairness`` is off.
- ``"production"``: J is ``production`` and V has lower priority, in any team. Preemptible victims are tried
  before non-preemptible ones (sort key below), so non-preemptible work goes only when nothing else frees
  enough room.

The backfill ground stands apart: it is asked only by a job whose turn may make a reservation
(:mod:`scheduler.core.decisions.reservation`, rule 6), and reaches only work that started while that job waited.

- ``"backfill"``: V is preemptible (not production), comes after J in the order (:func:`queued_behind`: lower
  priority, or the same and submitted later), started after J was submitted, and is J's own team's work or
  sits on borrowed capacity (:func:`yields_to`). Such work took GPUs J could not use yet — a reservation's
  held GPUs, or free ones that did not hold J — and yields them when J can start on them: *yielded to the
  reservation it backfilled*. Work within another team's guarantee never yields, as it never yields to a
  reclaim. The minimum runtime and ping-pong protections apply as to every ground but production's.

Choice: candidates are ordered by (non-preemptible last, borrowed first, lower priority first, least work lost
since the last checkpoint (:func:`lost_work`: ``(now - max(started_at, last_checkpoint_at)) × GPU-equivalents``)
first, most recently started first, id): a :class:`Candidate`'s ``key`` (:func:`preference`). A reclaim must
leave the team within its guarantee once the job is placed (:func:`within_guarantee_after`), else it is none:
production then takes the same victims on its own ground (:func:`as_production`), anyone else searches again
without reclaim.

One order, two ways of gathering a team's candidates (as Kueue's one ``CandidatesOrdering`` in
``pkg/scheduler/preemption/common/ordering.go`` serves both its plain and its cache-backed candidate generators
in ``pkg/scheduler/preemption/classical/``): :func:`team_candidates` here is the rule, read plainly — every
running job of the team, each protection and ground asked, sorted by :func:`preference`; the cycle's
:class:`scheduler.core.speedups.victims.Victims` gives the same list from memory while the team's running jobs
stay put, asking the same :func:`ground`, :func:`is_fresh`, :func:`lost_work`, :func:`preference` and
:func:`could_help`. With the speed-ups off the engine asks :func:`team_candidates`. Which candidates make room,
and the fewest of them, is :mod:`scheduler.core.decisions.preemption`'s search.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter

from scheduler.core.gpus.units import UNITS_PER_GPU
from scheduler.core.model.cluster_state import ClusterState, model_matches
from scheduler.core.model.demand import DemandKind
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Running, Slots
from scheduler.core.model.vocabulary import PRIORITY_INDEX, EvictionReason, Priority
from scheduler.core.rules.fairshare import FairShare
from scheduler.core.rules.limits import placement_units
from scheduler.core.sizing.rightsize import resolve

_PRODUCTION_RANK = PRIORITY_INDEX[Priority.PRODUCTION]


# A victim's place in the order (module doc), least first: (non-preemptible 0/1, not borrowed 0/1, -priority index,
# lost work, -started at, job id). Of any length so that the compiled engine keeps it a Python tuple, as the order's
# keys (scheduler.core.rules.fairshare.JobKey).
Preference = tuple[int | float | str, ...]


@dataclass(frozen=True, slots=True)
class Candidate:
    job: Job
    slots: Slots
    reason: EvictionReason
    key: Preference

    def __init__(self, job: Job, slots: Slots, reason: EvictionReason, key: Preference) -> None:
        object.__setattr__(self, "job", job)
        object.__setattr__(self, "slots", slots)
        object.__setattr__(self, "reason", reason)
        object.__setattr__(self, "key", key)


by_key = attrgetter("key")  # sort candidates in victim-preference order


def is_fresh(running: Running, policy: Policy, now: float) -> bool:
    """Is ``running`` within its minimum runtime (started less than ``policy.min_runtime_s`` ago)? Fresh
    preemptible work is protected from every ground but production's (:func:`ground`)."""
    return now - running.started_at < policy.min_runtime_s


def fresh_until(running: Running, policy: Policy) -> float:
    """When ``running`` stops being fresh (:func:`is_fresh`): its start plus the minimum runtime."""
    return running.started_at + policy.min_runtime_s


def lost_work(running: Running, units: int, now: float) -> float:
    """The work (GPU-seconds) that evicting ``running``, holding ``units``, throws away at ``now``: the time since
    its last checkpoint (or its start, when it has none or checkpointed before it started) times its
    GPU-equivalents."""
    since = max(running.started_at, running.last_checkpoint_at or running.started_at)
    return max(0.0, now - since) * units / UNITS_PER_GPU


def preference(victim: Job, borrowed: bool, lost: float, started_at: float) -> Preference:
    """``victim``'s place in the victims' order (module doc; least is evicted first): non-preemptible last,
    borrowed first, lower priority first, least :func:`lost_work` first, most recently started first, then the
    id, so that no two victims tie."""
    rank = PRIORITY_INDEX[victim.priority]
    return (int(not victim.preemptible), int(not borrowed), -rank, lost, -started_at, victim.id)


def reaches(fairness: FairShare, team: str, job: Job, allow_reclaim: bool) -> bool:
    """Can any ground reach ``team``'s running jobs for ``job``? Production reaches every team and a job its own;
    reclaim reaches another team only while it is over its guarantee (only then does it hold borrowed work)."""
    production = job.priority == Priority.PRODUCTION
    return production or team == job.team or (allow_reclaim and fairness.over_guarantee(team))


def team_candidates(
    state: ClusterState, fairness: FairShare, policy: Policy, now: float, team: str, job: Job, allow_reclaim: bool
) -> list[Candidate]:
    """The rule itself: every running job of ``team`` that ``job`` may evict (protections and grounds, ping-pong
    aside: it depends on the job's history, the caller applies it) and whose slots could help it, in
    victim-preference order. :class:`~scheduler.core.speedups.victims.Victims` answers the same from memory."""
    if not reaches(fairness, team, job, allow_reclaim):
        return []
    running = fairness.running_jobs(team)
    borrowed = set(fairness.borrowed(team, running))
    kinds: dict[str, DemandKind | None] | None = None if team == job.team else {}
    found: list[Candidate] = []
    for victim_id in running:
        entry = state.running[victim_id]
        victim_borrowed = victim_id in borrowed
        reason = ground(job, entry.job, victim_borrowed, allow_reclaim, is_fresh(entry, policy, now), policy)
        if reason is None or not could_help(state, fairness.running_slot_nodes(victim_id), job, policy, now, kinds):
            continue
        lost = lost_work(entry, sum(fairness.running_units(victim_id).values()), now)
        key = preference(entry.job, victim_borrowed, lost, entry.started_at)
        found.append(Candidate(entry.job, state.placed[victim_id], reason, key))
    found.sort(key=by_key)
    return found


def ground(
    job: Job, victim: Job, borrowed: bool, allow_reclaim: bool, fresh: bool, policy: Policy
) -> EvictionReason | None:
    """The first ground (module doc) on which ``job`` may evict running ``victim`` — ``borrowed``: the
    victim sits on borrowed capacity; ``allow_reclaim``: the job's team may reclaim from other teams; ``fresh``:
    the victim is within its minimum runtime — or None. The one statement of the grounds: the candidate scan
    and the reservations' expected-free times (:mod:`~scheduler.core.decisions.reservation`) both ask it."""
    rank = PRIORITY_INDEX[victim.priority]
    if rank == _PRODUCTION_RANK:
        return None
    lower = rank > PRIORITY_INDEX[job.priority]
    same_team = victim.team == job.team
    if victim.preemptible and not fresh:
        if same_team and lower:
            return EvictionReason.PRIORITY
        if borrowed and (reclaims_own(job, policy) if same_team else allow_reclaim):
            return EvictionReason.RECLAIM  # the team's own borrowed work, or (reclaim allowed) another team's
    if job.priority == Priority.PRODUCTION and lower:
        return EvictionReason.PRODUCTION
    return None


def queued_behind(victim: Job, job: Job) -> bool:
    """Does ``victim`` come after ``job`` in the order of pending work: a lower priority, or the same priority and
    a later submission? Never both ways round, so two jobs never yield to each other."""
    victim_rank, job_rank = PRIORITY_INDEX[victim.priority], PRIORITY_INDEX[job.priority]
    return victim_rank > job_rank or (victim_rank == job_rank and victim.submitted_at > job.submitted_at)


def may_yield(victim: Job, job: Job, borrowed: bool) -> bool:
    """Would ``victim``, running, yield its GPUs to pending ``job`` on the backfill ground (module doc) once it
    has started? Preemptible work other than production, behind ``job`` in the order, of ``job``'s team or on
    borrowed capacity."""
    if not victim.preemptible or victim.priority == Priority.PRODUCTION or not queued_behind(victim, job):
        return False
    return borrowed or victim.team == job.team


def yields_to(job: Job, running: Running, borrowed: bool) -> bool:
    """The backfill ground (module doc): did ``running`` start while ``job`` waited, and would it yield to it?"""
    return running.started_at > job.submitted_at and may_yield(running.job, job, borrowed)


def backfill_candidates(
    state: ClusterState, fairness: FairShare, policy: Policy, now: float, job: Job, spared: frozenset[str]
) -> list[Candidate]:
    """Every running job that yields to ``job`` on the backfill ground (module doc), past its minimum runtime and
    not in ``spared`` (the jobs that evicted ``job`` within the ping-pong window), in victim-preference order;
    each named by the first ground that applies to it (priority or reclaim within the team), else backfill."""
    found: list[Candidate] = []
    for team in fairness.teams_with_running():
        if team != job.team and not (policy.fairness and fairness.over_guarantee(team)):
            continue  # another team's work yields only from borrowed capacity (fair share's), and it has none
        running = fairness.running_jobs(team)
        borrowed = set(fairness.borrowed(team, running)) if policy.fairness else set()
        for victim_id in running:
            entry = state.running[victim_id]
            if victim_id in spared or is_fresh(entry, policy, now):
                continue
            if not yields_to(job, entry, victim_id in borrowed):
                continue
            lost = lost_work(entry, sum(fairness.running_units(victim_id).values()), now)
            key = preference(entry.job, victim_id in borrowed, lost, entry.started_at)
            # The first ground that applies names the reason: the team's own lower or borrowed work is taken on
            # the priority or reclaim ground it has always been (reclaim across teams has its own cap: not here).
            reason = ground(job, entry.job, victim_id in borrowed, False, False, policy) or EvictionReason.BACKFILL
            found.append(Candidate(entry.job, state.placed[victim_id], reason, key))
    found.sort(key=by_key)
    return found


def reclaims_own(job: Job, policy: Policy) -> bool:
    """Does ``job`` take back its own team's borrowed preemptible work (the same-team
    ``"reclaim"`` ground)? Non-preemptible work other than production, under fair share."""
    return policy.fairness and not job.preemptible and job.priority != Priority.PRODUCTION


def could_help(
    state: ClusterState,
    slot_nodes: tuple[tuple[str, bool], ...],
    job: Job,
    policy: Policy,
    now: float,
    kinds: dict[str, DemandKind | None] | None,
) -> bool:
    """Does some slot node of the victim (:meth:`FairShare.running_slot_nodes`: a node and whether the slot there is a
    MIG instance) sit on a ready GPU ``job`` accepts and, when ``kinds`` is given, free capacity of the holding
    the job needs there? Layouts are fixed within a cycle, so a MIG demand takes only a free instance and a
    whole or shared demand only a GPU without a layout: a slot of the other holding frees nothing the job can
    use — unless the job also needs the node's host CPU or memory, which any victim on the node frees.
    ``kinds`` caches the job's demand kind per GPU model (None: the model cannot serve it); pass None for a
    victim of the job's own team, whose eviction also frees the team's quota, whatever its holding."""
    for node_name, mig_slot in slot_nodes:
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


def within_guarantee_after(
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


def as_production(candidate: Candidate) -> Candidate:
    """``candidate`` on production's ground instead of reclaim's (a reclaim that would take the team above its
    guarantee is no reclaim, but production may take the same victims)."""
    if candidate.reason != EvictionReason.RECLAIM:
        return candidate
    return Candidate(candidate.job, candidate.slots, EvictionReason.PRODUCTION, candidate.key)
