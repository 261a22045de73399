"""The state the last cycle left, kept for the submit preview (:mod:`scheduler.bridge.preview`): the loop's worker
leaves it in the cache after each cycle, and a web process reads it instead of building a snapshot from the
database on every keystroke (a build reads every pending and running job: about a second at 12,000 pending).

The worker (:func:`publish`, from ``scheduler.loop.cycle`` once the cycle is applied) stores the cycle's snapshot
with its plan applied (:func:`scheduler.core.planning.carry.carried`: what the next cycle would start from) under
:data:`KEY`, and the cycle's instant under :data:`STAMP_KEY`. A web process asks the small stamp on every preview
and reads (and unpickles) the state only when the stamp is new: it keeps the last one it read in memory
(:func:`last_state`). Only where the web processes share the worker's cache (Redis: ``settings.CACHE_BACKEND``)
does the worker publish (``settings.PREVIEW_STATE_PUBLISH``); a process-local cache would only cost the worker.

The snapshot is stored as bytes of its own pickling (:func:`packed`): each engine dataclass as its class and its
field values, rebuilt by setting them on a new instance (:func:`_rebuilt`; a compiled class whose ``__init__`` is
written in its body cannot be made blank, and is rebuilt by its constructor). The standard pickling of a frozen
slotted dataclass rebuilds it through ``dataclasses``' ``__setstate__``, which asks ``fields()`` again per
instance: 80 of the 240 ms of the first preview after each cycle at 12,000 pending, and 50 ms this way; the
read runs with the cyclic collector paused, which would otherwise walk the young objects of the state as they
are rebuilt (docs/benchmarks/portal.md, notes).

What happened since the cycle is read cheaply: the ids and states of the pending and running jobs (one query of
integers). A job submitted since is read and added to the queue; a job that left the queue or finished since is
taken out. When a job has changed between pending and running since (a bind the cluster refused, a job requeued
between cycles), or the state is older than :data:`MAX_AGE_CYCLES` cycles (the worker stopped), or the cache
cannot be read, or what it holds cannot be unpacked (written by a worker of another release while an upgrade rolls
out, whose engine classes differ), there is no state: the caller builds one from the database, as before — correct,
only slower.
What the state does not see until the next cycle: a lead's reorder or priority change, a quota change, a node
lost or added since the cycle.
"""

from __future__ import annotations

import io
import logging
import operator
import pickle
import threading
from collections.abc import Callable
from dataclasses import dataclass, fields, is_dataclass, replace
from typing import Any

from django.conf import settings
from django.core.cache import cache

from jobs.models import Job as JobRow
from scheduler.bridge.snapshot import pending_read
from scheduler.core import Plan, Snapshot, carried
from scheduler.core.model.vocabulary import JobState
from scheduler.gcpause import gc_paused

log = logging.getLogger(__name__)

KEY = "scheduler:preview-state:packed"  # (at, clock speed, the carried snapshot packed: packed())
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
        cache.set(KEY, (at, speed, packed(carried(snapshot, plan, at))), timeout=timeout)
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
                try:
                    at, stored_speed, blob = value
                    held = _held = Held(at=float(at), speed=float(stored_speed), snapshot=unpacked(blob))
                except Exception:  # another release's worker wrote it (an upgrade under way), or it is damaged
                    log.warning("the state for the submit preview could not be unpacked", exc_info=True)
                    return None
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


def packed(snapshot: Snapshot) -> bytes:
    """``snapshot`` pickled with each engine dataclass as (class, field values) (module doc)."""
    buffer = io.BytesIO()
    _Packer(buffer, pickle.HIGHEST_PROTOCOL).dump(snapshot)
    return buffer.getvalue()


def unpacked(blob: bytes) -> Snapshot:
    """The snapshot :func:`packed` stored, rebuilt with the cyclic collector paused (module doc)."""
    with gc_paused():
        snapshot = pickle.loads(blob)
    if not isinstance(snapshot, Snapshot):
        raise TypeError(f"the preview state holds a {type(snapshot).__name__}, not a snapshot")
    return snapshot


def _rebuilt(cls: type[object], names: tuple[str, ...], values: tuple[object, ...]) -> object:
    """An instance of ``cls`` with ``values`` set on ``names``: what dataclasses' ``__setstate__`` does, without
    asking the fields again. The values come from an instance that was valid, so its checks are not run again."""
    instance: object = cls.__new__(cls)  # not object.__new__: a compiled (mypyc) engine class has its own
    for name, value in zip(names, values, strict=True):
        object.__setattr__(instance, name, value)
    return instance


def _blank_allowed(cls: type[object]) -> bool:
    """Whether ``cls.__new__(cls)`` makes an instance without calling ``__init__``. A compiled (mypyc) class whose
    ``__init__`` is written in its body (``scheduler.core.model``'s hot value classes) calls it from ``__new__``,
    which then asks for the fields as arguments."""
    try:
        cls.__new__(cls)
    except TypeError:
        return False
    return True


# How each engine dataclass is packed, decided once per class (the packer is asked for every object it meets: about
# 200,000 at 5,000 nodes / 50,000 pending): a function of the instance that returns its reduction. A class whose
# blank instance cannot be made is rebuilt by its constructor, which takes the fields in their order (a dataclass's
# own, or one written in the body to match it: tests/scheduler/core/model/test_written_methods.py).
_Reduction = tuple[Any, tuple[Any, ...]]
_REDUCTIONS: dict[type, Callable[[Any], _Reduction] | None] = {}


def _reduction(cls: type) -> Callable[[Any], _Reduction] | None:
    if cls in _REDUCTIONS:
        return _REDUCTIONS[cls]
    found: Callable[[Any], _Reduction] | None = None
    if cls.__module__.startswith("scheduler.core.") and is_dataclass(cls):
        names = tuple(f.name for f in fields(cls))
        getter = operator.attrgetter(*names)  # one C call for the values, not a generator per instance
        values: Callable[[Any], tuple[Any, ...]] = getter if len(names) > 1 else lambda obj: (getter(obj),)
        blank = _blank_allowed(cls)

        def reduce(obj: Any) -> _Reduction:
            return (_rebuilt, (cls, names, values(obj))) if blank else (cls, values(obj))

        found = reduce
    _REDUCTIONS[cls] = found
    return found


class _Packer(pickle.Pickler):
    """Pickles the engine's dataclasses as :func:`_reduction` decides; everything else as pickle does."""

    def reducer_override(self, obj: Any) -> Any:
        reduce = _reduction(type(obj))
        return NotImplemented if reduce is None else reduce(obj)


def _max_age_s() -> float:
    return MAX_AGE_CYCLES * float(settings.SCHEDULER["cycle_s"])
