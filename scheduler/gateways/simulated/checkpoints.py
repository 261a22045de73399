"""The simulated fleet's checkpoints as a real job's: a step and a path for each save, and the report a job makes
through its credential (package doc)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from jobs.errors import CheckpointInvalid, JobStateError
from jobs.models import Job
from jobs.services.checkpoints import CheckpointReport, checkpoint_record
from microcosm_checkpoint.manifest import file_name
from scheduler.gateways.simulated.pods import Pod
from scheduler.models import SimulatedPod

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SimulatedCheckpoint:
    at: datetime
    step: int  # whole virtual seconds of work the checkpoint holds, counted from the job's first start
    path: str  # <CHECKPOINT_DIR>/step-NNNNNNNNN.ckpt; "" for a pod without a checkpoint directory


def checkpoint_of(pod: Pod, at: datetime, work_s: float) -> SimulatedCheckpoint:
    """The checkpoint ``pod`` saved at ``at`` holding ``work_s`` virtual seconds of work."""
    step = int(work_s + 1e-6)  # whole seconds, robust to the last bit of a float sum (600.0000000001 is 600)
    path = f"{pod.checkpoint_dir}/{file_name(step)}" if pod.checkpoint_dir else ""
    return SimulatedCheckpoint(at=at, step=step, path=path)


def checkpoint_report(pod: SimulatedPod, checkpoint: SimulatedCheckpoint, *, cost_s: float, now: datetime) -> None:
    """Record ``checkpoint`` as the job's own report (``jobs.services.checkpoint_record``, source ``simulated``),
    as a real job reports a save through its credential. A report the service refuses (the job has ended, a time
    before its submission) is logged and dropped, as the API would answer it and the job would carry on."""
    report = CheckpointReport(
        step=checkpoint.step,
        saved_at=checkpoint.at,
        duration_s=cost_s,
        path=checkpoint.path,
        replica=pod.replica,
        source="simulated",
    )
    job = Job.objects.filter(pk=pod.job_id).first()
    if job is None:
        return
    try:
        checkpoint_record(job=job, report=report, now=now)
    except (CheckpointInvalid, JobStateError) as error:
        log.warning("job %s: its simulated checkpoint is not recorded: %s", pod.job_id, error)
