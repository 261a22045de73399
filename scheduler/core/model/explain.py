"""Why a pending job waits, in words a person understands, and when it may start.

A reason has three parts joined by "; ": what the job waits for and what blocks it, the team's standing
against its guarantee, and how many jobs are ahead of it in the global order —
"waiting for 4 H100 GPUs; team above its guarantee; 3 jobs ahead".

ETA (``eta_s``, seconds from now) is an estimate from the expected ends of the placed work (run-time
estimates as :mod:`scheduler.core.decisions.reservation` makes them: ``duration_s``, else the team's history, else the
policy's default), in units of 1/7000 GPU:

- holding a reservation: the reservation's start (the reservation plan);
- blocked by free capacity: a replay per pool — the GPU models the job may use and the shape it asks (whole
  GPUs, one MIG profile, or shares) — as a backfilling scheduler runs it. The pool's free units over time start
  at what that shape can use now and rise as the placed work is expected to end, GPU by GPU (:func:`supply`):
  a whole GPU once everything on it has ended, a MIG instance of the job's profile when its holder ends, and the
  rest of a GPU the job cannot use as it is laid out (another MIG layout, or MIG off for a sliced profile) once
  the GPU is empty and a reconfiguration has changed it — planned a cycle later at the soonest, and taking the
  policy's ``mig_reconfigure_s``. The capacity-blocked and reserved jobs take their turn in queue order, each at
  the earliest time its units are free for its whole expected run time — before a job ahead of it when it fits
  in a hole that job leaves, as backfill lets it — and holds them for the jobs behind it (a reserved job claims
  them at its reservation's start). A job blocked by capacity this cycle starts no sooner than the pool's next
  change: the cycle has just found that what is free now does not take it (its gang does not fit on the nodes
  the free GPUs are on, say). Only the first :data:`PROFILE_DEPTH` jobs on the same GPU models get a time,
  whatever their shapes;
- blocked by its team's quota: no time — whether the team's work ends, or is evicted, or the limit is
  raised is not a matter of expected ends; the reason says what would unblock it (fair share's refusal).
  That includes a job blocked by free capacity whose quota — guarantee or burst limit — refuses it now and
  would still refuse it at the replay's start, once the team's own work expected to end by then has ended:
  it waits for the quota (its reason, no time), as a reservation's job does (:mod:`reservation`, rule 1),
  and it claims nothing in the replay, so the jobs behind it are not held back by a start that cannot come;
- waiting for a MIG reconfiguration (under way, or held for next cycle): when the change is expected to finish;
- None when it cannot be told: even all of the pool's work ending would not make room, or the job is deeper
  in its pool's queue than the depth.

Placement across nodes (a gang's replicas each on one node, topology) is ignored, and pools of different shapes
do not take from each other, so the estimate stays optimistic by design.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import final

from scheduler.core.gpus.catalog import COMPUTE_SLICES, GPU_MODEL_BY_NAME
from scheduler.core.gpus.units import FULL_GPU_MILLI, UNITS_PER_GPU, UNITS_PER_MILLI, UNITS_PER_SLICE
from scheduler.core.model.cluster_state import ClusterState, Gpu, gpu_class_of
from scheduler.core.model.demand import Demand, DemandKind
from scheduler.core.model.snapshot import Job
from scheduler.core.model.tables import FORGET, Tables
from scheduler.core.model.vocabulary import BlockerKind

# The jobs on the same GPU models get a time for this many in queue order, whatever shapes they ask; those behind get
# none (a profile grows with each job, and a start hours behind hundreds of others is no estimate a person can use).
PROFILE_DEPTH = 100


@final
@dataclass(frozen=True, slots=True)
class Blocker:
    """What stopped a job this cycle: ``kind`` says what; ``detail`` is the admission's reason (quota), the
    node being reconfigured, or for capacity why no eviction was searched for; ``ready_at`` when a
    reconfiguration ends."""

    kind: BlockerKind
    detail: str = ""
    ready_at: float | None = None

    def __init__(self, kind: BlockerKind, detail: str = "", ready_at: float | None = None) -> None:
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "detail", detail)
        object.__setattr__(self, "ready_at", ready_at)

    def __eq__(self, other: object) -> bool:
        if type(other) is not Blocker:  # final: the generated method's check, other.__class__ is self.__class__
            return NotImplemented
        return (self.kind, self.detail, self.ready_at) == (other.kind, other.detail, other.ready_at)

    def __hash__(self) -> int:
        return hash((self.kind, self.detail, self.ready_at))


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
    whole = max(0, round(seconds))  # a new name: mypyc keeps a float parameter a float (no int rebinding)
    if whole < 60:
        return f"{whole} s"
    minutes = round(whole / 60)
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
    return f"{reason_head(need, blocker, standing, now)}; {ahead_text(ahead)}"


def reason_head(need: str, blocker: Blocker, standing: str, now: float) -> str:
    """The reason up to how many jobs are ahead (:func:`reason_text` adds that): what the job waits for, what blocks
    it and the team's standing."""
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
    elif blocker.detail:  # capacity, and why no eviction was looked for (rules/search_bound.py)
        head = f"waiting for {need}; {blocker.detail}"
    else:
        head = f"waiting for {need}"
    return f"{head}; {standing}"


class _Profile:
    """One pool's free units over time, from now on: a step function (``frees[i]`` units free from
    ``times[i]`` to the next breakpoint, the last for ever), lowered by each job given a start on it."""

    def __init__(self, now: float, releases: Iterable[tuple[float, int]], tables: Tables) -> None:
        times, frees = [now], [0]
        for at, units in sorted(releases):
            if at <= times[-1]:
                frees[-1] += units
            else:
                times.append(at)
                frees.append(frees[-1] + units)
        self.times, self.frees = times, frees
        self.peak = frees[-1]  # what is free once all of it has ended: every claim ends, so it stays
        # (units, whether now is ruled out) → the first time a start could come
        self._floor: dict[tuple[int, bool], float] = tables.table()

    def start(
        self, units: int, duration_s: float, at: float | None = None, *, claim: bool = True, later: bool = False
    ) -> float | None:
        """The earliest time ``units`` are free for ``duration_s`` — after now when ``later`` (the job could not
        start now), or ``at``, a start already decided (a reservation's) — and they are then taken (unless
        ``claim`` is False: the question is only asked); None when the pool never has that many."""
        if units > self.peak:
            return None
        times, frees = self.times, self.frees
        if at is not None:
            self._hold(self._breakpoint(max(at, times[0])), at + duration_s, units)
            return at
        # Speed, never a different answer: claims only lower the profile, so where ``units`` were first free at
        # an earlier question they are first free now at the earliest; the scan starts there.
        floor = self._floor.get((units, later), times[0])
        i = max(bisect_left(times, floor), 1 if later else 0)
        if i == len(times):  # now is ruled out and nothing frees after it: no start to tell
            return None
        while frees[i] < units:  # ends: the last breakpoint holds the peak (every claim ends before it)
            i += 1
        self._floor[(units, later)] = times[i]
        while True:
            if frees[i] < units:
                i += 1
                continue
            end = times[i] + duration_s
            last = bisect_left(times, end, i + 1)  # the breakpoints within the run: i + 1 up to last (times rise)
            if last > i + 1 and min(frees[i + 1 : last]) < units:
                j = i + 1
                while frees[j] >= units:
                    j += 1
                i = j + 1  # too little free at times[j]: start after it
                continue
            if claim:
                self._hold(i, end, units)
            return times[i]

    def _breakpoint(self, at: float) -> int:
        """The index of a breakpoint at ``at`` (≥ now), made if there is none."""
        times, frees = self.times, self.frees
        index = bisect_left(times, at)
        if index == len(times) or times[index] != at:
            times.insert(index, at)
            frees.insert(index, frees[index - 1])
            # A new breakpoint is a new time a start may come (a claim ending there), so no question's floor
            # may stay above it: the floors hold only because claims lower the free units of the old ones.
            floors = self._floor
            for key, floor in floors.items():
                if floor > at:
                    floors[key] = at
        return index

    def _hold(self, first: int, end: float, units: int) -> None:
        last = self._breakpoint(end)
        frees = self.frees
        for k in range(first, last):
            frees[k] -= units


WHOLE = "whole"  # the shape of a demand for whole GPUs
SHARE = "share"  # the shape of a demand for a share of a time-sliced GPU


def demand_shape(demand: Demand) -> str:
    """The shape a pool of the replay is kept for: :data:`WHOLE`, :data:`SHARE`, or the MIG profile's name."""
    if demand.kind == DemandKind.WHOLE:
        return WHOLE
    if demand.kind == DemandKind.MIG:
        return demand.mig_profile or ""
    return SHARE


def supply(
    gpu: Gpu,
    shape: str,
    ready_at: float,
    holders: Mapping[str, float],
    changed: Callable[[float], float],
) -> list[tuple[float, int]]:
    """When ``gpu``'s capacity becomes usable by a demand of ``shape`` (module doc), as (time, units): its node
    takes work from ``ready_at``; ``holders`` maps the jobs on it to their expected ends; ``changed(t)`` is when
    a reconfiguration of a GPU empty from ``t`` would be done.

    Only the rest of a GPU waits for a reconfiguration: the MIG instances of the job's own profile are its to use
    as they free, and a profile that takes every compute slice runs on a GPU with MIG off as well (§4 of
    docs/scheduling-rules.md)."""
    empty = max([ready_at, *holders.values()])
    if shape == SHARE:  # a share takes what other shares leave of a GPU with MIG off, and each share that ends
        if gpu.layout or (gpu.whole is not None and gpu.whole in holders):
            return [(changed(empty) if gpu.layout else empty, UNITS_PER_GPU)]
        shares = [(holders[job], milli * UNITS_PER_MILLI) for job, milli in gpu.shares.items() if job in holders]
        return [(ready_at, UNITS_PER_GPU - sum(units for _, units in shares)), *shares]
    if shape == WHOLE:
        return [(changed(empty) if gpu.layout else empty, UNITS_PER_GPU)]
    profile = gpu.spec.profiles().get(shape) if gpu.spec is not None else None
    if not gpu.layout:
        whole_gpu = profile is not None and profile.compute_slices == COMPUTE_SLICES
        return [(empty if whole_gpu else changed(empty), UNITS_PER_GPU)]
    releases: list[tuple[float, int]] = []
    kept = 0
    if profile is not None:
        units = profile.compute_slices * UNITS_PER_SLICE
        for name, start in gpu.layout:
            if name == shape:
                holder = gpu.instances.get(start)
                releases.append((ready_at if holder is None or holder not in holders else holders[holder], units))
                kept += units
    if kept < UNITS_PER_GPU:
        releases.append((changed(empty), UNITS_PER_GPU - kept))
    return releases


class EtaEstimator:
    """ETAs from the expected ends of the work placed in ``state`` (module doc).

    ``ready_at`` maps each node that takes new work now or later to when it does (absent: never, a cordoned
    node); ``expected_end(job_id)`` is when a placed job is expected to end
    (:mod:`scheduler.core.decisions.reservation`, rule 5); ``skip`` names placed jobs that hold nothing for the
    estimate (reservation holds: their GPUs count free, for their reserving jobs take them in queue order).
    ``reconfigure_s`` is how long a MIG reconfiguration takes and ``cycle_s`` the time to the next cycle, the
    soonest one may be planned. Ask :meth:`capacity_eta` in queue order. Each pool remembers where a start was
    first possible in a table of ``tables`` (the cycle's memo; by default they forget)."""

    def __init__(
        self,
        state: ClusterState,
        now: float,
        ready_at: Mapping[str, float],
        expected_end: Callable[[str], float],
        skip: Callable[[str], bool],
        reconfigure_s: float,
        cycle_s: float,
        tables: Tables = FORGET,
    ) -> None:
        self.now = now
        self.tables = tables
        self.ready_at = ready_at
        self.expected_end = expected_end
        self.skip = skip
        self.reconfigure_s = reconfigure_s
        self.soonest_change = now + cycle_s
        self._ends: dict[str, float] = {}
        self._by_model: dict[str, list[Gpu]] = {}
        for gpu in state.gpus.values():
            if gpu.node.name in ready_at:
                self._by_model.setdefault(gpu.node.gpu_model, []).append(gpu)
        self._holders_of: dict[str, list[dict[str, float]]] = {}  # per model, each GPU's holders and their ends
        self._model_releases: dict[tuple[str, str], list[tuple[float, int]]] = {}
        self._pools: dict[tuple[tuple[str, ...], str], _Profile] = {}
        self._answered: dict[tuple[str, ...], int] = {}  # jobs given a time, per GPU models (PROFILE_DEPTH)

    def exhausted(self, models: tuple[str, ...]) -> bool:
        """Has every time this estimator gives on ``models`` been given (:data:`PROFILE_DEPTH`)? Then
        :meth:`capacity_eta` on them answers None from now on, whatever is asked before."""
        return self._answered.get(models, 0) >= PROFILE_DEPTH

    def _changed(self, empty: float) -> float:
        return max(empty, self.soonest_change) + self.reconfigure_s

    def _holders(self, gpu: Gpu) -> dict[str, float]:
        ends = self._ends
        holders: dict[str, float] = {}
        for job_id in gpu.holders():
            if self.skip(job_id):
                continue
            if job_id not in ends:
                ends[job_id] = self.expected_end(job_id)
            holders[job_id] = ends[job_id]
        return holders

    def _releases(self, model: str, shape: str) -> list[tuple[float, int]]:
        """What the GPUs of ``model`` offer a demand of ``shape`` over time; a pool is the union of its models'."""
        key = (model, shape)
        if key not in self._model_releases:
            gpus = self._by_model.get(model, ())
            if model not in self._holders_of:
                self._holders_of[model] = [self._holders(gpu) for gpu in gpus]
            ready_at = self.ready_at
            self._model_releases[key] = [
                release
                for gpu, holders in zip(gpus, self._holders_of[model], strict=True)
                for release in supply(gpu, shape, ready_at[gpu.node.name], holders, self._changed)
            ]
        return self._model_releases[key]

    def _pool(self, models: tuple[str, ...], shape: str) -> _Profile:
        key = (models, shape)
        if key not in self._pools:
            releases = [release for model in models for release in self._releases(model, shape)]
            self._pools[key] = _Profile(self.now, releases, self.tables)
        return self._pools[key]

    def capacity_eta(
        self,
        models: tuple[str, ...],
        shape: str,
        units: int,
        duration_s: float,
        start_at: float | None = None,
        *,
        claim: bool = True,
        later: bool = False,
    ) -> float | None:
        """Seconds until the next job in queue order on ``models`` asking ``shape`` could start with ``units`` for
        ``duration_s`` (at ``start_at`` when that is decided; after now when ``later``: it could not start now);
        it then holds them for the jobs asked about after it (module doc) — unless ``claim`` is False, which
        only asks (a job its quota may refuse then)."""
        if self._answered.get(models, 0) >= PROFILE_DEPTH:
            return None
        at = self._pool(models, shape).start(units, duration_s, start_at, claim=claim, later=later)
        if at is None:
            return None
        if claim:
            self._answered[models] = self._answered.get(models, 0) + 1
        return at - self.now
