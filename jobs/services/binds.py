"""Binds recorded set-based: every job the scheduling cycle binds gets its allocations, its running state and its
``bound`` event in a fixed number of statements, whatever the number of binds.

One by one (the loop's record step before), a bind cost four statements and one more per GPU beyond its first:
whether the job was requeued, each allocation, the job's state, the event. A first cycle on an empty cluster binds
thousands of jobs (5,759 at 1,000 nodes), so the statements, and the ORM's work of building each, grew with them.
Here, for all the binds of a cycle at once:

1. which of the jobs were requeued before (one read of their ``requeued`` events) and, only when some were, their
   newest checkpoints (one read), for the event's resume step and the bind's ``RESUME_FROM``;
2. every allocation in one ``INSERT`` (``bulk_create``: on PostgreSQL one statement whatever the rows, through
   ``unnest``: ``SQLInsertCompiler.assemble_as_sql`` in ``django.db.backends.postgresql.compiler``; on SQLite
   Django splits it into statements of at most 999 parameters, ``django.db.backends.sqlite3.operations``'s
   ``bulk_batch_size``);
3. every job's state in one ``UPDATE`` that matches only jobs still pending (``started_at`` the later of the
   bind's instant and the job's submission, computed by the database);
4. every ``bound`` event in one ``INSERT``.

The same rows as one bind at a time, with the same guards: the caller holds the transaction and has locked the
jobs (the record step does), and a job not pending any more when the ``UPDATE`` runs raises
:class:`~jobs.errors.JobStateError`, which undoes the caller's whole transaction, as a double booking does through
the allocation constraints. A failure anywhere writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db.models import OuterRef, Subquery, Value
from django.db.models.functions import Greatest

from jobs.errors import JobStateError
from jobs.models import Allocation, Job, JobEvent
from scheduler.core import Slot
from scheduler.core.model.vocabulary import EventType, JobState
from scheduler.models import Node


@dataclass(frozen=True)
class Bound:
    """What a bind wrote that its caller needs next: the allocations it created (their nodes loaded), whether the
    run resumes a requeued job and, then, the job's newest checkpoint (None without one) — so the loop builds the
    bind's request without reading any of them back."""

    allocations: list[Allocation]
    resumed: bool
    checkpoint: JobEvent | None = None


def job_bind_record_many(
    *, binds: Sequence[tuple[Job, Sequence[Sequence[Slot]]]], nodes: Mapping[str, Node], at: datetime
) -> list[Bound]:
    """Record that each pending job of ``binds`` now holds its slots (one tuple per replica): allocations, state,
    event, in the statements of the module doc; returns each bind's :class:`Bound`, in ``binds``' order. The
    ``bound`` event names the placements and the nodes; for a job that was requeued it also says that the run
    resumes (``resumed``) and from which checkpoint step (``resumed_from_step``: the newest checkpoint's, None
    without one), which the job page's timeline reads. ``nodes``: every node the slots name. The jobs' instances
    are updated as their rows are."""
    if not binds:
        return []
    ids = [job.pk for job, _ in binds]
    if len(set(ids)) != len(ids):
        raise ValueError("job_bind_record_many takes one bind per job")
    resumed = set(
        JobEvent.objects.filter(job_id__in=ids, type=EventType.REQUEUED)
        .order_by()  # no default ordering: it would add the events' time and id to what is DISTINCT
        .values_list("job_id", flat=True)
        .distinct()
    )
    checkpoints = _checkpoints_latest(resumed)
    allocations = [_allocations(job, slots, nodes, at) for job, slots in binds]
    Allocation.objects.bulk_create([a for rows in allocations for a in rows])
    _running(ids, at)
    events = []
    for job, slots in binds:
        job.state = JobState.RUNNING
        job.started_at = max(at, job.submitted_at)
        job.state_reason = ""
        job.queue_position = job.team_queue_position = job.eta_at = None
        events.append(
            JobEvent(
                job=job,
                type=EventType.BOUND,
                at=at,
                details=_details(slots, job.pk in resumed, checkpoints.get(job.pk)),
            )
        )
    JobEvent.objects.bulk_create(events)
    return [
        Bound(allocations=rows, resumed=job.pk in resumed, checkpoint=checkpoints.get(job.pk))
        for (job, _), rows in zip(binds, allocations, strict=True)
    ]


def _checkpoints_latest(ids: set[int]) -> dict[int, JobEvent]:
    """The newest ``checkpointed`` event (by time, then id) of each job of ``ids`` that has one; no query for none.
    The newest id per job is picked in the database (a subquery per job on the events' (job, time) index), so a job
    with a long history does not send all of it."""
    if not ids:
        return {}
    newest = JobEvent.objects.filter(job=OuterRef("pk"), type=EventType.CHECKPOINTED).order_by("-at", "-id")
    picked = Job.objects.filter(pk__in=ids).annotate(latest=Subquery(newest.values("pk")[:1])).values("latest")
    return {event.job_id: event for event in JobEvent.objects.filter(pk__in=picked)}


def _allocations(
    job: Job, slots: Sequence[Sequence[Slot]], nodes: Mapping[str, Node], at: datetime
) -> list[Allocation]:
    """One allocation per slot of each replica of ``job``, at its node's tier and price, from ``at`` (not saved)."""
    return [
        Allocation(
            job=job,
            replica=replica,
            node=nodes[slot.node],
            gpu_index=slot.gpu,
            mig_profile=slot.mig_profile or "",
            mig_start=slot.mig_start,
            tier=nodes[slot.node].tier,
            price_per_gpu_hour=nodes[slot.node].price_per_gpu_hour,
            started_at=at,
            generation=0,
        )
        for replica, replica_slots in enumerate(slots)
        for slot in replica_slots
    ]


def _running(ids: Sequence[int], at: datetime) -> None:
    """Every job of ``ids`` running from ``at`` (or from its submission, if later), its queue fields cleared, in one
    ``UPDATE`` of the jobs still pending; raises :class:`~jobs.errors.JobStateError` when one is not."""
    written = Job.objects.filter(pk__in=ids, state=JobState.PENDING).update(
        state=JobState.RUNNING,
        started_at=Greatest(Value(at), "submitted_at"),
        state_reason="",
        queue_position=None,
        team_queue_position=None,
        eta_at=None,
    )
    if written != len(ids):
        raise JobStateError(f"{len(ids) - written} of {len(ids)} jobs to bind are no longer pending; nothing is bound")


def _details(slots: Sequence[Sequence[Slot]], resumed: bool, checkpoint: JobEvent | None) -> dict[str, object]:
    """The ``bound`` event's details (the function doc of :func:`job_bind_record_many`); ``checkpoint``: the job's
    newest, for a resumed run."""
    details: dict[str, object] = {
        "placements": [
            [{"node": s.node, "gpu": s.gpu, "mig_profile": s.mig_profile, "mig_start": s.mig_start} for s in replica]
            for replica in slots
        ],
        "nodes": list(dict.fromkeys(s.node for r in slots for s in r)),
    }
    if resumed:
        step = (
            checkpoint.details.get("step") if checkpoint is not None and isinstance(checkpoint.details, dict) else None
        )
        details.update(resumed=True, resumed_from_step=step if isinstance(step, int) else None)
    return details
