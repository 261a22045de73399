"""Many jobs' checkpoints recorded at once, by the rules of :func:`jobs.services.checkpoints.checkpoint_record`:
what the loop's reconcile does every cycle for every running job whose reported checkpoint advanced
(:mod:`scheduler.loop.reconcile`). Each job gets the outcome ``checkpoint_record`` would give it; the queries are
a constant number whatever the number of jobs (one lock, one read of the steps already recorded, one insert —
which Django splits into batches where the database limits a statement's parameters, as SQLite does)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from django.db import transaction

from jobs.errors import CheckpointInvalid, JobStateError
from jobs.models import Job, JobEvent
from jobs.services.checkpoints import CheckpointReport, checkpoint_details, checkpoint_errors
from scheduler.core.model.vocabulary import TERMINAL_JOB_STATES, EventType


@dataclass(frozen=True, slots=True)
class CheckpointsRecorded:
    """What :func:`checkpoints_record` did with each job's report. A job in neither had its step recorded
    already: nothing was written for it (a retried report, the manifest seen again)."""

    created: frozenset[int]  # job ids whose checkpoint was recorded now
    refused: Mapping[int, CheckpointInvalid | JobStateError]  # job id -> why its report was not recorded


class CheckpointingJob(Protocol):
    """What is read of a job reporting a checkpoint: a :class:`~jobs.models.Job`, or a value tuple of its id and
    submission time (the loop reads every running job so: :mod:`scheduler.loop.reconcile`)."""

    @property
    def pk(self) -> int: ...

    @property
    def submitted_at(self) -> datetime: ...


def checkpoints_record(
    *, reports: Sequence[tuple[CheckpointingJob, CheckpointReport]], now: datetime
) -> CheckpointsRecorded:
    """Record each ``(job, report)`` as :func:`~jobs.services.checkpoints.checkpoint_record` would, one job at most
    once; events are created in the order given. One transaction: a failure writes none of them."""
    if len({job.pk for job, _ in reports}) != len(reports):
        raise ValueError("checkpoints_record takes one report per job")
    refused: dict[int, CheckpointInvalid | JobStateError] = {}
    valid: list[tuple[CheckpointingJob, CheckpointReport]] = []
    for job, report in reports:
        errors = checkpoint_errors(report, submitted_at=job.submitted_at, now=now)
        if errors:
            refused[job.pk] = CheckpointInvalid(errors)
        else:
            valid.append((job, report))
    if not valid:
        return CheckpointsRecorded(created=frozenset(), refused=refused)
    ids = [job.pk for job, _ in valid]
    with transaction.atomic():
        # Locked in id order: two batches over the same jobs take their locks in the same order, so neither waits
        # for the other while holding what the other waits for.
        states = dict(Job.objects.select_for_update().filter(pk__in=ids).order_by("pk").values_list("pk", "state"))
        steps = {report.step for _, report in valid}
        # The steps already recorded among these: one read for every job (the database compares the JSON values,
        # as checkpoint_record's ``details__step=`` does), each row then paired with its own job's step.
        candidates = JobEvent.objects.filter(job_id__in=ids, type=EventType.CHECKPOINTED, details__step__in=steps)
        recorded = {
            (job_id, details.get("step"))
            for job_id, details in candidates.values_list("job_id", "details")
            if isinstance(details, dict)
        }
        new: list[JobEvent] = []
        for job, report in valid:
            state = states.get(job.pk)
            if state is None:
                refused[job.pk] = JobStateError(f"Job {job.pk} no longer exists; it takes no more checkpoints.")
            elif state in TERMINAL_JOB_STATES:
                refused[job.pk] = JobStateError(f"Job {job.pk} has ended ({state}); it takes no more checkpoints.")
            elif (job.pk, report.step) not in recorded:
                details = checkpoint_details(report)
                new.append(JobEvent(job_id=job.pk, type=EventType.CHECKPOINTED, at=report.saved_at, details=details))
        JobEvent.objects.bulk_create(new)
    return CheckpointsRecorded(created=frozenset(event.job_id for event in new), refused=refused)
