"""Why a pending job waits, in words a person understands, and when it may start.

A reason has three parts joined by "; ": what the job waits for and what blocks it, the team's standing
against its guarantee, and how many jobs are ahead of it in the global order —
"waiting for 4 H100 GPUs; team above its guarantee; 3 jobs ahead".

ETA (``eta_s``, seconds from now) is an estimate from the expected ends of the placed work (run-time
estimates as :mod:`scheduler.core.decisions.reservation` makes them: ``duration_s``, else the team's history, else the
policy's default), in units of 1/7000 GPU:

- holding a reservation: the reservation's start (the reservation plan);
- blocked by free capacity: a replay per pool of GPU models (the models the job may use) as a backfilling
  scheduler runs it. The pool's free units over time start at what is free now and rise as the placed work
  is expected to end; the capacity-blocked and reserved jobs take their turn in queue order, each at the
  earliest time its units are free for its whole expected run time — before a job ahead of it when it fits
  in a hole that job leaves, as backfill lets it — and holds them for the jobs behind it (a reserved job
  claims them at its reservation's start). Only the first :data:`PROFILE_DEPTH` jobs of a pool get a time;
- blocked by its team's quota: no time — whether the team's work ends, or is evicted, or the limit is
  raised is not a matter of expected ends; the reason says what would unblock it (fair share's refusal).
  That includes a job blocked by free capacity whose quota — guarantee or burst limit — refuses it now and
  would still refuse it at the replay's start, once the team's own work expected to end by then has ended:
  it waits for the quota (its reason, no time), as a reservation's job does (:mod:`reservation`, rule 1),
  and it claims nothing in the replay, so the jobs behind it are not held back by a start that cannot come;
- waiting for a MIG reconfiguration (under way, or held for next cycle): when the change is expected to finish;
- None when it cannot be told: even all of the pool's work ending would not make room, or the job is deeper
  in its pool's queue than the depth.

Placement shape (fragmentation, topology) is ignored, so the estimate is optimistic by design.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from scheduler.core.gpus.catalog import GPU_MODEL_BY_NAME
from scheduler.core.gpus.units import FULL_GPU_MILLI, UNITS_PER_GPU
from scheduler.core.model.cluster_state import ClusterState, gpu_class_of, slot_units
from scheduler.core.model.demand import Demand, DemandKind
from scheduler.core.model.snapshot import Job
from scheduler.core.model.tables import FORGET, Tables
from scheduler.core.model.vocabulary import BlockerKind

# A pool answers this many jobs in queue order; those behind get no time (the profile grows with each job, and
# a start hours behind hundreds of others is no estimate a person can use).
PROFILE_DEPTH = 100


@dataclass(frozen=True, slots=True)
class Blocker:
    """What stopped a job this cycle: ``kind`` says what; ``detail`` is the admission's reason (quota) or the
    node being reconfigured; ``ready_at`` when a reconfiguration ends."""

    kind: BlockerKind
    detail: str = ""
    ready_at: float | None = None


def demand_units(demand: Demand, gpu_model: str) -> int:
    """Units (1/7000 GPU) one replica with ``demand`` holds on ``gpu_model``."""
    if demand.kind == DemandKind.WHOLE:
        return demand.gpus * UNITS_PER_GPU
    if demand.kind == DemandKind.MIG:
        profile = GPU_MODEL_BY_NAME[gpu_model].profiles()[demand.mig_profile or ""]
        return profile.compute_slices * FULL_GPU_MILLI
    return demand.milli * (UNITS_PER_GPU // FULL_GPU_MILLI)


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def gpu_label(job: Job, models: Sequence[str]) -> str:
    """ "H100 " for a job pinned to (or only able to use) one class or model, else ""."""
    if job.gpu_model:
        return job.gpu_model + " "
    classes = sorted({gpu_class_of(model) for model in models})
    return classes[0] + " " if len(classes) == 1 else ""


def need_text(job: Job, demand: Demand | None, models: Sequence[str]) -> str:
    """What the job waits for: "4 H100 GPUs", "2 × 1g.10gb MIG instances (all at once)", …"""
    label = gpu_label(job, models)
    replicas = job.replicas
    together = " (all at once)" if replicas > 1 else ""
    if demand is None:
        return f"{_plural(replicas, 'replica')} of {label}GPU capacity"
    if demand.kind == DemandKind.WHOLE:
        total = demand.gpus * replicas
        shape = f" ({replicas} replicas × {demand.gpus}, all at once)" if replicas > 1 else ""
        return f"{total} {label}{'GPU' if total == 1 else 'GPUs'}{shape}"
    if demand.kind == DemandKind.MIG:
        if replicas == 1:
            return f"a {demand.mig_profile} MIG instance"
        return f"{replicas} × {demand.mig_profile} MIG instances{together}"
    if replicas == 1:
        return f"a {demand.milli}-milli share of a time-sliced {label}GPU"
    return f"{replicas} × {demand.milli}-milli shares of time-sliced {label}GPUs{together}"


def duration_text(seconds: float) -> str:
    """ "45 s", "12 min", "3 h 5 min": a wait as a person reads it (never negative)."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h" if minutes == 0 else f"{hours} h {minutes} min"


def ahead_text(ahead: int) -> str:
    return "next in line" if ahead == 0 else f"{_plural(ahead, 'job')} ahead"


def reposition(reason: str, ahead: int) -> str:
    """``reason`` (as :func:`reason_text` writes it) for a job that now has ``ahead`` jobs ahead of it: its last
    part told again; a text of another form is returned unchanged."""
    head, separator, tail = reason.rpartition("; ")
    if separator and (tail == ahead_text(0) or tail.endswith(" ahead")):
        return f"{head}; {ahead_text(ahead)}"
    return reason


def standing_text(guarantee_units: int, held_units: int, under: bool) -> str:
    """The team's standing against its guarantee, as the reason's middle part."""
    if guarantee_units <= 0:
        return "team has no guaranteed quota"
    if under:
        return "team within its guarantee"
    if held_units > guarantee_units:
        return "team above its guarantee"
    return "team at its guarantee"


def reason_text(need: str, blocker: Blocker, standing: str, ahead: int, now: float) -> str:
    """The full reason (module doc)."""
    if blocker.kind == BlockerKind.QUOTA:
        head = f"waiting for {need} within quota: {blocker.detail}"
    elif blocker.kind == BlockerKind.RECONFIGURING:
        ready = "" if blocker.ready_at is None else f", ready in {max(0, round(blocker.ready_at - now))} s"
        head = f"waiting for {need}; MIG reconfiguration under way on {blocker.detail}{ready}"
    elif blocker.kind == BlockerKind.HELD:
        ready = "" if blocker.ready_at is None else f", ready in about {max(0, round(blocker.ready_at - now))} s"
        head = (
            f"waiting for {need}; {blocker.detail} is held for its MIG reconfiguration next cycle (it took a bind "
            f"in this one){ready}"
        )
    elif blocker.kind == BlockerKind.RESERVED:
        start = "" if blocker.ready_at is None else f" in about {duration_text(blocker.ready_at - now)}"
        head = (
            f"waiting for {need}; reserved on {blocker.detail}: expected to start{start}, when the work running "
            "there is expected to end (shorter jobs may use those GPUs until then)"
        )
    elif blocker.kind == BlockerKind.NOT_READY:
        head = f"waiting for {need}; no node that could run it is ready (cordoned, draining or reconfiguring)"
    else:
        head = f"waiting for {need}"
    return f"{head}; {standing}; {ahead_text(ahead)}"


class _Profile:
    """One pool's free units over time, from now on: a step function (``frees[i]`` units free from
    ``times[i]`` to the next breakpoint, the last for ever), lowered by each job given a start on it."""

    def __init__(self, now: float, free: int, releases: Iterable[tuple[float, int]], tables: Tables) -> None:
        times, frees = [now], [free]
        for at, units in sorted(releases):
            if at <= times[-1]:
                frees[-1] += units
            else:
                times.append(at)
                frees.append(frees[-1] + units)
        self.times, self.frees = times, frees
        self.peak = frees[-1]  # what is free once all of it has ended: every claim ends, so it stays
        self.claims = 0
        self._floor: dict[int, float] = tables.table()  # units → the first time a start could come

    def start(self, units: int, duration_s: float, at: float | None = None, *, claim: bool = True) -> float | None:
        """The earliest time ``units`` are free for ``duration_s`` — or ``at``, a start already decided (a
        reservation's) — and they are then taken (unless ``claim`` is False: the question is only asked); None
        when the pool never has that many, or when it has answered :data:`PROFILE_DEPTH` jobs already."""
        if units > self.peak or self.claims >= PROFILE_DEPTH:
            return None
        times, frees = self.times, self.frees
        if at is not None:
            self.claims += 1
            self._hold(self._breakpoint(max(at, times[0])), at + duration_s, units)
            return at
        # Speed, never a different answer: claims only lower the profile, so where ``units`` were first free at
        # an earlier question they are first free now at the earliest; the scan starts there.
        floor = self._floor.get(units, times[0])
        i = bisect_left(times, floor)
        while frees[i] < units:
            i += 1
        self._floor[units] = times[i]
        while True:
            if frees[i] < units:
                i += 1
                continue
            end = times[i] + duration_s
            j = i + 1
            while j < len(times) and times[j] < end and frees[j] >= units:
                j += 1
            if j < len(times) and times[j] < end:  # too little free at times[j]: start after it
                i = j + 1
                continue
            if claim:
                self.claims += 1
                self._hold(i, end, units)
            return times[i]

    def _breakpoint(self, at: float) -> int:
        """The index of a breakpoint at ``at`` (≥ now), made if there is none."""
        times, frees = self.times, self.frees
        index = bisect_left(times, at)
        if index == len(times) or times[index] != at:
            times.insert(index, at)
            frees.insert(index, frees[index - 1])
        return index

    def _hold(self, first: int, end: float, units: int) -> None:
        last = self._breakpoint(end)
        frees = self.frees
        for k in range(first, last):
            frees[k] -= units


class EtaEstimator:
    """ETAs from the expected ends of the work placed in ``state`` (module doc).

    ``free_units`` gives the units free now on ready GPUs, per GPU model; ``expected_end(job_id)`` when a placed
    job is expected to end (:mod:`scheduler.core.decisions.reservation`, rule 5); ``skip`` names placed jobs that
    hold nothing for the estimate (reservation holds, whose GPUs ``free_units`` counts free). Ask
    :meth:`capacity_eta` in queue order. Each pool remembers where a start was first possible in a table of
    ``tables`` (the cycle's memo; by default they forget)."""

    def __init__(
        self,
        state: ClusterState,
        now: float,
        free_units: Mapping[str, int],
        expected_end: Callable[[str], float],
        skip: Callable[[str], bool],
        tables: Tables = FORGET,
    ) -> None:
        self.now = now
        self.tables = tables
        self.free_units = free_units
        by_model: dict[str, list[tuple[float, int]]] = {}
        for job_id, slots in sorted(state.placed.items()):
            if skip(job_id):
                continue
            end = expected_end(job_id)
            for replica in slots:
                for slot in replica:
                    gpu = state.gpus[(slot.node, slot.gpu)]
                    units = slot_units(slot, gpu.spec)
                    by_model.setdefault(gpu.node.gpu_model, []).append((end, units))
        self._by_model = by_model
        self._pools: dict[tuple[str, ...], _Profile] = {}

    def capacity_eta(
        self,
        models: tuple[str, ...],
        units: int,
        duration_s: float,
        start_at: float | None = None,
        *,
        claim: bool = True,
    ) -> float | None:
        """Seconds until the next job in queue order on ``models`` could start with ``units`` for
        ``duration_s`` (at ``start_at`` when that is decided); it then holds them for the jobs asked about after
        it (module doc) — unless ``claim`` is False, which only asks (a job its quota may refuse then)."""
        if models not in self._pools:
            free = sum(self.free_units.get(model, 0) for model in models)
            releases = (r for model in models for r in self._by_model.get(model, ()))
            self._pools[models] = _Profile(self.now, free, releases, self.tables)
        at = self._pools[models].start(units, duration_s, start_at, claim=claim)
        return None if at is None else at - self.now
