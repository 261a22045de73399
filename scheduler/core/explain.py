"""Why a pending job waits, in words a person understands, and when it may start.

A reason has three parts joined by "; ": what the job waits for and what blocks it, the team's standing
against its guarantee, and how many jobs are ahead of it in the global order —
"waiting for 4 H100 GPUs; team above its guarantee; 3 jobs ahead".

ETA (``eta_s``, seconds from now) is an estimate from known running work only, in units of 1/7000 GPU:

- blocked by free capacity: a first-come-first-served replay per pool of GPU models (the models the job may
  use). The pool starts with its free units now and the expected ends (``started_at + duration_s``; jobs
  bound this cycle start now) of the work running on it; the capacity-blocked jobs take their turn in queue
  order: each starts as soon as enough units are free — never before the job ahead of it — and, when its
  ``duration_s`` is known, gives its units back when it ends, for the jobs behind it;
- blocked by its team's quota: no time — whether the team's work ends, or is evicted, or the limit is
  raised is not a matter of expected ends; the reason says what would unblock it (fair share's refusal);
- waiting for a MIG layout change (under way, or held for next cycle): when the change is expected to finish;
- None when it cannot be told: the work involved has no ``duration_s``, or even all of it ending would
  not make room (such a job is skipped in the replay: it holds nothing up).

Placement shape (fragmentation, topology) is ignored, so the estimate is optimistic by design.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from scheduler.core.capacity import UNITS_PER_GPU, ClusterState, gpu_class_of, slot_units
from scheduler.core.catalog import GPU_MODEL_BY_NAME
from scheduler.core.demand import Demand, DemandKind
from scheduler.core.state import FULL_GPU_MILLI, Job

CAPACITY = "capacity"
QUOTA = "quota"
RECONFIGURING = "reconfiguring"
HELD = "held"  # production waits for a node held for its layout change next cycle (placement/relayout.py)
NOT_READY = "not-ready"
RESERVED = "reserved"  # GPUs are reserved for it from the running work's expected ends (reservation.py)


@dataclass(frozen=True, slots=True)
class Blocker:
    """What stopped a job this cycle: ``kind`` is one of the constants above; ``detail`` is the admission's
    reason (quota) or the node being reconfigured; ``ready_at`` when a layout change ends."""

    kind: str
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
    if blocker.kind == QUOTA:
        head = f"waiting for {need} within quota: {blocker.detail}"
    elif blocker.kind == RECONFIGURING:
        ready = "" if blocker.ready_at is None else f", ready in {max(0, round(blocker.ready_at - now))} s"
        head = f"waiting for {need}; MIG layout change under way on {blocker.detail}{ready}"
    elif blocker.kind == HELD:
        ready = "" if blocker.ready_at is None else f", ready in about {max(0, round(blocker.ready_at - now))} s"
        head = (
            f"waiting for {need}; {blocker.detail} is held for its MIG layout change next cycle (it took a bind "
            f"in this one){ready}"
        )
    elif blocker.kind == RESERVED:
        start = "" if blocker.ready_at is None else f" in about {duration_text(blocker.ready_at - now)}"
        head = (
            f"waiting for {need}; reserved on {blocker.detail}: expected to start{start}, when the work running "
            "there is expected to end (shorter jobs may use those GPUs until then)"
        )
    elif blocker.kind == NOT_READY:
        head = f"waiting for {need}; no node that could run it is ready (cordoned, draining or reconfiguring)"
    else:
        head = f"waiting for {need}"
    return f"{head}; {standing}; {ahead_text(ahead)}"


class _Replay:
    """One pool's first-come-first-served replay: the time reached, units free then, and future releases."""

    def __init__(self, now: float, free: int, releases: Iterable[tuple[float, int]]) -> None:
        self.time = now
        self.free = free
        self.releases = sorted(releases)  # a heap: sorted lists are heaps
        self.coming = sum(units for _, units in self.releases)

    def start(self, units: int, duration_s: float | None) -> float | None:
        """When a job of ``units`` starts (it is then counted as running), or None if it never can."""
        if self.free + self.coming < units:
            return None
        while self.free < units:
            at, released = heapq.heappop(self.releases)
            self.time = max(self.time, at)
            self.free += released
            self.coming -= released
        self.free -= units
        if duration_s is not None:
            heapq.heappush(self.releases, (self.time + duration_s, units))
            self.coming += units
        return self.time


class EtaEstimator:
    """ETAs from the expected ends of the work placed in ``state`` (module doc).

    ``free_units`` gives the units free now on ready GPUs, per GPU model; ``started_at`` the start of each
    placed job (jobs bound this cycle: ``now``). Ask :meth:`capacity_eta` in queue order."""

    def __init__(
        self, state: ClusterState, now: float, free_units: Mapping[str, int], started_at: Mapping[str, float]
    ) -> None:
        self.now = now
        self.free_units = free_units
        by_model: dict[str, list[tuple[float, int]]] = {}
        for job_id, slots in sorted(state.placed.items()):
            job = state.jobs[job_id]
            if job.duration_s is None or job_id not in started_at:
                continue
            end = max(now, started_at[job_id] + job.duration_s)
            for replica in slots:
                for slot in replica:
                    gpu = state.gpus[(slot.node, slot.gpu)]
                    units = slot_units(slot, gpu.spec)
                    by_model.setdefault(gpu.node.gpu_model, []).append((end, units))
        self._by_model = by_model
        self._pools: dict[tuple[str, ...], _Replay] = {}

    def capacity_eta(self, models: tuple[str, ...], units: int, duration_s: float | None) -> float | None:
        """Seconds until the next job in queue order on ``models`` could start with ``units``; the job then
        counts as started for the jobs asked about after it (module doc)."""
        if models not in self._pools:
            free = sum(self.free_units.get(model, 0) for model in models)
            releases = (r for model in models for r in self._by_model.get(model, ()))
            self._pools[models] = _Replay(self.now, free, releases)
        at = self._pools[models].start(units, duration_s)
        return None if at is None else at - self.now
