"""The state the last cycle left, kept for the submit preview (:mod:`scheduler.bridge.preview`): the loop's worker
leaves it in the cache after each cycle, and a web process reads it instead of building a snapshot from the
database on every keystroke (a build reads every pending and running job: about a second at 12,000 pending).

The worker (:func:`publish`, from ``scheduler.loop.cycle`` once the cycle is applied) stores the cycle's snapshot
with its plan applied (:func:`scheduler.core.planning.carry.carried`: what the next cycle would start from) under
:data:`KEY`, and the cycle's instant under :data:`STAMP_KEY`. A web process asks the small stamp on every preview
and reads (and unpickles) the state only when the stamp is new: it keeps the last one it read in memory
(:func:`last_state`). Only where the web processes share the worker's cache (Redis: ``settings.CACHE_BACKEND``)
does the worker publish (``settings.PREVIEW_STATE_PUBLISH``); a process-local cache would only cost the worker.

What happened since the cycle is read cheaply: the ids and states of the pending and running jobs (one query of
integers). A job submitted since is read and added to the queue; a job that left the queue or finished since is
taken out. When a job has changed between pending and running since (a bind the cluster refused, a job requeued
between cycles), or the state is older than :data:`MAX_AGE_CYCLES` cycles (the worker stopped), or the cache
cannot be read, there is no state: the caller builds one from the database, as before — correct, only slower.
What the state does not see until the next cycle: a lead's reorder or priority change, a quota change, a node
lost or added since the cycle.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, replace

from django.conf import settings
from django.core.cache import cache

from jobs.models import Job as JobRow
from scheduler.bridge.snapshot import pending_read
from scheduler.core import Plan, Snapshot, carried
from scheduler.core.model.vocabulary import JobState

log = logging.getLogger(__name__)

KEY = "scheduler:preview-state"  # (at, clock speed, the carried snapshot)
STAMP_KEY = "scheduler:preview-state:at"  # the cycle's instant: asked on every preview, a few bytes
MAX_AGE_CYCLES = 3  # older than this many cycle periods, the worker is taken to have stopped


@dataclass(frozen=True, slots=True)
class Held:
    """A state read from the cache: the cycle's instant (epoch seconds), the clock speed it was built at, and the
    snapshot with the cycle's plan applied."""

    at: float
    speed: float
    snapshot: Snapshot


_held: Held | None = None  # this process's copy of the last state it read
_lock = threading.Lock()  # one thread reads a new state; the others wait for it rather than read it too


def publish(snapshot: Snapshot, plan: Plan, at: float, speed: float) -> None:
    """Leave the state the cycle planned at ``at`` leaves (``snapshot`` with ``plan`` applied) for the previews
    (module doc). Never raises: a preview without it builds its own snapshot."""
    if not settings.PREVIEW_STATE_PUBLISH:
        return
    timeout = _max_age_s() * 2
    try:
        cache.set(KEY, (at, speed, carried(snapshot, plan, at)), timeout=timeout)
        cache.set(STAMP_KEY, at, timeout=timeout)
    except Exception:  # the cache is down: the previews build their own snapshots meanwhile
        log.warning("the state for the submit preview could not be stored", exc_info=True)


def forget() -> None:
    """Drop this process's copy (tests; a process that must not answer from an old state)."""
    global _held
    _held = None


def last_state(now: float, speed: float) -> Snapshot | None:
    """The state the last cycle left, brought up to the queue's jobs as they are at ``now``; None when there is
    none to trust (module doc)."""
    held = _read(now, speed)
    if held is None:
        return None
    return _current(held.snapshot, speed)


def _read(now: float, speed: float) -> Held | None:
    global _held
    try:
        stamp = cache.get(STAMP_KEY)
    except Exception:
        log.warning("the state for the submit preview could not be read", exc_info=True)
        return None
    if not isinstance(stamp, float | int) or abs(now - stamp) > _max_age_s():
        return None
    held = _held
    if held is None or held.at != stamp:
        with _lock:
            held = _held
            if held is None or held.at != stamp:
                try:
                    value = cache.get(KEY)
                except Exception:
                    log.warning("the state for the submit preview could not be read", exc_info=True)
                    return None
                if value is None:
                    return None
                at, stored_speed, snapshot = value
                held = _held = Held(at=float(at), speed=float(stored_speed), snapshot=snapshot)
    if held.speed != speed or abs(now - held.at) > _max_age_s():
        return None
    return held


def _current(snapshot: Snapshot, speed: float) -> Snapshot | None:
    """``snapshot`` with the queue's jobs as the database holds them now: those submitted since added, those gone
    taken out; None when a job has moved between pending and running since."""
    now_in = dict(JobRow.objects.filter(state__in=[JobState.PENDING, JobState.RUNNING]).values_list("pk", "state"))
    known = {job.id: JobState.PENDING for job in snapshot.pending}
    known.update((entry.job.id, JobState.RUNNING) for entry in snapshot.running)
    added = []
    for pk, state in now_in.items():
        was = known.get(str(pk))
        if was is None:
            if state == JobState.PENDING:
                added.append(pk)
            else:
                return None  # running, and the state never saw it pending: bound by a newer cycle
        elif was != state:
            return None
    gone = {job_id for job_id in known if not job_id.isdigit() or int(job_id) not in now_in}
    if not added and not gone:
        return snapshot
    pending = tuple(job for job in snapshot.pending if job.id not in gone)
    return replace(
        snapshot,
        pending=(*pending_read(added, speed), *pending) if added else pending,
        running=tuple(entry for entry in snapshot.running if entry.job.id not in gone),
    )


def _max_age_s() -> float:
    return MAX_AGE_CYCLES * float(settings.SCHEDULER["cycle_s"])
