"""The preemption search bound: how deep in each team's queue a cycle looks for work to evict.

A search for victims costs in proportion to the running jobs, and a job deep in a team's queue whose search fails
costs that for nothing: at 5,000 nodes and 50,000 pending most of a cycle was such failing searches
(docs/benchmarks/scale.md). With the policy's ``preemption_search_per_team`` set to N, only the first N of a
team's non-production pending jobs, in the order the cycle takes them (fair order, so the team's own queue
order), may search; the rest still take free capacity, backfill and reservations, and only skip the search
(:func:`scheduler.core.planning.steps.preempt`), their reason saying so. None: every job may search.

Production never counts against the bound and is never bounded: production first is the product's promise,
and production work is few and comes first in every team's order. Slurm bounds its backfill the same way, by
queue depth in priority order: ``bf_max_job_test`` ("the maximum number of jobs to attempt backfill
scheduling for (i.e. the queue depth)") and, per user, ``bf_max_job_user`` ("to prevent users from flooding
the backfill queue with jobs that cannot start"), slurm.conf(5), SchedulerParameters,
https://slurm.schedmd.com/slurm.conf.html. As there, a bounded job is not refused: it is tried again next
cycle, when the jobs ahead of it may have started.
"""

from __future__ import annotations

from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job
from scheduler.core.model.vocabulary import Priority

# The waiting reason of a job that skipped the search and waits for capacity; the bound is appended.
SKIPPED = (
    "no preemption tried for it this cycle: only its team's first {bound} jobs in queue order (production aside) "
    "may preempt"
)


def counts(job: Job) -> bool:
    """Does ``job`` count against its team's bound? Only non-production work does (module doc)."""
    return job.priority != Priority.PRODUCTION


def may_search(job: Job, team_position: int, policy: Policy) -> bool:
    """May ``job``, ``team_position``-th (1-based) of its team's counted jobs in this cycle's order, search for
    victims? Production always may."""
    bound = policy.preemption_search_per_team
    return not counts(job) or bound is None or team_position <= bound


def skipped_text(policy: Policy) -> str:
    """The waiting reason's words for a job past the bound (:data:`SKIPPED`)."""
    return SKIPPED.format(bound=policy.preemption_search_per_team)
