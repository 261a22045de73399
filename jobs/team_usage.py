"""Reads behind a team's dashboard: quota use per GPU class, job counts, this month's GPU-hours and cost,
recent events, and the allocated-versus-used series of the utilization graph.

Callers pass a team the requesting user may see (``teams.selectors.team_list_for_user``); these functions
do not check access themselves.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Case, Count, F, IntegerField, Q, Sum, Value, When
from django.utils import timezone

from jobs.models import Allocation, Job, JobEvent
from jobs.selectors import Usage, gpu_equivalents, usage_of
from scheduler.core.vocabulary import JobState
from scheduler.models import UtilizationSample
from teams.models import Team

ANY_CLASS = "any"


@dataclass(frozen=True)
class QuotaUse:
    """One GPU class of a team (``any``: all classes together), in GPU-equivalents."""

    gpu_class: str
    guaranteed_gpus: float | None  # None: no quota row for this class
    burst_gpus: float | None
    in_use_gpus: float
    borrowed_gpus: float  # in use above the guarantee: idle capacity lent by other teams, reclaimable

    @property
    def in_use_percent_of_burst(self) -> float | None:
        if not self.burst_gpus:
            return None
        return min(100.0, 100.0 * self.in_use_gpus / self.burst_gpus)


@dataclass(frozen=True)
class TeamDashboard:
    team: Team
    quotas: list[QuotaUse]
    running_jobs: int
    pending_jobs: int
    month_start: datetime
    month: Usage
    recent_events: list[JobEvent] = field(default_factory=list)
    recent_jobs: list[Job] = field(default_factory=list)


def team_quota_use(*, team: Team) -> list[QuotaUse]:
    """Guaranteed, burst, in use and borrowed per GPU class, plus the ``any`` total; classes the team uses
    without a quota row are listed too."""
    in_use: dict[str, float] = defaultdict(float)
    live = Allocation.objects.filter(job__team=team, ended_at__isnull=True).values_list(
        "node__gpu_model__gpu_class", "node__gpu_model__name", "mig_profile"
    )
    for gpu_class, gpu_model, mig_profile in live:
        units = gpu_equivalents(gpu_model, mig_profile)
        in_use[gpu_class] += units
        in_use[ANY_CLASS] += units
    quotas = {q.gpu_class: q for q in team.quotas.all()}
    classes = [ANY_CLASS] if ANY_CLASS in quotas or in_use else []
    classes += sorted((set(quotas) | set(in_use)) - {ANY_CLASS})
    rows = []
    for gpu_class in classes:
        quota = quotas.get(gpu_class)
        used = round(in_use.get(gpu_class, 0.0), 3)
        guaranteed = float(quota.guaranteed_gpus) if quota else None
        rows.append(
            QuotaUse(
                gpu_class=gpu_class,
                guaranteed_gpus=guaranteed,
                burst_gpus=float(quota.burst_gpus) if quota else None,
                in_use_gpus=used,
                borrowed_gpus=round(max(0.0, used - (guaranteed or 0.0)), 3),
            )
        )
    return rows


def month_start_of(now: datetime) -> datetime:
    """Midnight of the first day of ``now``'s month, in the active (the reader's) time zone."""
    local = timezone.localtime(now)
    return local.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def team_dashboard(*, team: Team, now: datetime | None = None, events: int = 12, jobs: int = 10) -> TeamDashboard:
    """Everything on the team dashboard but the graph (see :func:`team_utilization_series`)."""
    now = now or timezone.now()
    counts = Job.objects.filter(team=team).aggregate(
        running=Count("id", filter=Q(state=JobState.RUNNING)),
        pending=Count("id", filter=Q(state=JobState.PENDING)),
    )
    since = month_start_of(now)
    rows = (
        Allocation.objects.filter(job__team=team, started_at__lt=now)
        .filter(Q(ended_at__isnull=True) | Q(ended_at__gt=since))
        .values_list("node__gpu_model__name", "mig_profile", "price_per_gpu_hour", "started_at", "ended_at")
    )
    recent = list(
        JobEvent.objects.filter(job__team=team).select_related("job", "actor").order_by("-at", "-id")[:events]
    )
    return TeamDashboard(
        team=team,
        quotas=team_quota_use(team=team),
        running_jobs=counts["running"],
        pending_jobs=counts["pending"],
        month_start=since,
        month=usage_of(rows, now=now, since=since),
        recent_events=recent,
        recent_jobs=list(
            Job.objects.filter(team=team).select_related("submitted_by").order_by("-submitted_at", "-id")[:jobs]
        ),
    )


@dataclass(frozen=True)
class ClassSeries:
    """One GPU class over time: the team's average GPU-equivalents held per bucket, and how many of them
    were busy (None where no utilization sample covers the bucket)."""

    gpu_class: str
    times: list[datetime]
    allocated_gpus: list[float]
    used_gpus: list[float | None]


WINDOWS_S = {"1h": 3600, "6h": 6 * 3600, "24h": 24 * 3600}
DEFAULT_WINDOW = "6h"
BUCKETS = 36


def team_utilization_series(
    *, team: Team, window: str = DEFAULT_WINDOW, now: datetime | None = None
) -> list[ClassSeries]:
    """Allocated versus used GPU-equivalents of ``team`` per GPU class over the last ``window``.

    *Allocated* comes from the team's allocations (exact). *Used* comes from the nodes' utilization samples
    (DCGM engine activity): a node's busy GPU-equivalents divided by its allocated ones is the share of held
    capacity that worked, and the team is credited that share of what it held on the node. Samples are per
    node, not per pod, so on a node shared with other teams this is an estimate.
    """
    if window not in WINDOWS_S:
        raise ValueError(f"window must be one of {', '.join(WINDOWS_S)}, not {window!r}")
    now = now or timezone.now()
    span = timedelta(seconds=WINDOWS_S[window])
    start = now - span
    step = span / BUCKETS
    allocations = list(
        Allocation.objects.filter(job__team=team, started_at__lt=now)
        .filter(Q(ended_at__isnull=True) | Q(ended_at__gt=start))
        .values_list(
            "node_id", "node__gpu_model__gpu_class", "node__gpu_model__name", "mig_profile", "started_at", "ended_at"
        )
    )
    activity = _node_activity(
        node_ids={row[0] for row in allocations}, start=start, now=now, step=step, buckets=BUCKETS
    )
    classes = sorted({row[1] for row in allocations})
    allocated = {c: [0.0] * BUCKETS for c in classes}
    used: dict[str, list[float | None]] = {c: [None] * BUCKETS for c in classes}
    for node_id, gpu_class, gpu_model, mig_profile, started_at, ended_at in allocations:
        units = gpu_equivalents(gpu_model, mig_profile)
        first = max(0, int((started_at - start) / step))
        last = min(BUCKETS - 1, int(((ended_at or now) - start) / step))
        for b in range(first, last + 1):
            lo, hi = start + b * step, start + (b + 1) * step
            overlap = (min(hi, ended_at or now) - max(lo, started_at)) / step
            if overlap <= 0:
                continue
            held = units * overlap
            allocated[gpu_class][b] += held
            share = activity.get((node_id, b))
            if share is not None:
                used[gpu_class][b] = (used[gpu_class][b] or 0.0) + held * share
    times = [timezone.localtime(start + (b + 0.5) * step) for b in range(BUCKETS)]
    return [
        ClassSeries(
            gpu_class=c,
            times=times,
            allocated_gpus=[round(v, 3) for v in allocated[c]],
            used_gpus=[None if v is None else round(v, 3) for v in used[c]],
        )
        for c in classes
    ]


def _node_activity(
    *, node_ids: set[int], start: datetime, now: datetime, step: timedelta, buckets: int
) -> dict[tuple[int, int], float]:
    """(node, bucket) → busy / allocated GPU-equivalents on that node, capped at 1; a (node, bucket) without
    samples is absent (unknown, not idle).

    One grouped query: a CASE of plain comparisons gives each sample its bucket and the database sums per
    node and bucket (a date-truncating function would run in Python per row on SQLite).
    """
    if not node_ids:
        return {}
    bucket = Case(
        *[When(at__lte=start + (b + 1) * step, then=Value(b)) for b in range(buckets - 1)],
        default=Value(buckets - 1),
        output_field=IntegerField(),
    )
    rows = (
        UtilizationSample.objects.filter(node_id__in=node_ids, at__gt=start, at__lte=now)
        .annotate(bucket=bucket)
        .values("node_id", "bucket")
        .annotate(allocated=Sum("allocated_gpus"), busy=Sum(F("busy_ratio") * F("gpus")))
        .values_list("node_id", "bucket", "allocated", "busy")
    )
    return {
        (node_id, b): (min(1.0, (busy or 0.0) / allocated) if allocated else 0.0)
        for node_id, b, allocated, busy in rows
    }
