"""Reads behind a team's dashboard: quota use per GPU class, job counts, this month's GPU-hours and cost,
recent events, and the allocated-versus-used series of the utilization graph.

Callers pass a team the requesting user may see (``teams.selectors.team_list_for_user``); these functions
do not check access themselves, except :func:`quota_use_for_user`, which takes the user.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from django.db.models import Case, Count, F, IntegerField, Q, Sum, Value, When
from django.utils import timezone

from billing.selectors import team_month_cost
from jobs.models import Allocation, Job, JobEvent
from jobs.selectors.jobs import Usage, gpu_equivalents
from scheduler.core import ANY, burst_limits, guarantee_limits
from scheduler.core import Team as CoreTeam
from scheduler.core.gpus.units import UNITS_PER_GPU
from scheduler.core.model.vocabulary import JobState, Priority
from scheduler.models import UtilizationSample
from teams.models import Quota, Team
from teams.roles import AnyUser
from teams.selectors import team_list_for_user

ANY_CLASS = ANY  # the row of all classes together: the quota rows' overall key


@dataclass(frozen=True)
class QuotaUse:
    """One GPU class of a team (``any``: all classes together) now, in GPU-equivalents.

    The guarantee and burst limit are the scheduler's reading of the team's quota rows (fair-share rule 1 in
    ``scheduler.core.rules.fairshare``): the ``any`` row's guarantee is the ``any`` quota or, without one, the sum
    of the class quotas; a class without a quota row is bounded by the ``any`` figures alone (None here) or,
    when the team's quotas are per class only, guaranteed nothing. Burst None: no burst limit.

    What the team holds is split as rule 2 admits it: *production* may run above the guarantee, up to the
    burst limit; *other non-preemptible* work runs within the guarantee; *preemptible* work may run up to the
    burst limit and is *borrowed* above the guarantee, where other teams can reclaim it. Production counts as
    production even when marked preemptible: it is never preempted, so it is never reclaimed either.
    """

    gpu_class: str
    guaranteed_gpus: float | None  # None: no figure for this class (the ``any`` row bounds it)
    burst_gpus: float | None  # None: no burst limit
    production_gpus: float
    other_non_preemptible_gpus: float
    preemptible_gpus: float
    # Non-preemptible work above the guarantee, counted as production first: production may run there (up to
    # the burst limit), other non-preemptible work only after the guarantee was lowered under it or with fair
    # share off.
    production_above_gpus: float
    other_non_preemptible_above_gpus: float
    borrowed_gpus: float  # preemptible work above the guarantee: reclaimable by other teams

    @property
    def in_use_gpus(self) -> float:
        return round(self.production_gpus + self.other_non_preemptible_gpus + self.preemptible_gpus, 3)

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
    month: Usage  # the team's lines of the finance page's running month (billing.selectors.team_month_cost)
    month_provisional_cost: Decimal = Decimal(0)  # of which hours the ledger has not closed yet
    recent_events: list[JobEvent] = field(default_factory=list)
    recent_jobs: list[Job] = field(default_factory=list)


def team_quota_use(*, team: Team) -> list[QuotaUse]:
    """Guarantee, burst limit and what the team holds now per GPU class, plus the ``any`` total; classes the
    team holds without a quota row are listed too. The caller has checked the team is the user's."""
    return _quota_use(team_ids=[team.pk]).get(team.pk, [])


def quota_use_for_user(*, user: AnyUser) -> dict[int, list[QuotaUse]]:
    """:func:`team_quota_use` of every team the user may see (their own; every team for platform admins),
    by team id, in two queries whatever the number of teams. A team with neither quota nor work is absent."""
    return _quota_use(team_ids=team_list_for_user(user=user).values_list("pk", flat=True))


_Held = dict[str, float]  # GPU class (and ``any``) → GPU-equivalents


def _quota_use(*, team_ids: Iterable[int]) -> dict[int, list[QuotaUse]]:
    production: dict[int, _Held] = defaultdict(lambda: defaultdict(float))
    other: dict[int, _Held] = defaultdict(lambda: defaultdict(float))
    preemptible: dict[int, _Held] = defaultdict(lambda: defaultdict(float))
    live = Allocation.objects.filter(job__team_id__in=team_ids, ended_at__isnull=True).values_list(
        "job__team_id",
        "job__priority",
        "job__preemptible",
        "node__gpu_model__gpu_class",
        "node__gpu_model__name",
        "mig_profile",
    )
    for team_id, priority, is_preemptible, gpu_class, gpu_model, mig_profile in live:
        # Production first, whatever its preemptible flag: production is never preempted (preemption's first
        # protection), so no team can reclaim it and it must not show as borrowed.
        if priority == Priority.PRODUCTION:
            held = production[team_id]
        elif is_preemptible:
            held = preemptible[team_id]
        else:
            held = other[team_id]
        units = gpu_equivalents(gpu_model, mig_profile)
        held[gpu_class] += units
        held[ANY_CLASS] += units
    quotas: dict[int, list[Quota]] = defaultdict(list)
    for quota in Quota.objects.filter(team_id__in=team_ids).order_by("gpu_class"):
        quotas[quota.team_id].append(quota)
    result: dict[int, list[QuotaUse]] = {}
    for team_id in sorted(set(quotas) | set(production) | set(other) | set(preemptible)):
        result[team_id] = _rows(quotas[team_id], production[team_id], other[team_id], preemptible[team_id])
    return result


def _rows(quotas: list[Quota], production: _Held, other: _Held, preemptible: _Held) -> list[QuotaUse]:
    # The scheduler's own reading of the quota rows (rule 1), so the page and the engine agree on the figures.
    spec = CoreTeam(
        name="team",
        guaranteed=tuple((q.gpu_class, float(q.guaranteed_gpus)) for q in quotas),
        burst=tuple((q.gpu_class, float(q.burst_gpus)) for q in quotas),
    )
    guarantee = guarantee_limits(spec)
    burst = burst_limits(spec, guarantee)
    held_classes = set(production) | set(other) | set(preemptible)
    classes = [ANY_CLASS] if quotas or held_classes else []
    classes += sorted(({q.gpu_class for q in quotas} | held_classes) - {ANY_CLASS})
    rows = []
    for gpu_class in classes:
        if gpu_class == ANY_CLASS:
            guaranteed, limit = guarantee.overall, burst.overall
        else:
            guaranteed, limit = guarantee.for_class(gpu_class), burst.for_class(gpu_class)
        rows.append(
            quota_use_row(
                gpu_class=gpu_class,
                guaranteed_gpus=None if guaranteed is None else guaranteed / UNITS_PER_GPU,
                burst_gpus=None if limit is None else limit / UNITS_PER_GPU,
                production_gpus=production.get(gpu_class, 0.0),
                other_non_preemptible_gpus=other.get(gpu_class, 0.0),
                preemptible_gpus=preemptible.get(gpu_class, 0.0),
            )
        )
    return rows


def quota_use_row(
    *,
    gpu_class: str,
    guaranteed_gpus: float | None,
    burst_gpus: float | None,
    production_gpus: float,
    other_non_preemptible_gpus: float,
    preemptible_gpus: float,
) -> QuotaUse:
    """One row's arithmetic (pure). Figures are rounded to 1/1000 GPU first, so that slices adding up to a
    whole GPU (3/7 + 4/7) compare equal to it and never show as 0.00 GPUs above the guarantee.

    Above the guarantee, non-preemptible work counts first (rule 4 fills the guarantee with it), production
    first among it (only production may run there); preemptible work holds whatever lies above the rest.
    Without a guarantee figure for the class nothing is above it here: the ``any`` row counts it.
    """
    production = round(production_gpus, 3)
    other = round(other_non_preemptible_gpus, 3)
    preemptible = round(preemptible_gpus, 3)
    guaranteed = None if guaranteed_gpus is None else round(guaranteed_gpus, 3)
    firm_above = 0.0 if guaranteed is None else max(0.0, round(production + other - guaranteed, 3))
    production_above = min(production, firm_above)
    all_above = 0.0 if guaranteed is None else max(0.0, round(production + other + preemptible - guaranteed, 3))
    return QuotaUse(
        gpu_class=gpu_class,
        guaranteed_gpus=guaranteed,
        burst_gpus=None if burst_gpus is None else round(burst_gpus, 3),
        production_gpus=production,
        other_non_preemptible_gpus=other,
        preemptible_gpus=preemptible,
        production_above_gpus=production_above,
        other_non_preemptible_above_gpus=round(firm_above - production_above, 3),
        borrowed_gpus=min(preemptible, all_above),
    )


def team_dashboard(*, team: Team, now: datetime | None = None, events: int = 12, jobs: int = 10) -> TeamDashboard:
    """Everything on the team dashboard but the graph (see :func:`team_utilization_series`)."""
    now = now or timezone.now()
    counts = Job.objects.filter(team=team).aggregate(
        running=Count("id", filter=Q(state=JobState.RUNNING)),
        pending=Count("id", filter=Q(state=JobState.PENDING)),
    )
    # The billing page's figure (UTC month, catalog prices, closed plus provisional hours), not a second
    # computation that could disagree with it: the page, its downloads and this dashboard agree to the cent.
    month = team_month_cost(team_id=team.pk, now=now)
    recent = list(
        JobEvent.objects.filter(job__team=team).select_related("job", "actor").order_by("-at", "-id")[:events]
    )
    return TeamDashboard(
        team=team,
        quotas=team_quota_use(team=team),
        running_jobs=counts["running"],
        pending_jobs=counts["pending"],
        month_start=month.month_start,
        month=Usage(gpu_hours=float(month.gpu_hours), cost=month.cost),
        month_provisional_cost=month.provisional_cost,
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
