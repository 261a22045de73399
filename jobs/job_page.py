"""What the job page shows first and what it folds away.

A job's page leads with where it runs now; its history (timeline, checkpoints, earlier placements) grows with
every cycle a long job lives through, so the page shows only the latest entries of each list and keeps the
earlier ones inside a collapsed ``<details>``: a job of a thousand events has a page as short as one of ten.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from jobs.models import Allocation, JobEvent
from scheduler.core.vocabulary import EventType

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
class JobHistory:
    """The job page's lists: placements live now (the page's lead) and the folded history."""

    placed_now: list[Allocation]
    placed_before: list[Allocation]  # ended allocations, newest first
    timeline: Fold[JobEvent]
    checkpoints: Fold[JobEvent]


def job_history(*, events: Sequence[JobEvent], allocations: Sequence[Allocation]) -> JobHistory:
    """``events`` oldest first (``job_events``), ``allocations`` live first then newest (``job_allocations``)."""
    checkpoints = [e for e in events if e.type == EventType.CHECKPOINTED]
    return JobHistory(
        placed_now=[a for a in allocations if a.ended_at is None],
        placed_before=[a for a in allocations if a.ended_at is not None],
        timeline=fold(events, shown=TIMELINE_SHOWN),
        checkpoints=fold(checkpoints, shown=CHECKPOINTS_SHOWN),
    )
