"""Reads of the ledger for finance, team leads and the advisor; every tenant-visible read takes a scope.

Who sees what: finance (the ``finance`` group) and platform admins see every team and the cluster lines
(idle capacity, unused commitments, the cluster's cost); a team lead sees their own teams' lines only;
anyone else sees no billing figures (the views answer 403, and 404 for a team they are not part of).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db.models import Case, DecimalField, Max, Q, Sum, Value, When
from django.db.models.functions import TruncHour, TruncMonth

from billing.capacity import capacity_lines, commitment_lines, node_lives
from billing.errors import PeriodInvalid
from billing.models import LedgerEntry, LostWork
from billing.on_demand import on_demand_overhead_by_team
from billing.periods import Period, add_months, month_start, period_for
from billing.prices import PriceBook
from billing.provisional import provisional_entries
from billing.report import ZERO, JobLine, Report, attach_usage, share_idle
from billing.services import price_book_load
from scheduler.core.model.vocabulary import CapacityTier, JobKind
from teams.models import Membership, Team
from teams.roles import AnyUser, is_finance, is_platform_admin

_MONEY: DecimalField[Decimal, Decimal] = DecimalField(max_digits=20, decimal_places=6)


@dataclass(frozen=True)
class Scope:
    """What a user may see: every team (finance, admins) or the listed teams (a lead's)."""

    all_teams: bool
    team_ids: frozenset[int] = frozenset()

    def allows(self, team_id: int) -> bool:
        return self.all_teams or team_id in self.team_ids


def billing_scope_for_user(*, user: AnyUser) -> Scope | None:
    """The user's billing scope; None for someone who may see no billing figures at all."""
    if not user.is_authenticated or not user.is_active:
        return None
    if is_finance(user) or is_platform_admin(user):
        return Scope(all_teams=True)
    led = Membership.objects.filter(user_id=user.pk, role=Membership.Role.LEAD).values_list("team_id", flat=True)
    team_ids = frozenset(led)
    return Scope(all_teams=False, team_ids=team_ids) if team_ids else None


def scope_label(scope: Scope) -> str:
    """How a file names its scope: ``all-teams``, one team's slug, or a lead's team slugs joined by ``+``."""
    if scope.all_teams:
        return "all-teams"
    slugs = sorted(Team.objects.filter(pk__in=scope.team_ids).values_list("slug", flat=True))
    return "+".join(slugs) or "no-teams"


def billing_team_for_user(*, user: AnyUser, slug: str) -> tuple[Team | None, bool]:
    """``(team, allowed)``: the team when the user may know it exists (a member, finance, admin), else None.

    ``allowed`` says whether they may see its figures. An outsider gets ``(None, False)`` (a 404, so team
    names do not leak); a member who is not its lead gets ``(team, False)`` (a 403).
    """
    team = Team.objects.filter(slug=slug).first()
    if team is None or not user.is_authenticated:
        return None, False
    scope = billing_scope_for_user(user=user)
    if scope is not None and scope.allows(team.pk):
        return team, True
    if Membership.objects.filter(user_id=user.pk, team=team).exists():
        return team, False
    return None, False


def billing_settings() -> dict[str, str]:
    return dict(settings.BILLING)


def chargeback_report(
    *, scope: Scope, month: date, now: datetime, mode: str | None = None, team_id: int | None = None
) -> Report:
    """The month's chargeback as ``scope`` may see it; ``team_id`` narrows it to one team (already allowed).

    Idle sharing is computed over the whole cluster before narrowing, so a team's share does not depend on
    who is looking.
    """
    config = billing_settings()
    period = period_for(month, now=now)
    report = _cluster_report(period=period, mode=mode or config["mode"], idle_mode=config["idle_cost"], now=now)
    if scope.all_teams and team_id is None:
        return report
    visible = [line for line in report.job_lines if scope.allows(line.team_id) and team_id in (None, line.team_id)]
    team_ids = {team_id} if team_id is not None else set(scope.team_ids)
    lost = LostWork.objects.filter(
        preempted_at__gte=period.start, preempted_at__lt=period.as_of, team_id__in=team_ids
    ).aggregate(gpu_hours=Sum("gpu_hours"), cost=Sum("cost"))
    overhead = {k: v for k, v in report.overhead_by_team.items() if k in team_ids or scope.all_teams}
    return replace(
        report,
        scope_all=False,
        job_lines=visible,
        warnings=[],
        lost_gpu_hours=lost["gpu_hours"] or ZERO,
        lost_cost=lost["cost"] or ZERO,
        lost_by_team={k: v for k, v in report.lost_by_team.items() if k in team_ids or scope.all_teams},
        overhead_gpu_hours=sum((hours for hours, _cost in overhead.values()), ZERO),
        overhead_cost=sum((cost for _hours, cost in overhead.values()), ZERO),
        overhead_by_team=overhead,
        overhead_teams={k: v for k, v in report.overhead_teams.items() if k in overhead},
    )


@dataclass(frozen=True)
class TeamMonthCost:
    """What one team's lines of the running month's chargeback add up to, as the finance page shows them."""

    month_start: datetime  # 00:00 UTC on the 1st: billing months are UTC months
    gpu_hours: Decimal
    cost: Decimal  # usage + any idle share: the team's total on the finance page (6 decimals)
    provisional_cost: Decimal  # of which the hours the ledger has not closed yet


def team_month_cost(*, team_id: int, now: datetime) -> TeamMonthCost:
    """The team's figure for the dashboard: the same report as the finance page and its downloads (closed
    hours plus provisional ones up to ``now``), so all three agree to the cent. The caller checked the user
    may see the team's figures."""
    month = now.astimezone(UTC).date().replace(day=1)
    try:
        period_for(month, now=now)
    except PeriodInvalid:  # the very first instant of the month: nothing has been held yet
        return TeamMonthCost(month_start=month_start(month), gpu_hours=ZERO, cost=ZERO, provisional_cost=ZERO)
    report = chargeback_report(
        scope=Scope(all_teams=False, team_ids=frozenset({team_id})), month=month, now=now, team_id=team_id
    )
    lines = [line for line in report.job_lines if line.team_id == team_id]
    return TeamMonthCost(
        month_start=report.period.start,
        gpu_hours=sum((line.gpu_hours for line in lines), ZERO),
        cost=sum((line.total for line in lines), ZERO),
        provisional_cost=sum((line.cost for line in lines if line.provisional), ZERO),
    )


def _period_entries(period: Period):
    return LedgerEntry.objects.filter(interval_start__gte=period.start, interval_start__lt=period.as_of)


def _provisional_lines(*, period: Period, now: datetime) -> list[JobLine]:
    """The hours not closed yet in ``period`` up to ``now`` (billing.provisional), one line per job, model, tier."""
    lines: dict[tuple[int, int | None, str, str], JobLine] = {}
    for entry in provisional_entries(now=now, since=period.start):
        if entry.interval_start >= period.as_of:
            continue
        job = entry.job
        assert job is not None  # built from an allocation, which always has its job
        key = (entry.team_id, entry.job_id, entry.gpu_model, entry.tier)
        line = lines.get(key)
        if line is None:
            line = lines[key] = JobLine(
                team_id=entry.team_id,
                team_slug=job.team.slug,
                team_name=job.team.name,
                project_code=job.project.code if job.project else "",
                job_id=entry.job_id,
                job_name=job.name,
                gpu_model=entry.gpu_model,
                tier=entry.tier,
                gpu_hours=ZERO,
                borrowed_gpu_hours=ZERO,
                cost=ZERO,
                provisional=True,
            )
        line.gpu_hours += entry.gpu_hours
        line.borrowed_gpu_hours += entry.gpu_hours if entry.borrowed else ZERO
        line.cost += entry.cost
    return sorted(lines.values(), key=lambda j: (j.team_slug, j.project_code, j.job_id or 0, j.gpu_model, j.tier))


def _cluster_report(*, period: Period, mode: str, idle_mode: str, now: datetime) -> Report:
    entries = _period_entries(period)
    grouped = (
        entries.values(
            "team_id", "team__slug", "team__name", "project__code", "job_id", "job__name", "gpu_model", "tier"
        )
        .annotate(
            sum_gpu_hours=Sum("gpu_hours"),
            sum_borrowed=Sum(Case(When(borrowed=True, then="gpu_hours"), default=Value(ZERO), output_field=_MONEY)),
            sum_cost=Sum("cost"),
        )
        .order_by("team__slug", "project__code", "job_id", "gpu_model", "tier")
    )
    lines = [
        JobLine(
            team_id=row["team_id"],
            team_slug=row["team__slug"],
            team_name=row["team__name"],
            project_code=row["project__code"] or "",
            job_id=row["job_id"],
            job_name=row["job__name"] or "",
            gpu_model=row["gpu_model"],
            tier=row["tier"],
            gpu_hours=_six(row["sum_gpu_hours"]),
            borrowed_gpu_hours=_six(row["sum_borrowed"]),
            cost=_six(row["sum_cost"]),
        )
        for row in grouped
    ]
    lines += _provisional_lines(period=period, now=now)
    prices = price_book_load()
    capacity = capacity_lines(period=period, lives=node_lives(), prices=prices)
    reserved = {model: line for (model, tier), line in capacity.items() if tier == CapacityTier.RESERVED}
    commitments = commitment_lines(period=period, reserved=reserved)
    for model, line in reserved.items():
        capacity.setdefault((model, CapacityTier.RESERVED), line)
    capacity_list = attach_usage(capacity.values(), lines)
    warnings = [
        f"{line.gpu_model} {line.tier}: the ledger holds {line.used_gpu_hours:.2f} GPU-hours but only "
        f"{line.capacity_gpu_hours:.2f} were registered: check when those nodes were registered or marked gone"
        for line in capacity_list
        if line.used_gpu_hours > line.capacity_gpu_hours
    ]
    if entries.filter(price_source="allocation").exists():
        warnings.append(
            "some hours were priced at the node's own price because the catalog had no price for their GPU "
            "model and tier: add the missing rows under Billing › GPU prices"
        )
    idle_total = sum((line.idle_cost for line in capacity_list), ZERO)
    shared = idle_mode == "shared" and share_idle(lines, idle_total)
    if idle_mode == "shared" and not shared and idle_total:
        warnings.append("no usage this period to share the idle capacity over: it is shown as its own line")
    lost = LostWork.objects.filter(preempted_at__gte=period.start, preempted_at__lt=period.as_of).aggregate(
        gpu_hours=Sum("gpu_hours"), cost=Sum("cost")
    )
    overhead = on_demand_overhead_by_team(period=period, prices=prices)
    return Report(
        period=period,
        mode=mode,
        idle_mode=idle_mode,
        scope_all=True,
        job_lines=lines,
        capacity=capacity_list,
        commitments=commitments,
        idle_shared=shared,
        closed_through=entries.aggregate(end=Max("interval_end"))["end"],
        lost_gpu_hours=lost["gpu_hours"] or ZERO,
        lost_cost=lost["cost"] or ZERO,
        lost_by_team=lost_work_by_team(period=period),
        overhead_gpu_hours=sum((hours for hours, _cost in overhead.values()), ZERO),
        overhead_cost=sum((cost for _hours, cost in overhead.values()), ZERO),
        overhead_by_team=overhead,
        overhead_teams={
            pk: (slug, name)
            for pk, slug, name in Team.objects.filter(pk__in=overhead).values_list("pk", "slug", "name")
        },
        warnings=warnings,
    )


def _six(value: Decimal | None) -> Decimal:
    return (value or ZERO).quantize(Decimal("0.000001"))


def lost_work_by_team(*, period: Period, team_ids: set[int] | None = None) -> dict[int, tuple[Decimal, Decimal]]:
    rows = LostWork.objects.filter(preempted_at__gte=period.start, preempted_at__lt=period.as_of)
    if team_ids is not None:
        rows = rows.filter(team_id__in=team_ids)
    grouped = rows.values("team_id").annotate(gpu_hours=Sum("gpu_hours"), cost=Sum("cost"))
    return {row["team_id"]: (_six(row["gpu_hours"]), _six(row["cost"])) for row in grouped}


@dataclass(frozen=True)
class MonthFigures:
    label: str
    by_team: dict[str, Decimal]  # team slug → total (usage + idle share)
    idle: Decimal
    unused_commitments: Decimal


def chargeback_history(*, scope: Scope, month: date, now: datetime, months: int = 6) -> list[MonthFigures]:
    """The ``months`` months up to ``month``: what each visible team cost, and the cluster lines for finance."""
    history = []
    for offset in range(months - 1, -1, -1):
        current = add_months(month, -offset)
        try:
            report = chargeback_report(scope=scope, month=current, now=now)
        except PeriodInvalid:  # a month before any closed hour simply has no figures
            continue
        if not report.job_lines and not (report.scope_all and report.cluster_cost):
            continue  # before the cluster existed (or before a lead's team used it): nothing to plot
        by_team: dict[str, Decimal] = {}
        for team in report.teams():
            by_team[team.slug] = team.total
        history.append(
            MonthFigures(
                label=report.period.label,
                by_team=by_team,
                idle=report.idle_line if report.scope_all else ZERO,
                unused_commitments=report.unused_commitment_total if report.scope_all else ZERO,
            )
        )
    return history


def ledger_months() -> list[date]:
    """Months that have ledger entries, newest first (for the month picker)."""
    months = LedgerEntry.objects.annotate(month=TruncMonth("interval_start")).values_list("month", flat=True)
    return sorted({m.date() if isinstance(m, datetime) else m for m in months.distinct()}, reverse=True)


@dataclass(frozen=True)
class DemandSeries:
    """Hourly demand of one GPU model: the average GPU-equivalents held in each hour of ``[start, end)``."""

    gpu_model: str
    start: datetime
    demand_gpus: list[float]
    spot_eligible_gpus: list[float]  # held by checkpointed, preemptible training jobs
    lost_fraction: float | None  # lost work / spot GPU-hours over the window (None: no spot use)


def demand_series(*, gpu_model: str, start: datetime, end: datetime) -> DemandSeries:
    """Each hour's GPU-hours summed from the ledger (entries never straddle an hour, so a sum per hour is the
    average number of GPUs held in it); hours without entries are zero demand."""
    entries = LedgerEntry.objects.filter(gpu_model=gpu_model, interval_start__gte=start, interval_start__lt=end)
    eligible = Q(job__preemptible=True, job__checkpoint_interval_s__isnull=False, job__kind=JobKind.TRAINING)
    hourly = (
        entries.annotate(hour=TruncHour("interval_start"))
        .values("hour")
        .annotate(
            sum_gpu_hours=Sum("gpu_hours"),
            sum_eligible=Sum(Case(When(eligible, then="gpu_hours"), default=Value(ZERO), output_field=_MONEY)),
        )
    )
    hours = int((end - start) / timedelta(hours=1))
    demand = [0.0] * hours
    spot_ok = [0.0] * hours
    for row in hourly:
        index = int((row["hour"] - start) / timedelta(hours=1))
        if 0 <= index < hours:
            demand[index] = float(row["sum_gpu_hours"])
            spot_ok[index] = float(row["sum_eligible"] or 0)
    spot_hours = entries.filter(tier=CapacityTier.SPOT).aggregate(total=Sum("gpu_hours"))["total"] or ZERO
    lost = (
        LostWork.objects.filter(
            gpu_model=gpu_model, tier=CapacityTier.SPOT, preempted_at__gte=start, preempted_at__lt=end
        ).aggregate(total=Sum("gpu_hours"))["total"]
        or ZERO
    )
    return DemandSeries(
        gpu_model=gpu_model,
        start=start,
        demand_gpus=demand,
        spot_eligible_gpus=spot_ok,
        lost_fraction=float(lost / spot_hours) if spot_hours else None,
    )


def ledger_gpu_models() -> list[str]:
    """GPU models with ledger entries, most GPU-hours first."""
    rows = LedgerEntry.objects.values("gpu_model").annotate(total=Sum("gpu_hours")).order_by("-total", "gpu_model")
    return [row["gpu_model"] for row in rows if row["gpu_model"]]


@dataclass(frozen=True)
class ShownPrice:
    """The one price per GPU-hour a page shows for capacity: what the ledger bills for it."""

    price_per_gpu_hour: Decimal
    fallback: bool  # True: the catalog has no price for this GPU model and tier; the node's own price is billed


def price_shown(
    *, gpu_model: str, tier: str, node_price: Decimal, at: datetime, prices: PriceBook | None = None
) -> ShownPrice:
    """The price the ledger bills an hour of ``gpu_model`` in ``tier`` at ``at``: the catalog's in force, or,
    where the catalog has none, the node's own price (billing.services.ledger ``_price``: PriceSource.ALLOCATION).

    Pages show this, never ``Node.price_per_gpu_hour`` on its own: a catalog edit by finance would otherwise
    leave the cluster map and a job's page quoting a price the ledger no longer bills. Pass ``prices`` when
    pricing many nodes at once.
    """
    book = prices or price_book_load()
    price = book.price_at(gpu_model=gpu_model, tier=tier, at=at)
    if price is None:
        return ShownPrice(node_price, fallback=True)
    return ShownPrice(price, fallback=False)
