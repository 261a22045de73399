"""Changes to many jobs of one team at once, built on the single-job services so each job gets its own
audited event (``rank_changed``, ``cancelled``) with the actor, and all of it commits or none does."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from jobs.errors import JobSpecInvalid
from jobs.models import Job
from jobs.services import job_cancel, job_set_rank
from scheduler.core.vocabulary import JobState, Priority

_PRIORITY_INDEX = {p.value: i for i, p in enumerate(Priority)}


def team_order_key(job: Job) -> tuple[int, int, datetime, int]:
    """The scheduler's order within a team (``scheduler.core.fairshare``): priority, rank, submit time, id."""
    return (_PRIORITY_INDEX[job.priority], job.rank, job.submitted_at, job.pk)


def job_list_reorder(
    *, jobs: Sequence[Job], order: Sequence[int], actor: AbstractBaseUser | None, now: datetime | None = None
) -> list[Job]:
    """Give the pending ``jobs`` of one team ranks so that, within each priority, they run in ``order`` (job
    ids, a permutation of the jobs'). Priority still comes first: reordering never changes a priority.

    Only ranks that change are written (each with a ``rank_changed`` event). Raises :class:`JobSpecInvalid`
    when ``order`` is not a permutation of the jobs or they are not pending jobs of one team.
    """
    by_id = {job.pk: job for job in jobs}
    if sorted(order) != sorted(by_id) or len(set(order)) != len(order):
        raise JobSpecInvalid(["order: must list each pending job of the team exactly once"])
    if len({job.team_id for job in jobs}) > 1:
        raise JobSpecInvalid(["order: the jobs belong to different teams; reorder one team at a time"])
    if any(job.state != JobState.PENDING for job in jobs):
        raise JobSpecInvalid(["order: only pending jobs can be reordered"])
    at = now or timezone.now()
    changed = []
    with transaction.atomic():
        position_in_group: dict[str, int] = {}
        for job_id in order:
            job = by_id[job_id]
            rank = position_in_group.get(job.priority, 0)
            position_in_group[job.priority] = rank + 1
            if job.rank != rank:
                changed.append(job_set_rank(job=job, rank=rank, actor=actor, now=at))
    return changed


def job_cancel_bulk(
    *, jobs: Sequence[Job], actor: AbstractBaseUser | None, reason: str = "", now: datetime | None = None
) -> list[Job]:
    """Cancel every job in ``jobs`` (all pending or running) in one transaction, each with its own event."""
    at = now or timezone.now()
    with transaction.atomic():
        return [job_cancel(job=job, actor=actor, reason=reason, now=at) for job in jobs]
