"""The demo's spot interruption: one notice, early, on a spot node that runs checkpointed training, so that within the
first minutes of ``make demo`` a job page reads "Checkpointed (step N) → Preempted (spot interruption) → Resumed from
step N on node X".

The simulated fleet reclaims spot nodes at random (``simulated_interruptions_per_node_hour``), which may take
an hour to hit a checkpointed job. Beat runs :func:`demo_spot_interruption` every ``DEMO_INTERRUPTION_S`` instead, until
one checkpointed job has been preempted by a spot interruption:

- a running training job with a checkpoint in its current run, on a spot node: the simulated cloud gives that
  node a notice (:meth:`~scheduler.gateways.simulated.SimulatedFleet.notice_give`), and the task runs a cycle at
  once, as the interruption task does for the fleet's own notices; the loop drains, requeues and resumes it;
- no checkpointed spot-ok training at all, running or waiting: one is submitted (:data:`INTERRUPTED_JOB`, through
  ``job_submit`` like the feed's), so a candidate is there within a cycle or two;
- otherwise it waits (for a checkpoint, for spot capacity, for a notice under way to end).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db.models import Max

from jobs.models import Allocation, Job, JobEvent
from jobs.services import job_submit
from scheduler.core.model.vocabulary import CapacityTier, EventType, EvictionReason, JobKind, JobState, JobTier
from scheduler.errors import GatewayConflict
from scheduler.gateways.simulated import SimulatedFleet
from scheduler.models import SimulatedNodeState
from teams.models import Team

# Speech's long checkpointed training on spot: 4 A100s, a save every 10 virtual minutes, 10 virtual hours of work
# (ten real minutes at the demo's 60×), so it is still running when its notice comes.
RECLAIM_TEAM = "speech"
INTERRUPTED_JOB: dict[str, Any] = {
    "name": "asr-train-spot",
    "project": "asr-train",
    "kind": "training",
    "gpus": 4,
    "gpu_model": "A100",
    "tier": "spot-ok",
    "preemptible": True,
    "checkpoint_interval_s": 600,
    "duration_s": 36_000,
}


def demo_spot_interruption(*, gateway: SimulatedFleet) -> dict[str, Any]:
    """One step of the demo's reclaim (module doc); returns what it did: ``{"noticed": node, "job": id}``,
    ``{"submitted": id}``, ``{"waiting": why}`` or ``{"done": ...}``."""
    if _shown():
        return {"done": "a checkpointed job was preempted by a spot interruption"}
    if SimulatedNodeState.objects.filter(notice_at__isnull=False).exists():
        return {"waiting": "a notice is under way"}
    candidate = _candidate()
    if candidate is not None:
        job_id, node = candidate
        try:
            gateway.notice_give(node=node)
        except GatewayConflict as refusal:
            # The fleet's own random draw, made as notice_give advances the clock, noticed the node (or it went)
            # in the same instant: the reclaim the demo wanted is under way anyway.
            return {"waiting": str(refusal)}
        return {"noticed": node, "job": job_id}
    live = Job.objects.filter(
        state__in=[JobState.PENDING, JobState.RUNNING],
        kind=JobKind.TRAINING,
        tier=JobTier.SPOT_OK,
        checkpoint_interval_s__isnull=False,
    )
    team = Team.objects.filter(slug=RECLAIM_TEAM).first()
    if not live.exists() and team is not None:
        job = job_submit(team=team, spec=dict(INTERRUPTED_JOB), actor=None, source="demo reclaim")
        return {"submitted": job.pk}
    return {"waiting": "for a checkpointed training job on a spot node"}


def _shown() -> bool:
    """A job with a checkpoint has been preempted by a spot interruption: the story is on its page."""
    return JobEvent.objects.filter(
        type=EventType.PREEMPTED,
        details__reason=EvictionReason.SPOT_INTERRUPTION.value,
        job__events__type=EventType.CHECKPOINTED,
    ).exists()


def _candidate() -> tuple[int, str] | None:
    """The first running checkpointed training job on a spot node with a checkpoint since its last bind (by
    event id), and its node."""
    rows = (
        Allocation.objects.filter(
            ended_at__isnull=True,
            tier=CapacityTier.SPOT,
            job__state=JobState.RUNNING,
            job__kind=JobKind.TRAINING,
            job__checkpoint_interval_s__isnull=False,
        )
        .order_by("job_id", "node__name")
        .values_list("job_id", "node__name")
    )
    on_spot: dict[int, str] = {}
    for job_id, node in rows:
        on_spot.setdefault(job_id, node)
    latest = {kind: _latest(on_spot, kind) for kind in (EventType.BOUND, EventType.CHECKPOINTED)}
    for job_id, node in sorted(on_spot.items()):
        if latest[EventType.CHECKPOINTED].get(job_id, 0) > latest[EventType.BOUND].get(job_id, 0):
            return job_id, node
    return None


def _latest(job_ids: Iterable[int], kind: EventType) -> dict[int, int]:
    events = JobEvent.objects.filter(job_id__in=list(job_ids), type=kind).values("job_id").annotate(last=Max("id"))
    return dict(events.values_list("job_id", "last"))
