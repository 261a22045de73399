"""B4's production SLO (protocol step 9 of :mod:`scheduler.sim.bench.cost`): misses as the spec counts them —
"start later than one cycle, avoidable waits only — B2's definition" (spec/benchmarks.md B4) — and, beside them and
never hidden, every late start whatever its cause, each attributed from the run's own record.

The services are the production inference services submitted in the measured window.

- **Miss** (``production_slo_misses``, the target: 0 on every seed): a service whose *avoidable* wait exceeds one
  cycle. The avoidable wait is B2's (:func:`scheduler.sim.metrics.avoidable_wait_s`): one cycle for every cycle
  before its first start at which the replay's oracle (:mod:`scheduler.sim.avoidable`) found a placement for it —
  free capacity or lower-priority work to evict, on nodes present and taking new work, within its team's burst
  limit. A node requested from an autoscaled pool is not in the cluster until it arrives, so a wait for it with no
  other room is not avoidable. One avoidable cycle is the allowance: a service the first cycle after its
  submission leaves pending and the next one starts has waited one cycle that counts (the seconds before the first
  cycle are nobody's choice). **A service that never started** is judged on every cycle it waited until the
  replay's end, as B2 counts a job still waiting: a miss when more than one of those cycles was avoidable,
  otherwise not; it is always a late start. **A rejected service** is left out of the misses, as B2 leaves rejected
  jobs out of its waits (the engine refused it with a reason; there is no wait to judge), and counted among the
  late starts (cause ``rejected``).
- **Late start** (``production_late_starts``, all causes: the figure this table called SLO misses before
  2026-12-05): a service whose first start came more than one cycle after its submission, or never. Each gets one
  cause (``production_late_starts_by_cause``), from the verdicts of its judged cycles before its first start and
  the autoscaler's request log — recorded, not guessed:

  - ``avoidable``: a miss (above);
  - otherwise the cause of most of its unavoidable cycles (ties in this order): ``held`` — no room even with every
    lower-priority job evicted (production holds the capacity, or the nodes take no new work) and no node request
    for it in flight; ``burst`` — room only above its team's burst limit; ``arrival`` — no room while a node
    request made for it was in flight and then delivered its nodes (or was still on its way at the replay's end);
    ``stockout`` — no room while a request made for it was in flight that then stocked out, or after it failed
    with no newer request;
  - ``one avoidable cycle``: no unavoidable cycle, and at most one avoidable one (within the allowance);
  - ``rejected``; ``unjudged``: no verdict recorded (a replay records one for every cycle from the window's start
    on that leaves production pending, so a late start always has one; kept for inputs that lack them).

  ``production_late_wait_s_by_cause`` adds up the late starts' judged seconds (one cycle per verdict) by the same
  per-cycle causes.

Pure, no Django.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from scheduler.core.model.snapshot import Job
from scheduler.core.model.vocabulary import JobKind, Priority
from scheduler.sim.autoscaler import FAILED, RequestLog
from scheduler.sim.avoidable import AVOIDABLE, BURST, HELD, Verdict
from scheduler.sim.metrics import avoidable_wait_s
from scheduler.sim.records import CycleLog
from scheduler.sim.report import ReplayResult

ARRIVAL = "arrival"
STOCKOUT = "stockout"
ONE_AVOIDABLE_CYCLE = "one avoidable cycle"
REJECTED = "rejected"
UNJUDGED = "unjudged"
# The causes of a wait that is not avoidable, in the order that breaks a tie (module doc).
UNAVOIDABLE = (HELD, BURST, ARRIVAL, STOCKOUT)
LATE_CAUSES = (AVOIDABLE, *UNAVOIDABLE, ONE_AVOIDABLE_CYCLE, REJECTED, UNJUDGED)
EPSILON_S = 1e-9


@dataclass(frozen=True)
class ProductionSlo:
    """One run's production SLO figures over the window (module doc)."""

    services: int
    misses: int
    late_starts: int
    late_by_cause: dict[str, int]  # every cause of LATE_CAUSES, 0 included: a cause absent is shown as none
    late_wait_s_by_cause: dict[str, float]  # per-cycle causes: avoidable and UNAVOIDABLE
    waits_s: tuple[float, ...]  # first start − submission per service; one that never started: to the replay's end


def production_slo(
    result: ReplayResult,
    jobs: Iterable[Job],
    window: tuple[float, float],
    cycle_s: float,
    cycles: CycleLog,
    requests: Iterable[RequestLog] = (),
) -> ProductionSlo:
    """The figures of the production inference services of ``jobs`` submitted in ``window`` (module doc);
    ``cycles``: the replay's record with its verdicts; ``requests``: the autoscaler's node requests (run D)."""
    first_start: dict[str, float] = {}
    for run in result.runs:
        first_start[run.job.id] = min(first_start.get(run.job.id, math.inf), run.start)
    rejected = {event["job"] for event in result.events if event["type"] == "rejected"}
    services = [
        job
        for job in jobs
        if job.priority == Priority.PRODUCTION
        and job.kind == JobKind.INFERENCE
        and window[0] <= job.submitted_at < window[1]
    ]
    judged = [job.id for job in services if job.id not in rejected]
    avoidable, _ = avoidable_wait_s(judged, first_start, cycles, cycle_s)
    per_cycle = _cycle_causes(set(judged), first_start, cycles, _requests_by_job(requests))
    late: Counter[str] = Counter()
    late_wait: dict[str, float] = dict.fromkeys((AVOIDABLE, *UNAVOIDABLE), 0.0)
    misses = 0
    waits = []
    for job in services:
        started = first_start.get(job.id, math.inf)
        waits.append(started - job.submitted_at if math.isfinite(started) else result.end - job.submitted_at)
        miss = job.id not in rejected and avoidable[job.id] > cycle_s + EPSILON_S
        misses += miss
        if started - job.submitted_at <= cycle_s + EPSILON_S:
            continue
        causes = per_cycle.get(job.id, Counter())
        late[_late_cause(job.id in rejected, miss, causes)] += 1
        for cause, count in causes.items():
            late_wait[cause] = late_wait.get(cause, 0.0) + count * cycle_s
    return ProductionSlo(
        services=len(services),
        misses=misses,
        late_starts=sum(late.values()),
        late_by_cause={cause: late[cause] for cause in LATE_CAUSES},
        late_wait_s_by_cause=late_wait,
        waits_s=tuple(waits),
    )


def _late_cause(rejected: bool, miss: bool, causes: Counter[str]) -> str:
    if rejected:
        return REJECTED
    if miss:
        return AVOIDABLE
    if not causes:
        return UNJUDGED
    unavoidable = [cause for cause in UNAVOIDABLE if causes[cause]]
    if not unavoidable:
        return ONE_AVOIDABLE_CYCLE
    return max(unavoidable, key=lambda cause: (causes[cause], -UNAVOIDABLE.index(cause)))


def _requests_by_job(requests: Iterable[RequestLog]) -> dict[str, list[RequestLog]]:
    """Each job's node requests in the order they were made."""
    by_job: dict[str, list[RequestLog]] = {}
    for request in sorted(requests, key=lambda r: r.requested_at):
        by_job.setdefault(request.job, []).append(request)
    return by_job


def _cycle_causes(
    jobs: set[str], first_start: Mapping[str, float], cycles: CycleLog, requests: Mapping[str, Sequence[RequestLog]]
) -> dict[str, Counter[str]]:
    """Per job of ``jobs``, its judged cycles before its first start counted by cause (module doc) — the same
    cycles :func:`~scheduler.sim.metrics.avoidable_wait_s` counts."""
    out: dict[str, Counter[str]] = {}
    for t, verdicts in cycles.verdicts:
        for job, verdict in verdicts:
            if job in jobs and t < first_start.get(job, math.inf):
                out.setdefault(job, Counter())[cycle_cause(verdict, t, requests.get(job, ()))] += 1
    return out


def cycle_cause(verdict: Verdict, t: float, requests: Sequence[RequestLog]) -> str:
    """The cause of one judged cycle at ``t``: the oracle's verdict, a ``held`` one split by the job's node
    requests (``requests``: the job's, in the order made). A request is in flight from the cycle that made it
    (the replay records verdicts after the plan's provisions) until it ends: nodes that arrive at ``t`` join
    before the cycle, so they are in the cluster the verdict judged."""
    if verdict.cause != HELD:
        return verdict.cause
    latest = None
    for request in requests:
        if request.requested_at > t:
            break
        latest = request
    if latest is None:
        return HELD
    in_flight = latest.ended_at is None or t < latest.ended_at
    if latest.outcome == FAILED:
        return STOCKOUT  # on its way to a stockout, or failed with nothing asked since
    return ARRIVAL if in_flight else HELD
