"""Reads of a job's moves: running inference restarted on its right-sized capacity make-before-break
(``jobs.services.loop``: ``job_move_start``, ``job_move_complete``, ``job_move_abandon``).

A move is told by its ``moved`` events, one per step, all naming its generation: ``started`` (from where to where),
then ``completed`` or ``abandoned`` (why). A move with only its start is under way: the job holds both placements,
the old replicas serving until the new ones are ready. Callers scope the job to the user first
(:func:`jobs.selectors.jobs.job_get_for_user`, :func:`jobs.selectors.jobs.job_list_for_user`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Exists, OuterRef, QuerySet

from jobs.models import Allocation, Job, JobEvent
from scheduler.core.model.vocabulary import EventType


@dataclass(frozen=True)
class MoveRow:
    """One move of a job: where from and where to (``placement_text``), when it started and how it stands."""

    generation: int
    started_at: datetime
    source: str  # the placement it leaves
    target: str  # the placement it starts
    outcome: str  # under-way | completed | abandoned
    ended_at: datetime | None = None
    reason: str = ""  # why it was abandoned

    @property
    def complete(self) -> bool:
        return self.outcome == "completed"


def placement_text(placements: Any) -> str:
    """A ``moved`` event's placement (a list of slots per replica) in words: ``mig-od-1 GPU 0 (3g.40gb)``, one
    entry per replica joined by ``; ``; "" for anything else (an event written by hand)."""
    if not isinstance(placements, list):
        return ""
    replicas = []
    for replica in placements:
        slots = []
        for slot in replica if isinstance(replica, list) else []:
            if not isinstance(slot, Mapping):
                continue
            what = f" ({slot['mig_profile']})" if slot.get("mig_profile") else ""
            slots.append(f"{slot.get('node')} GPU {slot.get('gpu')}{what}")
        replicas.append(", ".join(slots))
    return "; ".join(r for r in replicas if r)


def moves_of(events: Iterable[JobEvent]) -> list[MoveRow]:
    """The moves ``events`` (a job's, any order) tell, oldest first."""
    started: dict[int, JobEvent] = {}
    ends: dict[int, JobEvent] = {}
    for event in sorted((e for e in events if e.type == EventType.MOVED), key=lambda e: (e.at, e.pk or 0)):
        details = event.details if isinstance(event.details, dict) else {}
        generation = details.get("generation")
        if not isinstance(generation, int):
            continue
        if details.get("outcome") == "started":
            started.setdefault(generation, event)
        else:
            ends[generation] = event
    rows = []
    for generation, start in sorted(started.items()):
        details = start.details
        end = ends.get(generation)
        end_details = end.details if end is not None and isinstance(end.details, dict) else {}
        rows.append(
            MoveRow(
                generation=generation,
                started_at=start.at,
                source=placement_text(details.get("from")),
                target=placement_text(details.get("to")),
                outcome=str(end_details.get("outcome") or "under-way") if end is not None else "under-way",
                ended_at=end.at if end is not None else None,
                reason=str(end_details.get("reason") or ""),
            )
        )
    return rows


def job_moves(*, job: Job, events: Sequence[JobEvent] | None = None) -> list[MoveRow]:
    """``job``'s moves, oldest first (``events``: its events when the caller has read them already)."""
    found = events if events is not None else JobEvent.objects.filter(job=job, type=EventType.MOVED)
    return moves_of(found)


def with_moving(jobs: QuerySet[Job]) -> QuerySet[Job]:
    """``jobs`` annotated with ``moving``: a move under way, i.e. open allocations of two generations (one query
    for a whole page, no query per job)."""
    older = Allocation.objects.filter(job=OuterRef("job"), ended_at__isnull=True, generation__lt=OuterRef("generation"))
    newer = Allocation.objects.filter(job=OuterRef("pk"), ended_at__isnull=True).filter(Exists(older))
    return jobs.annotate(moving=Exists(newer))


def job_is_moving(job: Job) -> bool:
    """Has ``job`` a move under way (open allocations of two generations)? One query; a page of jobs reads
    :func:`with_moving` instead."""
    live = Allocation.objects.filter(job_id=job.pk, ended_at__isnull=True)
    return live.values("generation").distinct().count() > 1
