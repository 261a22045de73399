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

Choice: candidates are ordered by (non-preemptible last, borrowed first, lower priority first, least work lost
since the last checkpoint — ``(now - max(started_at, last_checkpoint_at)) × GPU-equivalents`` — first, most
recently started first, id): a :class:`Candidate`'s ``key``. A reclaim must leave the team within its
guarantee once the job is placed (:func:`within_guarantee_after`), else it is none: production then takes the
same victims on its own ground (:func:`as_production`), anyone else searches again without reclaim.

Which candidates make room, and the fewest of them, is :mod:`scheduler.core.preemption`'s search; the
candidates of each team are gathered (and remembered for the cycle) by
:class:`scheduler.core.speedups.victims.Victims`, which asks :func:`ground` and :func:`could_help` here.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter

from scheduler.core.capacity import ClusterState, model_matches
from scheduler.core.demand import DemandKind
from scheduler.core.policy import Policy
from scheduler.core.rightsize import resolve
from scheduler.core.rules.fairshare import FairShare
from scheduler.core.rules.limits import placement_units
from scheduler.core.state import Job, Slots
from scheduler.core.vocabulary import PRIORITY_INDEX, EvictionReason, Priority

_PRODUCTION_RANK = PRIORITY_INDEX[Priority.PRODUCTION]


@dataclass(frozen=True, slots=True)
class Candidate:
    job: Job
    slots: Slots
    reason: EvictionReason
    key: tuple[int, int, int, float, float, str]


by_key = attrgetter("key")  # sort candidates in victim-preference order


def ground(
    job: Job, victim: Job, borrowed: bool, allow_reclaim: bool, fresh: bool, policy: Policy
) -> EvictionReason | None:
    """The first ground (module doc) on which ``job`` may evict running ``victim`` — ``borrowed``: the
    victim sits on borrowed capacity; ``allow_reclaim``: the job's team may reclaim from other teams; ``fresh``:
    the victim is within its minimum runtime — or None. The one statement of the grounds: the candidate scan
    and the reservations' expected-free times (:mod:`~scheduler.core.reservation`) both ask it."""
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
