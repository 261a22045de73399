"""What the portal says about a waiting job: when it is expected to start and why it waits.

Both come from the last scheduling cycle, which writes them on the job (``eta_at``, ``state_reason``,
``queue_position``); nothing here estimates anything. A start time is the engine's — a reservation's start or
its replay of the queue — or there is none: a job held by its quota gets no time, and its reason says what
would unblock it. One rule holds for every page and the API: a start time that has passed is never shown as
a time. The cycle that passed it has not started the job, so it is :data:`DUE_NOW`: the next scheduling
cycle decides, and writes a new estimate or starts it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from django.utils.timesince import timeuntil

from jobs.models import Job
from jobs.selectors.jobs import NO_POSITION_YET
from scheduler.core.model.vocabulary import JobState

DUE_NOW = "due now — the next scheduling cycle decides"
NO_ESTIMATE = "no start estimate — see why it waits"


class EtaStatus(StrEnum):
    """What a pending job's start estimate is."""

    ESTIMATED = "estimated"  # ``at`` is the engine's expected start, in the future
    DUE = "due"  # the expected start has passed: the next scheduling cycle decides (DUE_NOW)
    NONE = "none"  # the engine gives no time (held by quota, too deep in the queue, not seen by a cycle yet)


@dataclass(frozen=True, slots=True)
class EtaDisplay:
    """A start estimate as shown: ``at`` only when it is still ahead; ``text`` says it in words."""

    status: EtaStatus
    at: datetime | None
    text: str


def eta_display(eta_at: datetime | None, now: datetime) -> EtaDisplay:
    """The start estimate ``eta_at`` (the job's) as shown at ``now`` (module doc)."""
    if eta_at is None:
        return EtaDisplay(EtaStatus.NONE, None, NO_ESTIMATE)
    if eta_at <= now:
        return EtaDisplay(EtaStatus.DUE, None, DUE_NOW)
    return EtaDisplay(EtaStatus.ESTIMATED, eta_at, f"in {timeuntil(eta_at, now)}")


def waiting_reason(job: Job) -> str | None:
    """Why a pending job waits, in the engine's words; :data:`NO_POSITION_YET` before a cycle has seen it;
    None for a job that is not pending."""
    if job.state != JobState.PENDING:
        return None
    if job.queue_position is None or not job.state_reason:
        return NO_POSITION_YET
    return job.state_reason
