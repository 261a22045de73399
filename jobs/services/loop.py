"""Transitions the scheduling loop records (``scheduler.loop.record``, ``scheduler.loop.reconcile``): the actor is the
scheduler, so there is no permission to check; the caller holds the transaction (and the loop's lock)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from enum import StrEnum

from django.contrib.auth.models import User
from django.db.models import Max

from jobs.models import Allocation, Job, JobEvent
from jobs.selectors.preemptions import preempted_words, preemptor_details
from jobs.services.binds import Bound, job_bind_record_many
from scheduler.core import Slot
from scheduler.core.model.vocabulary import EventType, JobState
from scheduler.models import Node


def job_bind_record(*, job: Job, slots: Sequence[Sequence[Slot]], nodes: Mapping[str, Node], at: datetime) -> Bound:
    """Record that ``job`` (pending) now holds ``slots`` (one tuple per replica): allocations, state, event — one
    bind of :func:`jobs.services.binds.job_bind_record_many`, which the loop's record step calls for all of a
    cycle's binds at once. The allocation constraints make a double booking fail the caller's transaction
    (nothing bound twice)."""
    return job_bind_record_many(binds=[(job, slots)], nodes=nodes, at=at)[0]


class MoveOutcome(StrEnum):
    """The ``outcome`` of a ``moved`` event: a move is recorded when it starts, then completes or is abandoned."""

    STARTED = "started"
    COMPLETED = "completed"
    ABANDONED = "abandoned"


# Allocation.end_reason of the rows a move leaves: the old placement once the new replicas serve, or the new
# placement of a move given up. Neither is a preemption (billing.services.PREEMPTION_END_REASONS): no work is lost.
MOVED_END_REASON = "moved"
MOVE_ABANDONED_END_REASON = "move-abandoned"


def _placements(allocations: Sequence[Allocation]) -> list[list[dict[str, object]]]:
    """The placement of open allocations as the ``bound`` event writes one: a list of slots per replica."""
    by_replica: dict[int, list[dict[str, object]]] = {}
    for a in sorted(allocations, key=lambda a: (a.replica, a.gpu_index, a.mig_start or 0)):
        by_replica.setdefault(a.replica, []).append(
            {"node": a.node.name, "gpu": a.gpu_index, "mig_profile": a.mig_profile or None, "mig_start": a.mig_start}
        )
    return [slots for _, slots in sorted(by_replica.items())]


def _allocations_create(
    job: Job, slots: Sequence[Sequence[Slot]], nodes: Mapping[str, Node], at: datetime, *, generation: int
) -> list[Allocation]:
    """One allocation per slot of each replica of ``job``, at its node's tier and price, from ``at``."""
    created = []
    for replica, replica_slots in enumerate(slots):
        for slot in replica_slots:
            node = nodes[slot.node]
            created.append(
                Allocation.objects.create(
                    job=job,
                    replica=replica,
                    node=node,
                    gpu_index=slot.gpu,
                    mig_profile=slot.mig_profile or "",
                    mig_start=slot.mig_start,
                    tier=node.tier,
                    price_per_gpu_hour=node.price_per_gpu_hour,
                    started_at=at,
                    generation=generation,
                )
            )
    return created


def job_move_start(
    *, job: Job, slots: Sequence[Sequence[Slot]], nodes: Mapping[str, Node], at: datetime
) -> list[Allocation]:
    """Record that running ``job`` starts moving to ``slots`` (one tuple per replica), make-before-break: new
    allocations of the next generation beside the open ones, which stay open until the move completes (both are
    held, and billed, meanwhile), and a ``moved`` event (``started``, from where to where). Returns the new rows.

    The generation is one above any the job has had, so a retried move never shares a generation (nor, on a
    cluster, pod names) with an abandoned one whose pods may still be stopping."""
    current = list(job.allocations.filter(ended_at__isnull=True).select_related("node"))
    last = job.allocations.aggregate(last=Max("generation"))["last"] or 0
    generation = last + 1
    created = _allocations_create(job, slots, nodes, at, generation=generation)
    _move_event(job, at, MoveOutcome.STARTED, generation, moved_from=current, moved_to=created)
    return created


def _move_event(
    job: Job,
    at: datetime,
    outcome: MoveOutcome,
    generation: int,
    *,
    moved_from: Sequence[Allocation],
    moved_to: Sequence[Allocation],
    **extra: str,
) -> None:
    """The ``moved`` event of one step of a move: its outcome, generation, and the placements from and to."""
    details = {"outcome": outcome, "generation": generation, "from": _placements(moved_from)}
    JobEvent.objects.create(
        job=job, type=EventType.MOVED, at=at, details={**details, "to": _placements(moved_to), **extra}
    )


def job_move_complete(*, job: Job, generation: int, at: datetime) -> None:
    """Every replica of ``generation`` serves: the older open allocations end (``moved``), and a ``moved`` event
    (``completed``) records it. The overlap, both placements held, is billed as it was held."""
    older = list(job.allocations.filter(ended_at__isnull=True, generation__lt=generation).select_related("node"))
    Allocation.objects.filter(pk__in=[a.pk for a in older]).update(ended_at=at, end_reason=MOVED_END_REASON)
    new = list(job.allocations.filter(ended_at__isnull=True, generation=generation).select_related("node"))
    _move_event(job, at, MoveOutcome.COMPLETED, generation, moved_from=older, moved_to=new)


def job_move_abandon(*, job: Job, generation: int, at: datetime, reason: str) -> None:
    """A move is given up (``reason`` says why, in words a person can act on): the allocations of ``generation``
    and newer end (``move-abandoned``), the job keeps its older placement, and a ``moved`` event (``abandoned``)
    records it."""
    new = list(job.allocations.filter(ended_at__isnull=True, generation__gte=generation).select_related("node"))
    Allocation.objects.filter(pk__in=[a.pk for a in new]).update(ended_at=at, end_reason=MOVE_ABANDONED_END_REASON)
    kept = list(job.allocations.filter(ended_at__isnull=True).select_related("node"))
    _move_event(job, at, MoveOutcome.ABANDONED, generation, moved_from=kept, moved_to=new, reason=reason)


def job_requeue(
    *, job: Job, reason: str, by: str | None, at: datetime, message: str = "", actor: User | None = None
) -> None:
    """A running job loses its devices (preempted, node lost, bind refused, an admin's requeue) and waits again.

    ``by``: the preempting job's id, when a job took the devices; the ``preempted`` event also records that job's
    team, kind and priority (:func:`jobs.selectors.preemptions.preemptor_details`).
    ``actor``: the person who asked for it (an admin), recorded on both events; None for the scheduler. The pods
    still run until the next cycle's reconcile evicts the pods of a pending job.
    """
    Allocation.objects.filter(job=job, ended_at__isnull=True).update(ended_at=at, end_reason=reason[:32])
    # The preempting job's team, kind and priority, stored now: the victim's viewers may not open that job, and
    # its page says who took the GPUs in these words alone (jobs.selectors.preemptions).
    preemptor = preemptor_details(by)
    if by:
        who = preempted_words(preemptor) or "another job"
        cause = f"preempted by {who} ({reason})"
    elif actor is not None:
        cause = f"requeued by {actor} ({reason})"
    else:
        cause = f"evicted ({reason})"
    job.state = JobState.PENDING
    job.state_reason = f"{cause}{': ' + message if message else ''}; waits for the next scheduling cycle"
    job.save(update_fields=["state", "state_reason"])
    JobEvent.objects.create(
        job=job, type=EventType.PREEMPTED, at=at, actor=actor, details={"reason": reason, "by": by, **preemptor}
    )
    JobEvent.objects.create(
        job=job, type=EventType.REQUEUED, at=at, actor=actor, details={"message": message} if message else {}
    )


def job_finish(*, job: Job, state: JobState, at: datetime, reason: str = "") -> None:
    """A job ends for good (completed, failed or rejected): allocations close, queue fields clear, event."""
    Allocation.objects.filter(job=job, ended_at__isnull=True).update(ended_at=at, end_reason=str(state)[:32])
    job.state = state
    job.state_reason = reason
    job.finished_at = max(at, job.submitted_at)
    job.queue_position = job.team_queue_position = job.eta_at = None
    job.save(update_fields=["state", "state_reason", "finished_at", "queue_position", "team_queue_position", "eta_at"])
    JobEvent.objects.create(job=job, type=EventType(str(state)), at=at, details={"reason": reason} if reason else {})
