"""Where a job goes this turn, quota included: the best placement, or else the best its team's quota takes.

``find_slots`` ranks placements by capacity alone (tier, holding, fragmentation). When the team's quota refuses
the one it ranks first — say the job would take a whole GPU where its guarantee has room only for a
``1g.10gb`` instance — a job of one replica gets the best placement among those whose holding the quota admits
(:mod:`scheduler.core.placement.holdings`), as Kueue's flavor assignment moves on to the next flavor with quota
left instead of stopping at the first that has capacity. A gang keeps the first answer: its replicas' units add
up, so no single holding decides its admission.

The cycle's turn (:func:`scheduler.core.planning.steps.choose`) and the preemption search's trial
(:mod:`scheduler.core.speedups.trial`) both choose this way, so a search finds the placement the turn would take.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.core.model.cluster_state import ClusterState
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Slots
from scheduler.core.placement import find_slots, index_of
from scheduler.core.placement.holdings import possible_units
from scheduler.core.rules.fairshare import FairShare
from scheduler.core.rules.limits import Admission, placement_units


@dataclass(frozen=True, slots=True)
class Choice:
    """``slots``: where the job goes, admitted (None: nowhere now). ``best``: what ``find_slots`` ranks first
    over every option (None: nothing fits). ``refused``: why the quota refused ``best`` (None when it did not,
    or when nothing fits)."""

    slots: Slots | None
    best: Slots | None
    refused: Admission | None

    def __init__(self, slots: Slots | None, best: Slots | None, refused: Admission | None) -> None:
        object.__setattr__(self, "slots", slots)
        object.__setattr__(self, "best", best)
        object.__setattr__(self, "refused", refused)


def choose(state: ClusterState, fairness: FairShare, job: Job, policy: Policy) -> Choice:
    """The placement ``job`` takes on free capacity now (module doc)."""
    best = find_slots(state, job, policy)
    if best is None:
        return Choice(None, None, None)
    admission = fairness.admit(job, placement_units(state, best))
    if admission.ok:
        return Choice(best, best, None)
    if job.replicas == 1:
        allowed = fairness.admitted(job, possible_units(index_of(state)[0], job, policy))
        other = find_slots(state, job, policy, allowed=allowed) if allowed else None
        if other is not None and fairness.admit(job, placement_units(state, other)).ok:
            return Choice(other, best, admission)
    return Choice(None, best, admission)
