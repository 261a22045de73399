"""Queue positions written at once when a lead changes the order: a reorder, a rank or a priority.

Positions come from the last scheduling cycle; after a change to the order they describe an order that no
longer holds. So the service that makes the change also writes, in its own transaction, where every pending
job now stands in the engine's order (:func:`scheduler.core.queue_order`, over
:func:`scheduler.bridge.snapshot.queue_snapshot`): the order the next cycle takes them in until it binds one.
A job whose position changed loses its start estimate (the engine's replay of the queue, which gave it, ran
in the old order) and its reason tells the new number of jobs ahead (:func:`scheduler.core.reposition`); the
next cycle estimates again.

Why write them here rather than trigger a cycle and show "updating" until it ran: a cycle already in flight
planned from a snapshot taken before the change and would record that stale order anyway, and "updating"
would last at least one cycle, or for ever while the loop is stalled. Writing here is correct under the
loop's concurrency because of two rules:

- **One writer at a time.** :func:`positions_lock` takes the cycle's fence row (``SchedulerFence``, the row
  the loop's record step locks first, :func:`scheduler.loop.record.fence_check`) before any job row, in the
  same order as the loop, so the change and a cycle's record never interleave and cannot deadlock.
- **A stale plan does not overwrite.** The record step writes positions only when every waiting job still has
  the priority and rank its plan ordered it by (:func:`scheduler.loop.record.record_plan`, ``ordered``); a
  plan from before the change leaves these positions for the next cycle to replace.
"""

from __future__ import annotations

import logging

from jobs.models import Job
from jobs.services.queue_fields import QueueFields, job_queue_fields_write_bulk
from scheduler.bridge.policy import policy_current
from scheduler.bridge.snapshot import queue_snapshot
from scheduler.bridge.vocabulary import FENCE_NAME
from scheduler.core import queue_order, reposition
from scheduler.core.model.vocabulary import JobState
from scheduler.models import SchedulerFence

log = logging.getLogger(__name__)


def positions_lock() -> None:
    """Inside a transaction, before any job row is locked: serialise with the loop's record step (module doc)."""
    SchedulerFence.objects.select_for_update().get_or_create(name=FENCE_NAME)


def positions_refresh(*, now: float) -> int:
    """Write every pending job's position in the engine's order now (module doc); the caller holds
    :func:`positions_lock` in the same transaction. Returns how many jobs changed."""
    pending = list(
        Job.objects.select_for_update(of=("self",))
        .filter(state=JobState.PENDING)
        .select_related("team", "project")
        .order_by("pk")
    )
    try:
        places = queue_order(queue_snapshot(pending), policy_current(), now)
    except (KeyError, ValueError):
        # The inventory disagrees with the allocations (a node's GPU count lowered under running work): the
        # loop repairs that from the cluster; until its next cycle, no position is better than a wrong one.
        log.exception("queue positions: the inventory cannot hold the running work; cleared until the next cycle")
        places = ()
    where = {place.job: place for place in places}
    changed = []
    for job in pending:
        place = where.get(str(job.pk))
        position = place.position if place is not None else None
        team_position = place.team_position if place is not None else None
        if (job.queue_position, job.team_queue_position) == (position, team_position):
            continue
        eta_at, reason = job.eta_at, job.state_reason
        if job.queue_position != position:
            eta_at = None
            if position is not None:
                reason = reposition(reason, position - 1)
        changed.append((job.pk, QueueFields(position, team_position, eta_at, reason)))
    return job_queue_fields_write_bulk(changed)
