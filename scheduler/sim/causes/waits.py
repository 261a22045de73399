"""Production inference waits split by what blocked them, cycle by cycle.

For every production inference job, its **wait** is its total pending time inside the window: from its
submission to its first start, and again from each eviction to the next start (or to the end of the replay,
or its rejection), clipped to the window. Each cycle of the window whose plan left it pending holds it until
the next cycle (:func:`scheduler.sim.idle_pending.held_s`, the same spans the idle-while-pending metric uses);
that span of its wait is labelled with the blocker kind that cycle's plan gave it
(:meth:`~scheduler.sim.causes.log.CauseLog.kind`). What no cycle covers — from a submission, or an eviction
between cycles, to the next cycle — is ``(between cycles)``. So the labelled seconds of a job sum to its wait.

Only jobs that waited more than :data:`WAIT_THRESHOLD_S` count (a wait of one or two cycles is the cycle's
own granularity). Per run: the seconds per kind summed over those jobs; for the ``capacity`` seconds, the
:class:`~scheduler.sim.causes.room.Room` category of each cycle, and the seconds where (a) room was free and
(b) lower-priority work ran where the job could; and the :data:`LONGEST` longest waits with their sequence of
(kind, cycles) and the engine's last reason text.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scheduler.core.model.snapshot import Job
from scheduler.core.model.vocabulary import BlockerKind
from scheduler.sim.causes.kinds import BETWEEN_CYCLES
from scheduler.sim.causes.log import CauseLog, production_inference
from scheduler.sim.records import CycleSample, RunLog

WAIT_THRESHOLD_S = 30.0
LONGEST = 5
NOT_ANALYSED = "(not analysed)"  # a capacity-blocked cycle whose plan could not be applied (the run failed there)

Interval = tuple[float, float]


@dataclass(frozen=True)
class LongWait:
    job: str
    wait_s: float
    submitted_at: float
    still_waiting: bool  # still pending at the end of the window
    request: str
    sequence: tuple[tuple[str, int], ...]  # (kind, consecutive cycles), in time order
    last_reason: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "wait_s": round(self.wait_s, 3),
            "submitted_at": self.submitted_at,
            "still_waiting": self.still_waiting,
            "request": self.request,
            "sequence": [[kind, cycles] for kind, cycles in self.sequence],
            "last_reason": self.last_reason,
        }


@dataclass
class ProductionWaits:
    """One run's production inference waits over the threshold (module doc); seconds summed over the jobs."""

    jobs: int = 0
    wait_s: float = 0.0
    by_kind: dict[str, float] = field(default_factory=dict)
    capacity: dict[str, float] = field(default_factory=dict)  # Room.category (or NOT_ANALYSED) → seconds
    room_s: float = 0.0  # capacity seconds with (a) room free, on any tier
    lower_s: float = 0.0  # capacity seconds with (b) lower-priority work where the job could run
    lower_preemptible_s: float = 0.0  # … some of it preemptible
    lower_bound_now_s: float = 0.0  # … some of it bound by that very cycle
    longest: list[LongWait] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "jobs": self.jobs,
            "wait_s": round(self.wait_s, 3),
            "by_kind_s": {kind: round(s, 3) for kind, s in self.by_kind.items()},
            "capacity_s": {category: round(s, 3) for category, s in self.capacity.items()},
            "capacity_room_free_s": round(self.room_s, 3),
            "capacity_lower_priority_s": round(self.lower_s, 3),
            "capacity_lower_priority_preemptible_s": round(self.lower_preemptible_s, 3),
            "capacity_lower_bound_this_cycle_s": round(self.lower_bound_now_s, 3),
            "longest": [wait.as_dict() for wait in self.longest],
        }


def pending_intervals(job: Job, runs: Iterable[RunLog], end: float, rejected_at: float | None = None) -> list[Interval]:
    """When ``job`` was pending: submission → first start, each eviction → next start, the last → ``end``
    (or its rejection); ``runs``: its runs."""
    intervals: list[Interval] = []
    since: float | None = job.submitted_at
    for run in sorted(runs, key=lambda r: r.start):
        if since is not None and run.start > since:
            intervals.append((since, run.start))
        since = run.end if run.outcome == "evicted" else None
    if since is not None:
        until = end if rejected_at is None else min(end, rejected_at)
        if until > since:
            intervals.append((since, until))
    return intervals


def clip(intervals: Iterable[Interval], window: Interval) -> list[Interval]:
    return [(max(a, window[0]), min(b, window[1])) for a, b in intervals if min(b, window[1]) > max(a, window[0])]


def overlap(span: Interval, intervals: Sequence[Interval]) -> float:
    return sum(max(0.0, min(span[1], b) - max(span[0], a)) for a, b in intervals)


def request_text(job: Job) -> str:
    """``"13B int8 ctx 4096 batch 2 × 2 replicas"``-style, for the longest waits."""
    request = job.request
    if request.model is not None:
        model = request.model
        what = f"{model.params_b:g}B {model.dtype} ctx {model.context} batch {model.batch}"
    elif request.memory_gib is not None:
        what = f"{request.memory_gib:g} GiB"
    elif request.gpus is not None:
        what = f"{request.gpus} GPUs"
    else:
        what = request.mig_profile or f"{request.gpu_milli} milli-GPU"
    return what if job.replicas == 1 else f"{what} × {job.replicas} replicas"


def production_waits(
    jobs: Iterable[Job],
    runs: Iterable[RunLog],
    end: float,
    rejected: Mapping[str, float],
    samples: Sequence[CycleSample],
    held: Sequence[float],
    log: CauseLog,
    window: Interval,
) -> ProductionWaits:
    """The production waits of one run (module doc). ``end``: the replay's end; ``rejected``: job → when;
    ``samples`` and ``held``: the replay's cycle samples in the window and how long each holds in it."""
    wanted = {job.id: job for job in jobs if production_inference(job)}
    runs_of: dict[str, list[RunLog]] = defaultdict(list)
    for run in runs:
        if run.job.id in wanted:
            runs_of[run.job.id].append(run)
    pending = {
        job_id: clip(pending_intervals(job, runs_of[job_id], end, rejected.get(job_id)), window)
        for job_id, job in wanted.items()
    }
    by_job: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    capacity: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    flags: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    sequences: dict[str, list[list[Any]]] = defaultdict(list)
    for sample, hold in zip(samples, held, strict=True):
        if hold <= 0:
            continue
        start = max(sample.t, window[0])
        span = (start, start + hold)
        for job in sample.pending:
            if job.id not in wanted:
                continue
            seconds = overlap(span, pending[job.id])
            kind = log.kind(sample.t, job.id)
            by_job[job.id][kind] += seconds
            steps = sequences[job.id]
            if steps and steps[-1][0] == kind:
                steps[-1][1] += 1
            else:
                steps.append([kind, 1])
            if kind == BlockerKind.CAPACITY:
                room = log.rooms.get((sample.t, job.id))
                capacity[job.id][room.category if room else NOT_ANALYSED] += seconds
                if room is not None:
                    job_flags = flags[job.id]
                    job_flags[0] += seconds if room.room is not None else 0.0
                    job_flags[1] += seconds if room.lower is not None else 0.0
                    job_flags[2] += seconds if room.lower_preemptible else 0.0
                    job_flags[3] += seconds if room.lower_bound_now else 0.0
    out = ProductionWaits()
    long_waits: list[LongWait] = []
    for job_id, job in wanted.items():
        wait = sum(b - a for a, b in pending[job_id])
        if wait <= WAIT_THRESHOLD_S:
            continue
        kinds = by_job[job_id]
        covered = sum(kinds.values())
        if covered > wait + 1e-6:  # the spans of distinct cycles never overlap: a bug, not a measurement
            raise RuntimeError(f"{job_id}: cycles cover {covered} s of a {wait} s wait")
        if wait - covered > 1e-9:
            kinds[BETWEEN_CYCLES] += wait - covered
        out.jobs += 1
        out.wait_s += wait
        for kind, seconds in kinds.items():
            out.by_kind[kind] = out.by_kind.get(kind, 0.0) + seconds
        for category, seconds in capacity[job_id].items():
            out.capacity[category] = out.capacity.get(category, 0.0) + seconds
        room_s, lower_s, preemptible_s, bound_s = flags[job_id]
        out.room_s += room_s
        out.lower_s += lower_s
        out.lower_preemptible_s += preemptible_s
        out.lower_bound_now_s += bound_s
        long_waits.append(
            LongWait(
                job=job_id,
                wait_s=wait,
                submitted_at=job.submitted_at,
                still_waiting=_pending_at_end(pending[job_id], window),
                request=request_text(job),
                sequence=tuple((kind, cycles) for kind, cycles in sequences[job_id]),
                last_reason=log.reasons.get(job_id, (0.0, ""))[1],
            )
        )
    long_waits.sort(key=lambda wait: (-wait.wait_s, wait.job))
    out.longest = long_waits[:LONGEST]
    return out


def _pending_at_end(intervals: Sequence[Interval], window: Interval) -> bool:
    return bool(intervals) and intervals[-1][1] >= window[1]
