"""The queue's metrics: jobs per state, how long started jobs waited, how long the oldest pending job has waited.

A job's wait is from its submission to its first start (its first ``bound`` event), as the B2 benchmark's
``queue_wait_s`` (spec/benchmarks.md); a job requeued after it ran waits again, and the oldest-pending gauge
counts that wait from the requeue.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

from django.db.models import Count, DurationField, ExpressionWrapper, F, Max, Min, OuterRef, Q, Subquery, Sum
from django.db.models.functions import Coalesce
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric

from jobs.models import Job, JobEvent
from portal.metrics.histogram import histogram_buckets
from scheduler.core.model.vocabulary import EventType, JobState

# From one scheduling cycle to a day: production inference should start within a cycle, a large gang may wait hours.
WAIT_BUCKETS_S = (10.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 3 * 3600.0, 6 * 3600.0, 12 * 3600.0, 86400.0)


def queue_metrics(now: datetime) -> Iterator[Metric]:
    yield _jobs()
    yield _waits()
    yield _oldest_pending(now)


def _jobs() -> Metric:
    family = GaugeMetricFamily(
        "microcosm_jobs", "Jobs by team, state, priority and kind.", labels=["team", "state", "priority", "kind"]
    )
    rows = Job.objects.values_list("team__slug", "state", "priority", "kind").annotate(n=Count("pk")).order_by()
    for team, state, priority, kind, n in sorted(rows):
        family.add_metric([team, state, priority, kind], n)
    return family


def _waits() -> Metric:
    family = HistogramMetricFamily(
        "microcosm_job_pending_seconds",
        "Waits of the jobs that started: first start minus submission.",
        labels=["team", "priority"],
    )
    first_start = JobEvent.objects.filter(job=OuterRef("pk"), type=EventType.BOUND).order_by("at").values("at")[:1]
    # Only jobs that ever started (bind sets started_at and never clears it): the first start is a subquery per
    # job and per bucket, which a large queue of jobs that never ran would otherwise pay for at every scrape.
    started = (
        Job.objects.filter(started_at__isnull=False)
        .annotate(first_start=Subquery(first_start))
        .filter(first_start__isnull=False)
        .annotate(wait=ExpressionWrapper(F("first_start") - F("submitted_at"), output_field=DurationField()))
    )
    within = {f"le{i}": Count("pk", filter=Q(wait__lte=timedelta(seconds=b))) for i, b in enumerate(WAIT_BUCKETS_S)}
    rows = started.values("team__slug", "priority").annotate(n=Count("pk"), total=Sum("wait"), **within).order_by()
    for row in sorted(rows, key=lambda r: (r["team__slug"], r["priority"])):
        cumulative = [row[f"le{i}"] for i in range(len(WAIT_BUCKETS_S))]
        total: timedelta = row["total"] or timedelta(0)
        family.add_metric(
            [row["team__slug"], row["priority"]],
            histogram_buckets(WAIT_BUCKETS_S, cumulative, row["n"]),
            total.total_seconds(),
        )
    return family


def _oldest_pending(now: datetime) -> Metric:
    family = GaugeMetricFamily(
        "microcosm_queue_oldest_pending_seconds",
        "How long the longest-waiting pending job has waited (since its submission or last requeue).",
        labels=["team", "priority"],
    )
    requeued = (
        JobEvent.objects.filter(job=OuterRef("pk"), type=EventType.REQUEUED)
        .values("job")
        .annotate(last=Max("at"))
        .values("last")
    )
    rows = (
        Job.objects.filter(state=JobState.PENDING)
        .annotate(since=Coalesce(Subquery(requeued), F("submitted_at")))
        .values_list("team__slug", "priority")
        .annotate(oldest=Min("since"))
        .order_by()
    )
    for team, priority, oldest in sorted(rows):
        family.add_metric([team, priority], max(0.0, (now - oldest).total_seconds()))
    return family
