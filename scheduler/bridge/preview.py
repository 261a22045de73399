"""The engine's answer for a job not submitted yet, on the cluster as it is now: the submit page's suggestion
and the ``rightsize`` API ask it (``jobs.selectors.rightsizing``).

The state is the one the last cycle left (:func:`scheduler.bridge.preview_state.last_state`: its snapshot with its
plan applied, which the worker leaves in the cache, brought up to the jobs submitted or gone since). Without one
(no shared cache, the worker stopped, a job moved between pending and running since), it is the snapshot a cycle
would build (:func:`scheduler.bridge.snapshot.build`: pending and running work, quotas, recent preemptions) over
the inventory as the last cycle recorded it (:func:`~scheduler.bridge.snapshot.inventory_observation`) — about a
second at 12,000 pending. Either way no gateway is called: the web process asks it on every keystroke, and on
Kubernetes it has no right to list nodes. The engine then plans with the job added
(:func:`scheduler.core.planning.preview`), and lists where the job could go at all in the order it tries them
(:func:`scheduler.core.placement.offers`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from django.conf import settings

from scheduler.bridge.policy import policy_at_speed
from scheduler.bridge.preview_state import last_state
from scheduler.bridge.snapshot import build, inventory_observation
from scheduler.core import Job, Node, Offer, Preview, offers, preview
from scheduler.gcpause import gc_paused


@dataclass(frozen=True, slots=True)
class FleetAnswer:
    preview: Preview
    offers: tuple[Offer, ...]  # most preferred first
    nodes: dict[str, Node]  # the snapshot's nodes by name: where the preview's slots are


def clock_speed() -> float:
    """Virtual seconds of job work per real second: the simulated fleet's speed, 1 on a real cluster."""
    return float(settings.SCHEDULER["simulated_speed"]) if settings.CLUSTER_BACKEND == "simulated" else 1.0


def fleet_answer(job: Job, *, now: float | None = None) -> FleetAnswer:
    """What the engine does with ``job`` (durations in virtual seconds, as a job spec states them) if it is
    submitted at ``now`` (default: the current time)."""
    at = time.time() if now is None else now
    speed = clock_speed()
    policy = policy_at_speed(speed)
    snapshot = last_state(at, speed) or build(inventory_observation(at, speed), policy, at).snapshot
    # The snapshot's jobs have their durations in real seconds (build divides by the speed); so must this one.
    job = replace(
        job,
        duration_s=job.duration_s / speed if job.duration_s else None,
        checkpoint_interval_s=job.checkpoint_interval_s / speed if job.checkpoint_interval_s else None,
    )
    # The cyclic collector is paused while the engine plans, as the loop pauses it (scheduler.gcpause): the
    # plans' per-cycle state is freed at the next young collection after the block, while a collection inside
    # it promoted that state towards the oldest generation and so triggered a full pass over the web process's
    # heap (the held state's jobs with it) every third preview: ~100 ms of a 300 ms answer
    # (docs/benchmarks/portal.md, notes).
    with gc_paused():
        answer = preview(snapshot, job, policy, at)
    return FleetAnswer(
        preview=answer,
        offers=offers(job, snapshot.nodes, policy),
        nodes={node.name: node for node in snapshot.nodes},
    )
