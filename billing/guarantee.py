"""Which capacity a team held within its guarantee and which it borrowed, at one instant (pure).

The rule is the scheduler's own (fair-share rule 4, :func:`scheduler.core.borrowed_in_fill`), applied to what
the team held at the start of each ledger interval, so finance and the preemption logic never disagree about
what was borrowed:

1. Take every allocation of the team live at the instant ``t`` (``started_at ≤ t < ended_at``, or still
   open), grouped by job; a job's size is the sum of its allocations in 1/7000 GPU, per GPU class.
2. Order the jobs: non-preemptible first, then priority (production → low), then the job's start, then id.
3. Fill the team's guarantee first-fit: a job that still fits — overall and in each GPU class it uses,
   with the quota read as the scheduler reads it (``guarantee_limits``: the ``any`` row is the overall
   figure, class rows bound their class) — is *within guarantee*; one that does not is *borrowed*.

An interval is marked with what its job was at the interval's start (an interval is at most an hour). The
quota is today's (``Quota`` keeps no history): re-closing history after a quota change would mark it by the
new quota, which is why the ledger is closed continuously rather than in arrears.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from scheduler.core import Team, borrowed_in_fill, fill_order, guarantee_limits


@dataclass(frozen=True, slots=True)
class Holding:
    """One allocation of a team, as the rule needs it."""

    allocation_id: int
    job_id: int
    preemptible: bool
    priority: str
    job_started_at: datetime
    gpu_class: str
    units: int
    started_at: datetime
    ended_at: datetime | None

    def live_at(self, at: datetime) -> bool:
        return self.started_at <= at and (self.ended_at is None or self.ended_at > at)


def borrowed_jobs(*, at: datetime, holdings: Iterable[Holding], guaranteed: Mapping[str, Decimal]) -> set[int]:
    """Ids of the jobs that held borrowed capacity at ``at``; ``guaranteed`` maps GPU class or ``any`` to GPUs."""
    jobs: dict[int, tuple[tuple[int, int, datetime, int], dict[str, int]]] = {}
    for holding in holdings:
        if not holding.live_at(at):
            continue
        key = fill_order(holding.preemptible, holding.priority, holding.job_started_at, holding.job_id)
        by_class = jobs.setdefault(holding.job_id, (key, {}))[1]
        by_class[holding.gpu_class] = by_class.get(holding.gpu_class, 0) + holding.units
    team = Team(name="team", guaranteed=tuple((c, float(g)) for c, g in guaranteed.items()))
    ordered = sorted(jobs.items(), key=lambda item: item[1][0])  # by fill_order
    fill = ((job_id, sum(by_class.values()), by_class.items()) for job_id, (_key, by_class) in ordered)
    return set(borrowed_in_fill(guarantee_limits(team), fill))
