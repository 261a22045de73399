"""Checkpoints a job reports (through its credential, the Kubernetes gateway's manifest fallback, or the
simulated fleet): each one a ``checkpointed`` event, the resume point of the job's next run and the start of
the work the ledger counts as lost if the job is stopped before the next one (docs/checkpointing.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction

from jobs.errors import CheckpointInvalid, JobStateError
from jobs.models import Job, JobEvent
from scheduler.core.model.vocabulary import TERMINAL_JOB_STATES, EventType

# A report stamped later than this past the server's clock is a clock problem, not a checkpoint.
CLOCK_SKEW = timedelta(seconds=60)


@dataclass(frozen=True, slots=True)
class CheckpointReport:
    """What a job says of one complete checkpoint."""

    step: int
    saved_at: datetime
    size_bytes: int = 0
    duration_s: float = 0.0  # how long the save took: the measured checkpoint cost
    path: str = ""  # the checkpoint's file, as the job's pods see it (RESUME_FROM of the next run)
    replica: int = 0
    source: str = "job"  # job | manifest | simulated


def checkpoint_record(*, job: Job, report: CheckpointReport, now: datetime) -> tuple[JobEvent, bool]:
    """Record ``report`` as a ``checkpointed`` event of ``job``; returns ``(event, created)``.

    Idempotent: a step already recorded for the job returns its event and records nothing (a retried report,
    the manifest seen again). Raises :class:`~jobs.errors.CheckpointInvalid` naming the field when the report
    cannot be true (a negative step, size or duration; a time before the job was submitted or in the future) and
    :class:`~jobs.errors.JobStateError` for a job that has ended.
    """
    errors = checkpoint_errors(report, submitted_at=job.submitted_at, now=now)
    if errors:
        raise CheckpointInvalid(errors)
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        if locked.state in TERMINAL_JOB_STATES:
            raise JobStateError(f"Job {job.pk} has ended ({locked.state}); it takes no more checkpoints.")
        existing = (
            JobEvent.objects.filter(job=locked, type=EventType.CHECKPOINTED, details__step=report.step)
            .order_by("at", "id")
            .first()
        )
        if existing is not None:
            return existing, False
        details = checkpoint_details(report)
        event = JobEvent.objects.create(job=locked, type=EventType.CHECKPOINTED, at=report.saved_at, details=details)
        return event, True


def checkpoint_errors(report: CheckpointReport, *, submitted_at: datetime, now: datetime) -> dict[str, list[str]]:
    """Why ``report`` cannot be true of a job submitted at ``submitted_at``, by field (empty: it can)."""
    errors: dict[str, list[str]] = {}
    if report.step < 0:
        errors.setdefault("step", []).append("A step is a count of training steps: give 0 or more.")
    if report.size_bytes < 0:
        errors.setdefault("size_bytes", []).append("A size is a count of bytes: give 0 or more.")
    if report.duration_s < 0:
        errors.setdefault("duration_s", []).append("A duration is in seconds: give 0 or more.")
    if report.saved_at > now + CLOCK_SKEW:
        errors.setdefault("saved_at", []).append(
            f"{report.saved_at.isoformat()} is in the future (the server's time is {now.isoformat()}): check the "
            "job's clock."
        )
    if report.saved_at < submitted_at:
        errors.setdefault("saved_at", []).append("This time is before the job was submitted: check the job's clock.")
    return errors


def checkpoint_details(report: CheckpointReport) -> dict[str, object]:
    """What a ``checkpointed`` event records of ``report`` (read back by ``jobs.selectors.jobs.checkpoint_row``)."""
    return {
        "step": report.step,
        "size_bytes": report.size_bytes,
        "duration_s": round(report.duration_s, 3),
        "path": report.path,
        "replica": report.replica,
        "source": report.source,
    }


def checkpoint_latest(job: Job) -> JobEvent | None:
    """The job's newest recorded checkpoint (by time), or None."""
    return JobEvent.objects.filter(job=job, type=EventType.CHECKPOINTED).order_by("-at", "-id").first()
