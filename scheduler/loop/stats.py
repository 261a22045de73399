"""The loop's own record of each cycle: how long its phases took, what it decided, what it saw the cluster do.

A cycle ends by adding to :class:`~scheduler.models.CycleStats` (one row, locked for the update; cycles are
single-flight anyway) what ``/metrics`` cannot read from other rows:

- the duration of each phase (:data:`~scheduler.bridge.cycle_stats.PHASES`) as a cumulative histogram over
  :data:`~scheduler.bridge.cycle_stats.PHASE_BUCKETS_S`;
- the decisions it recorded, per kind (:data:`~scheduler.bridge.cycle_stats.DECISION_KINDS`);
- MIG reconfigurations in flight as observed, and those seen to end (``success``, or ``failed`` when the GPU Operator
  reports it): a change that starts and ends between two observations is not seen;
- interruption notices, each counted once (a node's notice is the same notice while its time is unchanged);
- the end of the last cycle that ran through (the loop-stalled alert's clock);
- the error of the start estimates, as the B2 benchmark's ``eta_error`` (:mod:`scheduler.sim.eta_error`): every
  pending job's estimates are kept as they change (:class:`~scheduler.models.EtaHistory`); when a job that waited
  longer than a cycle first starts, the estimate it was shown a quarter into its wait W gives
  |estimate − start| / W (0: exact, 1: off by its whole wait). A job shown no estimate then is left out.

Cycles that fail on the way (the cluster unreachable, a newer cycle's fence) add nothing: their absence is what
the last-success time shows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Min, Q

from jobs.models import Job
from scheduler.bridge.cycle_stats import (
    DECISION_KINDS,
    ETA_ERROR_BUCKETS,
    MIG_OUTCOMES,
    PHASE_BUCKETS_S,
    PHASES,
    STATS_NAME,
)
from scheduler.core.model.vocabulary import EventType, JobState
from scheduler.gateways.protocol import MigConfigState, Observation
from scheduler.kept_rows import KeptRows
from scheduler.loop.eta_history import Changes, histories_create, histories_delete, histories_locked, histories_write
from scheduler.models import CycleStats


def histogram_add(histogram: Mapping[str, Any], value: float, bounds: Sequence[float]) -> dict[str, Any]:
    """``histogram`` (``{"count", "sum", "buckets"}``, cumulative counts per bound) with ``value`` observed.

    Counts kept for other bounds than ``bounds`` (the buckets were changed) start again from zero, which
    Prometheus reads as a counter reset."""
    buckets = list(histogram.get("buckets") or [])
    if len(buckets) != len(bounds):
        histogram, buckets = {}, [0] * len(bounds)
    return {
        "count": int(histogram.get("count", 0)) + 1,
        "sum": float(histogram.get("sum", 0.0)) + value,
        "buckets": [count + (value <= bound) for count, bound in zip(buckets, bounds, strict=True)],
    }


def cycle_stats_record(
    *, observation: Observation, phases_s: Mapping[str, float], decisions: Mapping[str, Any], at: datetime
) -> CycleStats:
    """Add one cycle that ran through to the totals (module doc); ``at``: when it ended."""
    with transaction.atomic():
        stats, _ = CycleStats.objects.select_for_update().get_or_create(name=STATS_NAME)
        stats.cycles += 1
        stats.last_success_at = at
        stats.phases = {
            phase: histogram_add(stats.phases.get(phase, {}), seconds, PHASE_BUCKETS_S)
            for phase, seconds in ((p, phases_s.get(p, 0.0)) for p in PHASES)
        }
        counted = dict(stats.decisions)
        for key, kind in DECISION_KINDS.items():
            made = decisions.get(key)
            counted[kind] = int(counted.get(kind, 0)) + (len(made) if isinstance(made, list) else 0)
        stats.decisions = counted
        stats.mig_in_flight, stats.mig_outcomes = _mig(observation, stats.mig_in_flight, stats.mig_outcomes)
        stats.notices, seen = _notices(observation, stats.notices)
        stats.spot_interruptions += seen
        for error in _eta_errors(at.timestamp(), float(settings.SCHEDULER["cycle_s"])):
            stats.eta_errors = histogram_add(stats.eta_errors, error, ETA_ERROR_BUCKETS)
        stats.save()
    return stats


def _mig(
    observation: Observation, before: Mapping[str, Any], outcomes: Mapping[str, int]
) -> tuple[dict[str, Any], dict[str, int]]:
    in_flight: dict[str, Any] = {}
    counted = {outcome: int(outcomes.get(outcome, 0)) for outcome in MIG_OUTCOMES}
    for node in observation.nodes:
        status = node.mig_status
        was = before.get(node.name)
        if status.state == MigConfigState.SUCCESS:
            counted["success"] += was is not None
            continue
        if status.state == MigConfigState.FAILED and (was is None or was.get("state") != MigConfigState.FAILED):
            counted["failed"] += 1
        since = status.since if status.since is not None else (was or {}).get("since", observation.observed_at)
        in_flight[node.name] = {"state": str(status.state), "since": since}
    return in_flight, counted


def _notices(observation: Observation, before: Mapping[str, Any]) -> tuple[dict[str, float], int]:
    current = {node.name: node.interruption.noticed_at for node in observation.nodes if node.interruption is not None}
    return current, sum(1 for name, noticed_at in current.items() if before.get(name) != noticed_at)


# Every cycle reads every pending job's estimate, few of them changed: those are not converted again.
_pending_kept = KeptRows(tuple)


def _eta_errors(now: float, cycle_s: float) -> list[float]:
    """Keep every pending job's estimates as they change; return the errors of the jobs that first started since
    (module doc) and forget their estimates. Only the histories whose estimate changed are written
    (:mod:`scheduler.loop.eta_history`)."""
    pending = dict(_pending_kept.read(Job.objects.filter(state=JobState.PENDING).values_list("pk", "eta_at")))
    histories = histories_locked()
    changed: list[tuple[int, Changes]] = []
    created: list[tuple[int, Changes]] = []
    for job_id, eta_at in pending.items():
        eta = eta_at.timestamp() if eta_at is not None else None
        changes = histories.get(job_id)
        if changes is None:
            created.append((job_id, [[now, eta]]))
        elif not changes or changes[-1][1] != eta:
            changed.append((job_id, [*changes, [now, eta]]))  # a new list: the one read may be read again
    histories_create(created)
    histories_write(changed)
    gone = [job_id for job_id in histories if job_id not in pending]
    if not gone:
        return []
    starts = (
        Job.objects.filter(pk__in=gone)
        .annotate(
            binds=Count("events", filter=Q(events__type=EventType.BOUND)),
            first_start=Min("events__at", filter=Q(events__type=EventType.BOUND)),
        )
        .filter(binds=1)  # its first start: a job that ran before waited again after a requeue
        .values_list("pk", "submitted_at", "first_start")
    )
    errors = []
    for job_id, submitted_at, first_start in starts:
        start, wait = first_start.timestamp(), (first_start - submitted_at).total_seconds()
        if wait <= cycle_s:
            continue
        predicted = _shown_at(histories[job_id], submitted_at.timestamp() + wait / 4)
        if predicted is not None:
            errors.append(abs(predicted - start) / wait)
    histories_delete(gone)
    return errors


def _shown_at(changes: Sequence[Sequence[float | None]], t: float) -> float | None:
    """The estimate in effect at ``t``: the last change at or before it (None: none shown yet, or none given)."""
    shown = None
    for at, eta in changes:
        if at is not None and at <= t:
            shown = eta
    return shown
