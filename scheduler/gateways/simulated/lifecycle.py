"""A simulated replica's log: the lifecycle lines the fleet produces for it, and nothing else.

The simulated fleet runs no container, so there is no training output to show and none is made up. What a
replica does on this fleet is recorded already: each run's devices (the job's ``Allocation`` rows, written when
the loop binds it and closed with the reason it stopped), the checkpoints it saved (the job's ``checkpointed``
events, with their step and path) and, while it stops, the SIGTERM its pod got (``SimulatedPod``). These lines
are that record, oldest first, one per thing that happened, in UTC.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from jobs.models import Allocation, JobEvent
from scheduler.core.model.vocabulary import EventType
from scheduler.models import SimulatedPod


@dataclass(frozen=True, slots=True)
class LifecycleLine:
    at: datetime
    text: str

    def render(self) -> str:
        return f"{self.at.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ} {self.text}"


def replica_lifecycle(*, job_id: int, replica: int) -> list[LifecycleLine]:
    """Every lifecycle line of replica ``replica`` of job ``job_id``, oldest first (module doc)."""
    lines = [*_runs(job_id, replica), *_checkpoints(job_id, replica), *_stopping(job_id, replica)]
    return sorted(lines, key=lambda line: line.at)


def _runs(job_id: int, replica: int) -> Iterable[LifecycleLine]:
    """One ``bound`` line per run (its devices on one node) and one ``stopped`` line when it ended."""
    runs: dict[tuple[datetime, str], list[Allocation]] = {}
    rows = Allocation.objects.filter(job_id=job_id, replica=replica).select_related("node", "node__gpu_model")
    for row in rows.order_by("started_at", "gpu_index", "mig_start"):
        runs.setdefault((row.started_at, row.node.name), []).append(row)
    for (started_at, node), held in runs.items():
        devices = ", ".join(_device(row) for row in held)
        yield LifecycleLine(
            started_at, f"bound to node {node} ({held[0].node.gpu_model.name}, {held[0].tier}): {devices}"
        )
        ended = [row for row in held if row.ended_at is not None]
        if ended:
            last = max(ended, key=lambda row: row.ended_at or started_at)
            reason = last.end_reason or "stopped"
            yield LifecycleLine(last.ended_at or started_at, f"stopped on node {node}: {reason}")


def _device(row: Allocation) -> str:
    if row.mig_profile:
        return f"GPU {row.gpu_index} MIG {row.mig_profile} at slice {row.mig_start}"
    return f"GPU {row.gpu_index}"


def _checkpoints(job_id: int, replica: int) -> Iterable[LifecycleLine]:
    """The job's saves this replica made; a save that names no replica is the job's, shown on replica 0."""
    events = JobEvent.objects.filter(job_id=job_id, type=EventType.CHECKPOINTED).order_by("at", "id")
    for event in events:
        details = event.details if isinstance(event.details, dict) else {}
        saved_by = details.get("replica")
        if (saved_by if isinstance(saved_by, int) else 0) != replica:
            continue
        step = details.get("step")
        text = "checkpoint saved" + (f": step {step}" if isinstance(step, int) else "")
        if details.get("path"):
            text += f" to {details['path']}"
        yield LifecycleLine(event.at, text)


def _stopping(job_id: int, replica: int) -> Iterable[LifecycleLine]:
    """The SIGTERM of a pod still stopping (it saves a checkpoint within its grace if it can, then exits)."""
    pod = SimulatedPod.objects.filter(job_id=job_id, replica=replica, stop_requested_at__isnull=False).first()
    if pod is None or pod.stop_requested_at is None:
        return
    exits = f"; its process exits at {pod.exits_at.astimezone(UTC):%H:%M:%SZ}" if pod.exits_at else ""
    yield LifecycleLine(pod.stop_requested_at, f"asked to stop (SIGTERM) on node {pod.node.name}{exits}")
