"""Reads of jobs, always scoped to the requesting user.

Every selector that takes ``user`` returns only what that user may see (their teams' jobs; every team's for
platform admins). A job outside that scope is reported as :class:`~jobs.errors.JobNotFound`, which the edges
turn into 404, so a job id never reveals another team's work.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db.models import F, QuerySet
from django.utils import timezone

from jobs.errors import JobNotFound
from jobs.models import Allocation, Job, JobEvent
from scheduler.core.gpus.catalog import GPU_MODEL_BY_NAME, compute_fraction
from scheduler.core.model.vocabulary import INFRASTRUCTURE_LOSSES, EventType, JobState
from teams.models import Team
from teams.roles import AnyUser, is_platform_admin

NO_POSITION_YET = "waiting for the next scheduling cycle"
MAX_ID = 2**63 - 1  # the largest value of a BigAutoField


def job_list_for_user(*, user: AnyUser) -> QuerySet[Job]:
    """Jobs of the teams the user may see, newest first."""
    return (
        _scoped(Job.objects.all(), user)
        .select_related("team", "project", "submitted_by")
        .order_by("-submitted_at", "-id")
    )


def _scoped(jobs: QuerySet[Job], user: AnyUser) -> QuerySet[Job]:
    if not user.is_authenticated:
        return jobs.none()
    if is_platform_admin(user):
        return jobs  # every team: no join needed
    return jobs.filter(team__memberships__user_id=user.pk)


def job_list_queue(*, user: AnyUser, team: Team | None = None) -> QuerySet[Job]:
    """Pending jobs of the user's teams (or of ``team``, which must be one of them) in the scheduler's global
    order: by the position the last cycle wrote, then jobs no cycle has seen yet, oldest first.

    The queryset fetches team, project and submitter in the same query, so rendering a page of it costs a
    constant number of queries whatever the queue's length.
    """
    jobs = _scoped(Job.objects.filter(state=JobState.PENDING), user)
    if team is not None:
        jobs = jobs.filter(team=team)
    return jobs.select_related("team", "project", "submitted_by").order_by(
        F("queue_position").asc(nulls_last=True), "submitted_at", "id"
    )


def job_get_for_user(*, user: AnyUser, job_id: int | str) -> Job:
    """The job ``job_id`` if the user may see it; else :class:`JobNotFound` (whether or not it exists)."""
    try:
        pk = int(job_id)
    except (TypeError, ValueError):
        raise JobNotFound(f"no job {job_id!r}") from None
    job = _scoped(Job.objects.filter(pk=pk), user).select_related("team", "project", "submitted_by").first()
    if job is None:
        raise JobNotFound(f"no job {pk} in your teams")
    return job


def jobs_for_user_by_ids(*, user: AnyUser, job_ids: Iterable[int], team: Team | None = None) -> list[Job]:
    """The jobs among ``job_ids`` the user may see (of ``team`` if given), in id order; unknown ids are left
    out, so the caller compares lengths to report them."""
    # Ids beyond the 64-bit id column name no job; SQLite cannot even bind them (OverflowError, a 500).
    jobs = _scoped(Job.objects.filter(pk__in=[pk for pk in job_ids if 0 < pk <= MAX_ID]), user)
    if team is not None:
        jobs = jobs.filter(team=team)
    return list(jobs.select_related("team", "submitted_by").order_by("id"))


def job_events(*, job: Job) -> QuerySet[JobEvent]:
    """The job's timeline, oldest first, with the actor of each entry."""
    return JobEvent.objects.filter(job=job).select_related("actor").order_by("at", "id")


@dataclass(frozen=True)
class CheckpointRow:
    """One recorded checkpoint of a job, as its ``checkpointed`` event holds it. A checkpoint the cluster
    reported by time alone (no step, size or path) has None and empty values there."""

    step: int | None
    saved_at: datetime
    size_bytes: int | None
    duration_s: float | None
    path: str
    replica: int | None
    source: str  # job (its own report), manifest (read by the gateway), simulated; "" unknown


def checkpoint_row(event: JobEvent) -> CheckpointRow:
    """The checkpoint a ``checkpointed`` event records (details written by ``jobs.services.checkpoint_record``)."""
    details = event.details if isinstance(event.details, dict) else {}

    def whole(key: str) -> int | None:
        value = details.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    duration = details.get("duration_s")
    return CheckpointRow(
        step=whole("step"),
        saved_at=event.at,
        size_bytes=whole("size_bytes"),
        duration_s=float(duration) if isinstance(duration, int | float) and not isinstance(duration, bool) else None,
        path=str(details.get("path") or ""),
        replica=whole("replica"),
        source=str(details.get("source") or ""),
    )


def job_checkpoints(*, job: Job) -> list[CheckpointRow]:
    """The job's recorded checkpoints, oldest first (the job must already be one the reader may see)."""
    events = JobEvent.objects.filter(job=job, type=EventType.CHECKPOINTED).order_by("at", "id")
    return [checkpoint_row(event) for event in events]


def job_allocations(*, job: Job) -> QuerySet[Allocation]:
    """Every GPU or MIG instance the job was ever given, live ones first, then newest."""
    return (
        Allocation.objects.filter(job=job)
        .select_related("node", "node__gpu_model")
        .order_by(F("ended_at").desc(nulls_first=True), "-started_at", "replica", "gpu_index", "mig_start")
    )


def gpu_equivalents(gpu_model: str, mig_profile: str) -> float:
    """What one allocation counts as: 1 for a whole GPU, compute slices / 7 for a MIG instance."""
    if mig_profile and gpu_model in GPU_MODEL_BY_NAME and mig_profile in GPU_MODEL_BY_NAME[gpu_model].profiles():
        return compute_fraction(gpu_model, mig_profile)
    return 1.0


@dataclass(frozen=True)
class Usage:
    gpu_hours: float  # GPU-equivalent hours (a 3g slice for an hour counts 3/7)
    cost: Decimal  # at each allocation's own price per GPU-hour


def usage_of(
    rows: Iterable[tuple[str, str, Decimal, datetime, datetime | None]],
    *,
    now: datetime,
    since: datetime | None = None,
) -> Usage:
    """GPU-hours and cost of allocation rows ``(gpu_model, mig_profile, price_per_gpu_hour, started_at,
    ended_at)`` up to ``now`` (live ones count until now), counting only time after ``since`` if given."""
    hours = 0.0
    cost = Decimal(0)
    for gpu_model, mig_profile, price, started_at, ended_at in rows:
        start = max(started_at, since) if since is not None else started_at
        end = min(ended_at or now, now)
        if end <= start:
            continue
        equivalent_hours = gpu_equivalents(gpu_model, mig_profile) * (end - start).total_seconds() / 3600
        hours += equivalent_hours
        cost += Decimal(str(round(equivalent_hours, 6))) * price
    return Usage(gpu_hours=hours, cost=cost.quantize(Decimal("0.01")))


def job_usage(*, job: Job, now: datetime | None = None) -> Usage:
    """GPU-hours and cost the job has accrued so far, from its allocations (live ones up to now), each at the
    price the ledger bills it (the catalog's at its start; the node's own only without one), so the job's page
    quotes one price for a node, the billed one (billing.selectors.price_shown)."""
    from billing.services import price_book_load  # billing reads jobs' models: import it only when called

    prices = price_book_load()

    def billed(model: str, tier: str, node_price: Decimal, at: datetime) -> Decimal:
        catalog = prices.price_at(gpu_model=model, tier=tier, at=at)
        return node_price if catalog is None else catalog

    rows = [
        (model, profile, billed(model, tier, price, started_at), started_at, ended_at)
        for model, profile, tier, price, started_at, ended_at in Allocation.objects.filter(job=job).values_list(
            "node__gpu_model__name", "mig_profile", "tier", "price_per_gpu_hour", "started_at", "ended_at"
        )
    ]
    return usage_of(rows, now=now or timezone.now())


def job_list_for_operator(*, team: str | None = None, states: list[str] | None = None) -> QuerySet[Job]:
    """Every job (an operator's view: management commands only, never a tenant page), newest first, with
    optional team slug and state filters."""
    jobs = Job.objects.select_related("team", "project")
    if team:
        jobs = jobs.filter(team__slug=team)
    if states:
        jobs = jobs.filter(state__in=states)
    return jobs.order_by("-submitted_at", "-id")


def resuming_jobs(job_ids: Iterable[int] | QuerySet[Job, Any]) -> set[int]:
    """The jobs among ``job_ids`` whose latest requeue lost their run to the infrastructure (a spot interruption, a
    lost node: :data:`~scheduler.core.model.vocabulary.INFRASTRUCTURE_LOSSES`): the engine puts them first within
    their priority (``Job.resumes``), and the lead's manage page orders them the same (``team_order_key``).
    The reason is the latest ``preempted`` event's, which every requeue records. ``job_ids`` may be a query of
    job ids (``.values("pk")``), passed to the database as a subquery: the cycle asks for every pending job, and
    thousands of ids as parameters cost more to pass than the rows to read."""
    latest: dict[int, str] = {}
    ids = job_ids if isinstance(job_ids, QuerySet) else list(job_ids)
    events = JobEvent.objects.filter(job_id__in=ids, type=EventType.PREEMPTED).order_by("job_id", "-at", "-id")
    for job_id, details in events.values_list("job_id", "details"):
        if job_id not in latest:
            latest[job_id] = str((details or {}).get("reason", ""))
    return {job_id for job_id, reason in latest.items() if reason in INFRASTRUCTURE_LOSSES}
