"""The scheduling loop's metrics: its phases' durations, its decisions, preemptions, MIG reconfigurations, spot notices,
the error of its start estimates, and when it last ran through.

Totals the loop keeps itself come from its ``CycleStats`` row (:mod:`scheduler.loop.stats`); preemptions are the
``preempted`` job events, which are never deleted, counted by their reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from django.conf import settings
from django.db.models import Count
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from jobs.models import JobEvent
from portal.metrics.histogram import histogram_buckets
from scheduler.bridge.cycle_stats import DECISION_KINDS, ETA_ERROR_BUCKETS, MIG_OUTCOMES, PHASE_BUCKETS_S, PHASES
from scheduler.core.model.vocabulary import EventType, EvictionReason
from scheduler.models import CycleStats

# A reason outside the vocabulary (a row written by hand) is counted under this one, so labels stay bounded.
OTHER_REASON = "other"


def loop_metrics(now: datetime, stats: CycleStats | None) -> Iterator[Metric]:
    yield from _cycles(stats)
    yield _preemptions()
    yield from _mig(now, stats)
    spot = CounterMetricFamily(
        "microcosm_spot_interruptions", "Interruption notices (spot interruptions, maintenance) the loop has seen."
    )
    spot.add_metric([], float(stats.spot_interruptions if stats else 0))
    yield spot
    yield _eta_errors(stats)


def _eta_errors(stats: CycleStats | None) -> Metric:
    family = HistogramMetricFamily(
        "microcosm_eta_error_ratio",
        "Error of the start estimate a job was shown a quarter into its wait: |estimate - start| / wait.",
    )
    histogram = (stats.eta_errors if stats else {}) or {}
    cumulative = histogram.get("buckets") or [0] * len(ETA_ERROR_BUCKETS)
    if len(cumulative) != len(ETA_ERROR_BUCKETS):
        cumulative = [0] * len(ETA_ERROR_BUCKETS)
    family.add_metric(
        [],
        histogram_buckets(ETA_ERROR_BUCKETS, cumulative, int(histogram.get("count", 0))),
        float(histogram.get("sum", 0.0)),
    )
    return family


def _cycles(stats: CycleStats | None) -> Iterator[Metric]:
    durations = HistogramMetricFamily(
        "microcosm_cycle_duration_seconds", "How long each phase of a scheduling cycle took.", labels=["phase"]
    )
    phases = stats.phases if stats else {}
    for phase in PHASES:
        histogram = phases.get(phase) or {}
        cumulative = histogram.get("buckets") or [0] * len(PHASE_BUCKETS_S)
        if len(cumulative) != len(PHASE_BUCKETS_S):  # stored under other bounds: the next cycle starts them again
            cumulative = [0] * len(PHASE_BUCKETS_S)
        count = int(histogram.get("count", 0))
        durations.add_metric(
            [phase], histogram_buckets(PHASE_BUCKETS_S, cumulative, count), float(histogram.get("sum", 0.0))
        )
    yield durations

    decisions = CounterMetricFamily(
        "microcosm_cycle_decisions", "Decisions the scheduling cycles recorded, by kind.", labels=["kind"]
    )
    made = stats.decisions if stats else {}
    for kind in DECISION_KINDS.values():
        decisions.add_metric([kind], float(made.get(kind, 0)))
    yield decisions

    last = GaugeMetricFamily(
        "microcosm_cycle_last_success_timestamp_seconds",
        "When the last scheduling cycle that ran through ended (Unix time; absent before the first).",
    )
    if stats is not None and stats.last_success_at is not None:
        last.add_metric([], stats.last_success_at.timestamp())
    yield last

    interval = GaugeMetricFamily(
        "microcosm_cycle_interval_seconds", "The configured period of the scheduling cycle (SCHEDULER_CYCLE_S)."
    )
    interval.add_metric([], float(settings.SCHEDULER["cycle_s"]))
    yield interval


def _preemptions() -> Metric:
    family = CounterMetricFamily(
        "microcosm_preemptions", "Running jobs stopped and requeued, by reason.", labels=["reason"]
    )
    known = {reason.value for reason in EvictionReason}
    counts = dict.fromkeys(sorted(known - {EvictionReason.COMPLETED, EvictionReason.FAILED}), 0)
    rows = JobEvent.objects.filter(type=EventType.PREEMPTED).values_list("details__reason").annotate(n=Count("pk"))
    for reason, n in rows.order_by():
        label = reason if isinstance(reason, str) and reason in known else OTHER_REASON
        counts[label] = counts.get(label, 0) + n
    for reason, n in counts.items():
        family.add_metric([reason], float(n))
    return family


def _mig(now: datetime, stats: CycleStats | None) -> Iterator[Metric]:
    outcomes = CounterMetricFamily(
        "microcosm_mig_reconfigurations", "MIG reconfigurations the loop saw end, by outcome.", labels=["outcome"]
    )
    seen = stats.mig_outcomes if stats else {}
    for outcome in MIG_OUTCOMES:
        outcomes.add_metric([outcome], float(seen.get(outcome, 0)))
    yield outcomes

    in_flight = (stats.mig_in_flight if stats else {}) or {}
    count = GaugeMetricFamily("microcosm_mig_reconfigurations_in_flight", "Nodes with a MIG reconfiguration in flight.")
    count.add_metric([], float(len(in_flight)))
    yield count
    oldest = GaugeMetricFamily(
        "microcosm_mig_reconfiguration_oldest_seconds",
        "How long the oldest MIG reconfiguration in flight has been in its state (0: none in flight).",
    )
    since = [float(entry["since"]) for entry in in_flight.values() if isinstance(entry, dict) and "since" in entry]
    oldest.add_metric([], max(0.0, now.timestamp() - min(since)) if since else 0.0)
    yield oldest
