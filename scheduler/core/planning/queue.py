"""The queue between cycles: where each pending job stands in the order the next cycle takes them.

A cycle writes every waiting job's position as it took them (:mod:`scheduler.core.planning.cycle`, step 5). When a lead
reorders the team's jobs or changes a priority, those positions describe an order that no longer holds until
the next cycle. :func:`queue_order` answers in between with the cycle's own steps up to placement: the same
state, the same screening (a job the cycle would reject has no position) and the same fair order
(:meth:`~scheduler.core.rules.fairshare.FairShare.iter_pending`), with nothing placed in between — the order
the next cycle takes the jobs in until its first bind. The cycle itself may then bind some of them and re-key
their teams; its positions replace these.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.core.decisions.screening import screen
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Snapshot
from scheduler.core.speedups.memo import Memo
from scheduler.core.speedups.switch import fair_share, indexed_state


@dataclass(frozen=True, slots=True)
class QueuePlace:
    """``job`` is ``position``-th in the global order and ``team_position``-th in its team's (both 1-based)."""

    job: str
    position: int
    team_position: int


def queue_order(snapshot: Snapshot, policy: Policy, now: float) -> tuple[QueuePlace, ...]:
    """The pending jobs of ``snapshot`` the next cycle would take, in its order (module doc)."""
    with Memo().current() as memo:
        state = indexed_state(snapshot, now, memo)
        fairness = fair_share(snapshot.teams, state, policy, memo)
        pending, _rejections = screen(snapshot, state, policy)
        team_positions: dict[str, int] = {}
        places = []
        for position, job in enumerate(fairness.order(pending, now), start=1):
            team_positions[job.team] = team_positions.get(job.team, 0) + 1
            places.append(QueuePlace(job.id, position, team_positions[job.team]))
    return tuple(places)
