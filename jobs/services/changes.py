"""Changes people make to live jobs: cancel, priority, rank, requeue, and the same for many jobs at once.

A priority must be one the team is granted for the job's kind (:mod:`teams.grants`), whoever asks.

Each service checks the actor's role (:mod:`jobs.access`) on the rows it locks, writes in one transaction,
and records one :class:`JobEvent` with the actor per job it changes; a refusal or an error writes nothing. A
change to the queue's order (priority, rank, reorder) writes the pending jobs' positions again in the same
transaction (:mod:`jobs.services.positions`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from jobs.access import check_cancel, check_grant, check_manage, check_priority
from jobs.errors import JobNotFound, JobSpecInvalid, JobStateError, PriorityNotGranted
from jobs.models import Allocation, Job, JobEvent
from jobs.selectors.jobs import resuming_jobs
from jobs.services import ranks as ranks_rule
from jobs.services.loop import job_requeue
from jobs.services.positions import positions_lock, positions_refresh
from scheduler.core.model.vocabulary import PRIORITY_INDEX, EventType, EvictionReason, JobState, Priority
from scheduler.specs.fields import describe
from teams.models import Team

_MAX_RANK = ranks_rule.MAX_RANK
_LIVE = (JobState.PENDING, JobState.RUNNING)


def team_order_key(job: Job, resuming: Collection[int] = frozenset()) -> tuple[int, int, int, datetime, str]:
    """The scheduler's order within a team (``scheduler.core.rules.fairshare.job_key``): priority, then a job
    resuming after an infrastructure loss (``resuming``: :func:`jobs.selectors.jobs.resuming_jobs`), rank, submit
    time, id. The id compares as the engine's does, as a string (``scheduler.bridge.snapshot``: ``str(job.pk)``),
    so that two jobs submitted in the same microsecond sort alike on the manage page and in the positions."""
    return (PRIORITY_INDEX[job.priority], 0 if job.pk in resuming else 1, job.rank, job.submitted_at, str(job.pk))


def job_cancel(*, job: Job, actor: User | None, reason: str = "", now: datetime | None = None) -> Job:
    """Cancel a pending or running job: it ends now, its allocations close, and the next scheduling cycle stops
    its pods on the cluster.

    A member cancels only the jobs they submitted; the team's lead and platform admins any job of the team.
    Raises :class:`JobPermissionDenied` otherwise and :class:`JobStateError` for a job that has already ended.
    """
    return job_cancel_bulk(jobs=[job], actor=actor, reason=reason, now=now)[0]


def job_cancel_bulk(
    *, jobs: Sequence[Job], actor: User | None, reason: str = "", now: datetime | None = None
) -> list[Job]:
    """Cancel every one of ``jobs`` (each pending or running), each with its own ``cancelled`` event, in one
    transaction: all of them or, on any refusal or ended job, none. Returns the cancelled jobs in the given
    order.

    The rules of :func:`job_cancel` apply to each job. Raises :class:`JobPermissionDenied` naming the first job
    the actor may not cancel, :class:`JobStateError` naming every job that has already ended, and
    :class:`JobNotFound` for a job deleted meanwhile.
    """
    ids = list(dict.fromkeys(job.pk for job in jobs))
    at = now or timezone.now()
    with transaction.atomic():
        # Locked in id order, so two bulk cancels of overlapping selections cannot deadlock.
        locked = {
            j.pk: j
            # of=self: submitted_by is a nullable join, which PostgreSQL will not lock.
            for j in Job.objects.select_for_update(of=("self",))
            .select_related("team", "submitted_by")
            .filter(pk__in=ids)
            .order_by("pk")
        }
        missing = [i for i in ids if i not in locked]
        if missing:
            raise JobNotFound(f"job {', '.join(map(str, missing))} no longer exists: reload the page")
        rows = [locked[i] for i in ids]
        check_cancel(actor=actor, jobs=rows)
        ended = [j for j in rows if j.state not in _LIVE]
        if ended:
            what = ", ".join(f"job {j.pk} is already {j.state}" for j in ended)
            tail = ": leave them out of the selection" if len(rows) > 1 else ""
            raise JobStateError(f"{what}; only pending or running jobs can be cancelled{tail}")
        Allocation.objects.filter(job__in=rows, ended_at__isnull=True).update(ended_at=at, end_reason="cancelled")
        for row in rows:
            row.state = JobState.CANCELLED
            row.state_reason = reason or "cancelled"
            row.finished_at = max(at, row.submitted_at)
            row.queue_position = row.team_queue_position = row.eta_at = None
            row.save(
                update_fields=[
                    "state",
                    "state_reason",
                    "finished_at",
                    "queue_position",
                    "team_queue_position",
                    "eta_at",
                ]
            )
            JobEvent.objects.create(
                job=row, type=EventType.CANCELLED, at=at, actor=actor, details={"reason": reason} if reason else {}
            )
    return rows


def job_requeue_bulk(*, jobs: Sequence[Job], actor: User | None, now: datetime | None = None) -> list[Job]:
    """Stop every one of ``jobs`` (each running) so that it waits again, in one transaction: all or none.

    Each goes through the loop's :func:`jobs.services.loop.job_requeue` with the reason ``admin`` and ``actor``
    on its events; its allocations close now and the next cycle's reconcile evicts its pods (the pods of a
    pending job). Only the team's lead and platform admins requeue. Raises :class:`JobPermissionDenied`,
    :class:`JobStateError` naming every job that is not running, :class:`JobNotFound` for a deleted job.
    """
    ids = list(dict.fromkeys(job.pk for job in jobs))
    at = now or timezone.now()
    with transaction.atomic():
        locked = {
            j.pk: j for j in Job.objects.select_for_update().select_related("team").filter(pk__in=ids).order_by("pk")
        }
        missing = [i for i in ids if i not in locked]
        if missing:
            raise JobNotFound(f"job {', '.join(map(str, missing))} no longer exists: reload the page")
        rows = [locked[i] for i in ids]
        for row in rows:
            check_manage(actor=actor, team=row.team, what="requeue a job")
        idle = [j for j in rows if j.state != JobState.RUNNING]
        if idle:
            what = ", ".join(f"job {j.pk} is {j.state}" for j in idle)
            raise JobStateError(f"{what}; only running jobs can be requeued: leave the others out of the selection")
        for row in rows:
            job_requeue(job=row, reason=EvictionReason.ADMIN.value, by=None, at=at, actor=actor)
    return rows


def job_set_priority(*, job: Job, priority: str, actor: User | None, now: datetime | None = None) -> Job:
    """Change a live job's priority (``production`` | ``high`` | ``normal`` | ``low``); the next cycle uses it.

    Only the team's lead and platform admins change priorities, within what their role allows
    (:func:`jobs.access.priorities_allowed`) and the team is granted for the job's kind (:mod:`teams.grants`).
    Raises :class:`PriorityNotGranted`, :class:`JobPermissionDenied`, :class:`JobSpecInvalid` for an unknown
    priority, :class:`JobStateError` for an ended job. An unchanged priority records nothing.
    """
    team = job.team
    role = check_manage(actor=actor, team=team, what="change a job's priority")
    _check_priority_value(priority)
    check_grant(team=team, priority=priority, kind=job.kind)
    check_priority(actor=actor, team=team, role=role, priority=priority)
    return _change_order(job_id=job.pk, field="priority", value=priority, actor=actor, at=now or timezone.now())


def job_set_priority_bulk(
    *, jobs: Sequence[Job], priority: str, actor: User | None, now: datetime | None = None
) -> list[Job]:
    """Give every one of ``jobs`` (each pending or running) ``priority``, in one transaction: all of them or, on
    any refusal or ended job, none. Returns the jobs in the given order; each that changed has its own
    ``priority_changed`` event.

    The rules of :func:`job_set_priority` apply to each job, its kind's grant included (a selection that mixes
    inference and training is refused whole when production is granted for inference only). Raises
    :class:`PriorityNotGranted` or :class:`JobPermissionDenied` naming the first job refused,
    :class:`JobSpecInvalid`, :class:`JobStateError` naming every ended job, :class:`JobNotFound` for a job
    deleted meanwhile.
    """
    _check_priority_value(priority)
    ids = list(dict.fromkeys(job.pk for job in jobs))
    at = now or timezone.now()
    with transaction.atomic():
        positions_lock()  # the loop's fence first, then the rows, in the order the loop takes them
        locked = {
            j.pk: j for j in Job.objects.select_for_update().select_related("team").filter(pk__in=ids).order_by("pk")
        }
        missing = [i for i in ids if i not in locked]
        if missing:
            raise JobNotFound(f"job {', '.join(map(str, missing))} no longer exists: reload the page")
        rows = [locked[i] for i in ids]
        roles: dict[int, str] = {}
        for row in rows:
            if row.team_id not in roles:
                roles[row.team_id] = check_manage(actor=actor, team=row.team, what="change a job's priority")
            try:
                check_grant(team=row.team, priority=priority, kind=row.kind)
            except PriorityNotGranted as refused:
                raise PriorityNotGranted(f"job {row.pk} ({row.name}, {row.kind}): {refused}") from None
            check_priority(actor=actor, team=row.team, role=roles[row.team_id], priority=priority)
        ended = [j for j in rows if j.state not in _LIVE]
        if ended:
            what = ", ".join(f"job {j.pk} is already {j.state}" for j in ended)
            raise JobStateError(f"{what}; only pending or running jobs can change: leave them out of the selection")
        refresh = any(row.state == JobState.PENDING and row.priority != priority for row in rows)
        for row in rows:
            _change(job_id=row.pk, field="priority", value=priority, actor=actor, at=at, locked=row)
        if refresh:
            positions_refresh(now=at.timestamp())
    return rows


def _check_priority_value(priority: str) -> None:
    allowed = [p.value for p in Priority]
    if priority not in allowed:
        raise JobSpecInvalid([f"priority: must be one of {', '.join(allowed)}; got {describe(priority)}"])


def job_set_rank(*, job: Job, rank: int, actor: User | None, now: datetime | None = None) -> Job:
    """Change a live job's rank, its order within the team and priority (lower runs first; equal ranks run in
    submit order). Jobs are submitted at rank 0 and the portal's moves never write a positive rank
    (:mod:`jobs.services.ranks`), so a rank above 0 is the one way to put a job behind work submitted later.

    Only the team's lead and platform admins order the team's jobs. Raises :class:`JobPermissionDenied`,
    :class:`JobSpecInvalid` for a rank that is not a whole number, :class:`JobStateError` for an ended job.
    """
    check_manage(actor=actor, team=job.team, what="change a job's rank")
    if isinstance(rank, bool) or not isinstance(rank, int) or abs(rank) > _MAX_RANK:
        raise JobSpecInvalid(
            [f"rank: must be a whole number between -{_MAX_RANK} and {_MAX_RANK}, got {describe(rank)}"]
        )
    return _change_order(job_id=job.pk, field="rank", value=rank, actor=actor, at=now or timezone.now())


def job_list_reorder(*, team: Team, order: Sequence[int], actor: User | None, now: datetime | None = None) -> list[Job]:
    """Give the pending jobs of ``team`` ranks so that, within each priority, they run in ``order`` (job ids,
    each pending job of the team exactly once). Priority still comes first, and within it a job resuming after
    an infrastructure loss: reordering changes neither.

    The jobs of a priority whose order already holds keep their ranks; the others get −(n−1) … 0 in the order
    given, so a job submitted later (rank 0) still queues behind all of them (:mod:`jobs.services.ranks`).
    Only the team's lead and platform admins reorder. In one transaction, over the team's pending jobs as
    locked now; only ranks that change are written, each with a ``rank_changed`` event. Returns the changed
    jobs. Raises :class:`JobPermissionDenied`, or :class:`JobSpecInvalid` when ``order`` is not a permutation
    of the team's pending jobs (one started or was submitted meanwhile: reload and try again).
    """
    check_manage(actor=actor, team=team, what="reorder the team's jobs")
    at = now or timezone.now()
    with transaction.atomic():
        positions_lock()
        pending = {
            j.pk: j for j in Job.objects.select_for_update().filter(team=team, state=JobState.PENDING).order_by("pk")
        }
        _check_permutation(team, order, pending)
        ranks: dict[int, int] = {}
        for priority in dict.fromkeys(pending[job_id].priority for job_id in order):
            group = [job_id for job_id in order if pending[job_id].priority == priority]
            ranks.update(ranks_rule.reorder([_entry(pending[job_id]) for job_id in group], group))
        changed = [
            _change(job_id=job_id, field="rank", value=ranks[job_id], actor=actor, at=at, locked=pending[job_id])
            for job_id in order
            if job_id in ranks
        ]
        if changed:
            positions_refresh(now=at.timestamp())
    return changed


def job_move(*, job: Job, up: bool, actor: User | None, now: datetime | None = None) -> list[Job]:
    """Move a pending job one place up (or down) in its team's order: past the next job of its class (same
    priority, resuming or not), changing no other job's place (:mod:`jobs.services.ranks`). A job submitted
    later still queues behind both. Returns the jobs whose rank changed, each with a ``rank_changed`` event:
    none when no job of its class is there to pass (a job of higher priority, or resuming, stays ahead).

    Only the team's lead and platform admins move jobs. Raises :class:`JobPermissionDenied`, and
    :class:`JobStateError` when the job is no longer pending.
    """
    check_manage(actor=actor, team=job.team, what="reorder the team's jobs")
    at = now or timezone.now()
    with transaction.atomic():
        positions_lock()
        pending = list(Job.objects.select_for_update().filter(team_id=job.team_id, state=JobState.PENDING))
        row = next((j for j in pending if j.pk == job.pk), None)
        if row is None:
            raise JobStateError(f"job {job.pk} is no longer pending in team {job.team.slug}: reload the queue")
        resuming = resuming_jobs(j.pk for j in pending)

        def kind(j: Job) -> tuple[int, int]:
            return team_order_key(j, resuming)[:2]

        same = sorted((j for j in pending if kind(j) == kind(row)), key=lambda j: team_order_key(j, resuming))
        ranks = ranks_rule.move([_entry(j) for j in same], row.pk, up=up)
        by_pk = {j.pk: j for j in same}
        changed = [
            _change(job_id=pk, field="rank", value=rank, actor=actor, at=at, locked=by_pk[pk])
            for pk, rank in ranks.items()
        ]
        if changed:
            positions_refresh(now=at.timestamp())
    return changed


def _entry(job: Job) -> ranks_rule.Entry:
    return ranks_rule.Entry(pk=job.pk, rank=job.rank, submitted_at=job.submitted_at)


def _check_permutation(team: Team, order: Sequence[int], pending: dict[int, Job]) -> None:
    errors = []
    seen: set[int] = set()
    twice: set[int] = set()
    for job_id in order:
        (twice if job_id in seen else seen).add(job_id)
    if twice:
        errors.append(f"order: job {', '.join(map(str, sorted(twice)))} listed more than once; list each exactly once")
    unknown = sorted(seen - set(pending))
    if unknown:
        errors.append(
            f"order: job {', '.join(map(str, unknown))} is not a pending job of team {team.slug} (it started, "
            "ended or is another team's): reload the queue and list each pending job exactly once"
        )
    missing = sorted(set(pending) - seen)
    if missing:
        errors.append(
            f"order: pending job {', '.join(map(str, missing))} of team {team.slug} missing: reload the queue and "
            "list each pending job exactly once"
        )
    if errors:
        raise JobSpecInvalid(errors)


def _change_order(*, job_id: int, field: str, value: object, actor: User | None, at: datetime) -> Job:
    """:func:`_change` of a field the queue is ordered by, in its own transaction, with the pending jobs'
    positions written again when it changed a pending job (:mod:`jobs.services.positions`)."""
    with transaction.atomic():
        positions_lock()
        row = Job.objects.select_for_update().get(pk=job_id)
        old = getattr(row, field)
        _change(job_id=job_id, field=field, value=value, actor=actor, at=at, locked=row)
        if row.state == JobState.PENDING and old != value:
            positions_refresh(now=at.timestamp())
        return row


def _change(
    *, job_id: int, field: str, value: object, actor: User | None, at: datetime, locked: Job | None = None
) -> Job:
    """Set ``field`` of a live job to ``value`` and record the event; the caller holds the transaction and has
    checked the actor. ``locked``: the row, already locked by the caller."""
    row = locked if locked is not None else Job.objects.select_for_update().get(pk=job_id)
    if row.state not in _LIVE:
        raise JobStateError(f"job {row.pk} is already {row.state}; only pending or running jobs can change")
    old = getattr(row, field)
    if old == value:
        return row
    setattr(row, field, value)
    row.save(update_fields=[field])
    event = EventType.PRIORITY_CHANGED if field == "priority" else EventType.RANK_CHANGED
    JobEvent.objects.create(job=row, type=event, at=at, actor=actor, details={"old": old, "new": value})
    return row
