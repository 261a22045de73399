"""What the job page shows first and what it folds away.

A job's page leads with where it runs now; its history (timeline, checkpoints, earlier placements) grows with
every cycle a long job lives through, so the page shows only the latest entries of each list and keeps the
earlier ones inside a collapsed ``<details>``: a job of a thousand events has a page as short as one of ten.

State changes (submitted, bound or resumed, draining, preempted, requeued, failed, completed …) are what the
timeline is for, and a running job checkpoints every few minutes: so each run of consecutive checkpoints reads
as one line ("42 checkpoints, last at 3 Nov 10:42:13 (step 4200)", the full list in the Checkpoints panel),
and the timeline's open entries are its latest ``TIMELINE_SHOWN`` state changes, with the checkpoint lines
between them: no number of checkpoints pushes a preemption out of sight. The header counts the preemptions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Generic, TypeVar

from django.urls import reverse
from django.utils import timezone
from django.utils.formats import date_format

from jobs.models import Allocation, JobEvent
from jobs.selectors.preemptions import Preemptor
from jobs.selectors.timeline import event_text, preempted_text
from scheduler.core.model.vocabulary import EventType

T = TypeVar("T")

# How many of the latest entries each list shows open; enough to read what happened lately at a glance.
TIMELINE_SHOWN = 8
CHECKPOINTS_SHOWN = 3


@dataclass(frozen=True)
class Fold(Generic[T]):
    """A list in its order, cut into the entries shown and the ``earlier`` ones (before them) folded away."""

    shown: list[T] = field(default_factory=list)
    earlier: list[T] = field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.shown) + len(self.earlier)


def fold(items: Sequence[T], *, shown: int) -> Fold[T]:
    """``items`` (oldest first) with its last ``shown`` entries open and the rest folded."""
    cut = max(0, len(items) - shown)
    return Fold(shown=list(items[cut:]), earlier=list(items[:cut]))


@dataclass(frozen=True)
class Line:
    """One line of the timeline: a state change, or ``checkpoints`` consecutive checkpoints (then ``at`` is the
    last one's). ``link``: the page of the job the line names, only when the viewer may open it."""

    at: datetime
    text: str
    actor: str = "scheduler"
    checkpoints: int = 0
    link: str = ""
    link_label: str = ""


@dataclass(frozen=True)
class Preemptions:
    """The header's count: how many times the job was preempted (a ``preempted`` event each), and the last."""

    count: int = 0
    last: Line | None = None
    last_by: str = ""  # "by a production inference job of team Vision (production)" or "for spot interruption"


@dataclass(frozen=True)
class JobHistory:
    """The job page's lists: placements live now (the page's lead) and the folded history."""

    placed_now: list[Allocation]
    placed_before: list[Allocation]  # ended allocations, newest first
    timeline: Fold[Line]
    checkpoints: Fold[JobEvent]
    # While a move is under way the job holds two generations of allocations: the newest is where it is
    # starting, the older where it still serves until the new replicas are ready.
    newest_generation: int = 0
    moving: bool = False


def job_history(
    *,
    events: Sequence[JobEvent],
    allocations: Sequence[Allocation],
    preemptors: Mapping[int, Preemptor] | None = None,
) -> JobHistory:
    """``events`` oldest first (``job_events``), ``allocations`` live first then newest (``job_allocations``),
    ``preemptors`` by event id for the viewer (:func:`jobs.selectors.preemptions.preemptors_for_user`)."""
    checkpoints = [e for e in events if e.type == EventType.CHECKPOINTED]
    placed_now = [a for a in allocations if a.ended_at is None]
    generations = {a.generation for a in placed_now}
    return JobHistory(
        placed_now=sorted(placed_now, key=lambda a: (a.generation, a.replica, a.gpu_index)),
        placed_before=[a for a in allocations if a.ended_at is not None],
        timeline=fold_changes(timeline_lines(events, preemptors or {}), shown=TIMELINE_SHOWN),
        checkpoints=fold(checkpoints, shown=CHECKPOINTS_SHOWN),
        newest_generation=max(generations, default=0),
        moving=len(generations) > 1,
    )


def timeline_lines(events: Sequence[JobEvent], preemptors: Mapping[int, Preemptor]) -> list[Line]:
    """``events`` (oldest first) as lines: each state change its own, each run of checkpoints one."""
    lines: list[Line] = []
    run: list[JobEvent] = []
    for event in [*events, None]:
        if event is not None and event.type == EventType.CHECKPOINTED:
            run.append(event)
            continue
        if run:
            lines.append(_checkpoint_line(run))
            run = []
        if event is not None:
            lines.append(_line(event, preemptors.get(event.pk)))
    return lines


def fold_changes(lines: Sequence[Line], *, shown: int) -> Fold[Line]:
    """``lines`` with the latest ``shown`` state changes open, and the checkpoint lines among and after them."""
    changes = [i for i, line in enumerate(lines) if not line.checkpoints]
    cut = changes[-shown] if len(changes) >= shown else 0
    if cut and lines[cut - 1].checkpoints:
        cut -= 1  # the checkpoints that led up to the first open change stay with it
    return Fold(shown=list(lines[cut:]), earlier=list(lines[:cut]))


def preemption_count(events: Sequence[JobEvent], preemptors: Mapping[int, Preemptor]) -> Preemptions:
    """How many times the job was preempted, and by what the last time (the header's line)."""
    preempted = [e for e in events if e.type == EventType.PREEMPTED]
    if not preempted:
        return Preemptions()
    last = preempted[-1]
    details = last.details if isinstance(last.details, dict) else {}
    line = _line(last, preemptors.get(last.pk))
    text = line.text.removeprefix("Preempted ")
    return Preemptions(count=len(preempted), last=line, last_by=text if details.get("by") else f"for {text[1:-1]}")


def _line(event: JobEvent, preemptor: Preemptor | None) -> Line:
    actor = event.actor.username if event.actor_id and event.actor is not None else "scheduler"
    if event.type != EventType.PREEMPTED or preemptor is None:
        return Line(at=event.at, text=event_text(event), actor=actor)
    details = event.details if isinstance(event.details, dict) else {}
    text = preempted_text(details, preemptor.words())
    if not preemptor.visible:
        return Line(at=event.at, text=text, actor=actor)
    link = reverse("jobs:detail", args=[preemptor.job_id])
    return Line(at=event.at, text=text, actor=actor, link=link, link_label=f"job {preemptor.job_id} ({preemptor.name})")


def _checkpoint_line(run: Sequence[JobEvent]) -> Line:
    last = run[-1]
    if len(run) == 1:
        return Line(at=last.at, text=event_text(last), checkpoints=1)
    step = last.details.get("step") if isinstance(last.details, dict) else None
    when = date_format(timezone.localtime(last.at), "j M H:i:s")
    tail = f" (step {step})" if isinstance(step, int) else ""
    return Line(at=last.at, text=f"{len(run)} checkpoints, last at {when}{tail}", checkpoints=len(run))
