"""The restart budget: what an application failure does to a job.

An application failure is the job's own doing: a container that exited non-zero or was OOM-killed (the
gateway's ``failed`` replica, with the cluster's message). Each one is counted against the job's
``restart_limit`` (default 3, like a Kubernetes Job's ``backoffLimit``): while ``restarts < restart_limit``
the whole job (every replica of a gang) is requeued to start again — from its latest checkpoint, like any
requeued job — and once the budget is spent the job fails with the last exit reason.

Infrastructure losses (a node lost, a spot interruption, a preemption, a refused bind) never come here: the loop
requeues them through :func:`jobs.services.loop.job_requeue` and they never touch the budget, because the job
did nothing wrong.

Billing: an application-failure requeue records no ``preempted`` event and closes the job's allocations with
``end_reason = app-failure``, which is not a preemption reason, so the ledger bills the hours as used and
reports no lost work for them (docs/billing.md, Lost work): the scheduler took nothing away.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from jobs.errors import JobStateError
from jobs.models import Allocation, Job, JobEvent
from jobs.services.loop import job_finish
from scheduler.core.model.vocabulary import EventType, EvictionReason, JobState

# When the cluster gives no message (a backend that cannot tell why), the record still says what happened.
UNKNOWN_EXIT = "a replica failed"


@dataclass(frozen=True, slots=True)
class RestartOutcome:
    """What :func:`job_fail_or_restart` did: ``restarted`` (requeued, ``restarts`` now counts it) or failed."""

    restarted: bool
    restarts: int
    restart_limit: int
    exit_reason: str


def job_fail_or_restart(*, job: Job, exit_reason: str, at: datetime) -> RestartOutcome:
    """Record an application failure of running ``job``: requeue it while its restart budget lasts, else fail it.

    A restart: ``restarts`` + 1, ``last_exit_reason`` set, live allocations closed (``app-failure``), the job
    pending again with a ``requeued`` event whose details carry ``reason`` (``app-failure``), ``exit_reason``,
    ``restart`` and ``restart_limit`` and the ``message`` ``restart n of limit``. A spent budget: the job
    fails (:func:`~jobs.services.loop.job_finish`) with ``state_reason`` = the exit reason and the budget
    spent. The caller holds the transaction (and the job's row lock, as the loop's reconcile does). Raises
    :class:`~jobs.errors.JobStateError` for a job that is not running: only a running process can fail.
    """
    if job.state != JobState.RUNNING:
        raise JobStateError(f"Job {job.pk} is {job.state}, not running: only a running job can fail and restart.")
    reason = exit_reason.strip() or UNKNOWN_EXIT
    job.last_exit_reason = reason
    if job.restarts < job.restart_limit:
        job.restarts += 1
        _requeue(job, reason, at)
        return RestartOutcome(True, job.restarts, job.restart_limit, reason)
    job.save(update_fields=["last_exit_reason"])
    job_finish(job=job, state=JobState.FAILED, at=at, reason=f"{reason}; {budget_spent(job.restart_limit)}")
    return RestartOutcome(False, job.restarts, job.restart_limit, reason)


def budget_spent(restart_limit: int) -> str:
    """Why a job failed at its last application failure, in words: ``restart budget of 3 spent``."""
    if restart_limit == 0:
        return "no restarts allowed (restart_limit 0)"
    return f"restart budget of {restart_limit} spent"


def restart_count(restarts: int, restart_limit: int) -> str:
    """``restart 2 of 3``: where a job stands in its restart budget."""
    return f"restart {restarts} of {restart_limit}"


def _requeue(job: Job, reason: str, at: datetime) -> None:
    # Not jobs.services.loop.job_requeue: that one records a ``preempted`` event, which the ledger reads as
    # work the scheduler took away (billing.services.PREEMPTION_END_REASONS and the event rule beside it).
    Allocation.objects.filter(job=job, ended_at__isnull=True).update(
        ended_at=at, end_reason=EvictionReason.APP_FAILURE.value
    )
    count = restart_count(job.restarts, job.restart_limit)
    job.state = JobState.PENDING
    job.state_reason = (
        f"restarted after an application failure ({reason}); {count}; waits for the next scheduling cycle"
    )
    job.queue_position = job.team_queue_position = job.eta_at = None
    job.save(
        update_fields=[
            "state",
            "state_reason",
            "restarts",
            "last_exit_reason",
            "queue_position",
            "team_queue_position",
            "eta_at",
        ]
    )
    JobEvent.objects.create(
        job=job,
        type=EventType.REQUEUED,
        at=at,
        details={
            "reason": EvictionReason.APP_FAILURE.value,
            "exit_reason": reason,
            "restart": job.restarts,
            "restart_limit": job.restart_limit,
            "message": count,
        },
    )
