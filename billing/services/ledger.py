"""Writes to the ledger: closing allocations' intervals exactly once, recording lost work, seeding prices.

Closing (``ledger_close_interval``) is the only writer of :class:`LedgerEntry` and :class:`LostWork`.
Exactly once, whatever happens:

- **Re-running** closes nothing twice: an allocation is closed from its *watermark* (the end of its last
  entry) on, and boundaries are deterministic (:mod:`billing.intervals`), so a second run finds nothing due.
- **Two closers at once**: each transaction first locks the rows of the allocations it closes (``SELECT … FOR
  UPDATE``, in primary-key order, so two closers never wait on each other in a circle); the second closer waits,
  then reads the first one's watermarks. Where row locks do not exist (SQLite), the unique constraints on
  ``(allocation, interval_start)`` and ``(allocation, interval_end)`` reject the loser's rows, and the loser's
  whole transaction is rolled back: a batch is then closed again one allocation at a time, and an allocation
  the other closer got to first is reported as skipped.
- **A crash mid-close** rolls back the transaction: entries and lost work are written together or not at all,
  and the next run starts again from the unchanged watermarks.

``ledger_close_due`` closes up to ``CLOSE_BATCH`` allocations per transaction (one lock statement, one read of
the watermarks and of the jobs' events, one insert of the entries): a month of the demo's history is 3,000
allocations, a large cluster's hour tens of thousands. ``ledger_close_interval`` closes one.

Contract with the writer of allocations (the scheduling cycle): ``ended_at`` is set once and is never earlier
than ``LIVE_SETTLE_S`` before the moment it is committed. The closer closes live allocations only up to
``now − LIVE_SETTLE_S``, so an hour it closes can never end after an ``ended_at`` recorded later. A violation
is detected (:class:`LedgerConflict`), logged and counted, never papered over.
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from django.db import IntegrityError, transaction
from django.db.models import Exists, F, Max, OuterRef, Q, QuerySet

from billing.errors import BillingError, LedgerConflict, LedgerInputError
from billing.guarantee import Holding, borrowed_jobs
from billing.intervals import accrued_gpu_hours, boundaries, close_horizon, money
from billing.models import GpuPrice, LedgerEntry, LostWork, PriceSource
from billing.prices import PriceBook, default_prices
from jobs.models import Allocation, JobEvent
from scheduler.core.gpus.catalog import profile_spec
from scheduler.core.gpus.units import UNITS_PER_GPU, UNITS_PER_SLICE
from scheduler.core.model.vocabulary import EventType, EvictionReason
from scheduler.models import GpuModel
from teams.models import Quota

logger = logging.getLogger(__name__)

# How long the scheduling cycle may hold its ``now`` before committing an allocation's end (see the module
# docstring). Five minutes is far above a cycle's run time and costs only a five-minute reporting lag.
LIVE_SETTLE_S = 300

# Allocations ``ledger_close_due`` closes in one transaction: few enough that a batch's locks are held for well
# under a second, many enough that the statements per allocation vanish.
CLOSE_BATCH = 200

# Allocation.end_reason values that mean the work was taken away, not finished: the scheduler core's eviction
# reasons (scheduler.core.model.plan.Evict.reason) plus the generic words a gateway may record. An allocation whose
# job has a ``preempted`` event at the allocation's end counts too, whatever its end_reason says.
# EvictionReason.APP_FAILURE is left out on purpose: a job's own crash or OOM kill, restarted within its restart
# budget (jobs.services.restarts), is work the job lost, not work the scheduler took away (docs/billing.md).
PREEMPTION_END_REASONS = frozenset(
    {
        EvictionReason.RECLAIM,
        EvictionReason.PRIORITY,
        EvictionReason.BACKFILL,
        EvictionReason.PRODUCTION,
        EvictionReason.RECONFIGURE,
        EvictionReason.NODE_LOST,
        EvictionReason.SPOT_INTERRUPTION,
        EvictionReason.NODE_DRAIN,
        "preempted",
        "spot-interrupted",
    }
)


@dataclass(frozen=True)
class CloseResult:
    allocation_id: int
    entries: int = 0
    gpu_hours: Decimal = Decimal(0)
    lost_work: bool = False
    skipped: bool = False  # another closer wrote the same intervals first


@dataclass
class CloseSummary:
    allocations: int = 0
    entries: int = 0
    gpu_hours: Decimal = Decimal(0)
    lost_work: int = 0
    skipped: int = 0
    failed: list[str] = field(default_factory=list)


def allocation_units(allocation: Allocation) -> int:
    """The allocation's size in 1/7000 GPU: whole GPU 7000, MIG slice compute slices × 1000.

    Allocations carry no fractional-share field yet; when one is added (a milli share), its size is
    ``milli × 7`` and nothing else in the ledger changes.
    """
    return _units(
        allocation.pk, allocation.node.gpu_model.name if allocation.mig_profile else "", allocation.mig_profile
    )


def _units(allocation_id: int, gpu_model: str, mig_profile: str) -> int:
    if not mig_profile:
        return UNITS_PER_GPU
    spec = profile_spec(gpu_model, mig_profile)
    if spec is None:
        raise LedgerInputError(
            f"allocation {allocation_id}: {mig_profile!r} is not a MIG profile of {gpu_model}; "
            "fix the allocation's mig_profile (scheduler.core.gpus.catalog lists the profiles)"
        )
    return spec.compute_slices * UNITS_PER_SLICE


def price_book_load() -> PriceBook:
    return PriceBook(GpuPrice.objects.values_list("gpu_model__name", "tier", "effective_from", "price_per_gpu_hour"))


def ledger_close_interval(
    *, allocation_id: int, until: datetime, prices: PriceBook | None = None, teams: TeamHoldings | None = None
) -> CloseResult:
    """Close every interval of one allocation that is due by ``until``; write its lost work when it ends.

    Due: whole hours up to ``until`` for a live allocation, everything through its end once it has ended by
    ``until``. Raises :class:`LedgerConflict` when the allocation ended before its last closed interval, and
    :class:`LedgerInputError` when it cannot be sized. Returns what was written (``skipped`` when a concurrent
    closer got there first; nothing was written then). ``prices`` and ``teams`` are caches a batch closer
    shares between allocations; without them they are read for this allocation alone.
    """
    prices = prices or price_book_load()
    try:
        with transaction.atomic():
            return _close_locked(allocation_id=allocation_id, until=until, prices=prices, teams=teams)
    except IntegrityError:
        # Only a concurrent closer can collide with the unique constraints: its rows stand, ours are gone.
        logger.info("ledger: allocation %s was closed concurrently; nothing written", allocation_id)
        return CloseResult(allocation_id=allocation_id, skipped=True)


def _close_locked(*, allocation_id: int, until: datetime, prices: PriceBook, teams: TeamHoldings | None) -> CloseResult:
    allocation = _locked(Allocation.objects.filter(pk=allocation_id)).get()
    entries = _entries_due(
        allocation, closed_until=_closed_until(allocation_id), until=until, prices=prices, teams=teams
    )
    LedgerEntry.objects.bulk_create(entries)
    lost = _lost_work_record(_ended_with(allocation, entries))
    return _result(allocation_id, entries, lost=allocation_id in lost)


def _close_batch(
    allocation_ids: list[int], *, until: datetime, prices: PriceBook, teams: TeamHoldings
) -> list[CloseResult | BillingError]:
    """Close the due intervals of several allocations in one transaction; an allocation that cannot be closed
    (a conflict, an unknown profile) is returned as its error and writes nothing, the others are closed. Raises
    ``IntegrityError`` when a concurrent closer wrote some of the same intervals first (nothing is written)."""
    with transaction.atomic():
        allocations = list(_locked(Allocation.objects.filter(pk__in=allocation_ids)).order_by("pk"))
        watermarks = _watermarks([allocation.pk for allocation in allocations])
        outcomes: dict[int, list[LedgerEntry] | BillingError] = {}
        for allocation in allocations:
            try:
                outcomes[allocation.pk] = _entries_due(
                    allocation, closed_until=watermarks.get(allocation.pk), until=until, prices=prices, teams=teams
                )
            except BillingError as error:
                outcomes[allocation.pk] = error
        built = {pk: entries for pk, entries in outcomes.items() if not isinstance(entries, BillingError)}
        LedgerEntry.objects.bulk_create([entry for entries in built.values() for entry in entries])
        lost = _lost_work_record([ended for a in allocations if a.pk in built for ended in _ended_with(a, built[a.pk])])
    return [
        outcome if isinstance(outcome, BillingError) else _result(pk, outcome, lost=pk in lost)
        for pk, outcome in outcomes.items()
    ]


def _locked(allocations: QuerySet[Allocation]) -> QuerySet[Allocation]:
    """The allocations with what closing reads of them, their rows locked until the transaction ends."""
    return allocations.select_for_update(of=("self",)).select_related("job", "node__gpu_model")


def _entries_due(
    allocation: Allocation,
    *,
    closed_until: datetime | None,
    until: datetime,
    prices: PriceBook,
    teams: TeamHoldings | None,
) -> list[LedgerEntry]:
    """The entries due by ``until`` from the watermark ``closed_until`` on; a conflict when the allocation ended
    before its watermark."""
    if closed_until is not None and allocation.ended_at is not None and closed_until > allocation.ended_at:
        raise LedgerConflict(
            f"allocation {allocation.pk} ended at {allocation.ended_at.isoformat()} but the ledger is closed "
            f"through {closed_until.isoformat()}: its end was recorded more than {LIVE_SETTLE_S} s late; "
            "check the scheduling cycle that ended it"
        )
    horizon = close_horizon(started_at=allocation.started_at, ended_at=allocation.ended_at, until=until)
    return ledger_entries_build(
        allocation=allocation, closed_until=closed_until, until=horizon, prices=prices, teams=teams
    )


def _result(allocation_id: int, entries: list[LedgerEntry], *, lost: bool) -> CloseResult:
    total = sum((entry.gpu_hours for entry in entries), Decimal(0))
    return CloseResult(allocation_id=allocation_id, entries=len(entries), gpu_hours=total, lost_work=lost)


@dataclass(frozen=True)
class _Ended:
    """An allocation whose entries just reached its end: where its lost work, if any, is recorded."""

    allocation: Allocation
    units: int
    price: Decimal


def _ended_with(allocation: Allocation, entries: list[LedgerEntry]) -> list[_Ended]:
    """``[the allocation]`` when these entries close it through its end, else nothing."""
    if entries and allocation.ended_at is not None and entries[-1].interval_end == allocation.ended_at:
        return [_Ended(allocation, units=entries[0].gpu_units, price=entries[-1].price_per_gpu_hour)]
    return []


def ledger_entries_build(
    *,
    allocation: Allocation,
    closed_until: datetime | None,
    until: datetime | None,
    prices: PriceBook,
    teams: TeamHoldings | None,
) -> list[LedgerEntry]:
    """The entries of ``allocation`` from its watermark ``closed_until`` to ``until``, built but not saved.

    The one place the ledger's rules are applied (size, exact GPU-hours, price in force, cost rounding, within
    guarantee or borrowed): the closer saves what this returns, and the provisional figures of the hours not
    closed yet (billing.provisional) are the same entries up to now, never saved. ``until`` None or not after
    the watermark: nothing.
    """
    ends = list(boundaries(started_at=allocation.started_at, closed_until=closed_until, until=until)) if until else []
    if not ends:
        return []
    units = allocation_units(allocation)
    job = allocation.job
    model = allocation.node.gpu_model
    starts = [closed_until or allocation.started_at, *ends[:-1]]
    teams = teams or TeamHoldings(since=starts[0], until=ends[-1])
    entries = []
    accrued = accrued_gpu_hours(
        started_at=allocation.started_at, at=starts[0], units=units, units_per_gpu=UNITS_PER_GPU
    )
    for start, end in zip(starts, ends, strict=True):
        until_end = accrued_gpu_hours(
            started_at=allocation.started_at, at=end, units=units, units_per_gpu=UNITS_PER_GPU
        )
        gpu_hours = until_end - accrued
        accrued = until_end
        price, source = _price(prices, allocation, model.name, start)
        entries.append(
            LedgerEntry(
                allocation=allocation,
                job=job,
                team_id=job.team_id,
                project_id=job.project_id,
                interval_start=start,
                interval_end=end,
                gpu_model=model.name,
                gpu_class=model.gpu_class,
                gpu_units=units,
                gpu_hours=gpu_hours,
                tier=allocation.tier,
                price_per_gpu_hour=price,
                price_source=source,
                cost=money(gpu_hours, price),
                borrowed=teams.borrowed(team_id=job.team_id, job_id=job.pk, at=start),
            )
        )
    return entries


def _closed_until(allocation_id: int) -> datetime | None:
    """The allocation's watermark: the end of its last closed interval (None: nothing closed yet)."""
    return LedgerEntry.objects.filter(allocation_id=allocation_id).aggregate(end=Max("interval_end"))["end"]


def _watermarks(allocation_ids: list[int]) -> dict[int, datetime]:
    """The watermarks of these allocations, by id; one with nothing closed yet is absent."""
    return dict(
        LedgerEntry.objects.filter(allocation_id__in=allocation_ids)
        .values("allocation_id")
        .annotate(end=Max("interval_end"))
        .values_list("allocation_id", "end")
    )


def _price(prices: PriceBook, allocation: Allocation, model: str, at: datetime) -> tuple[Decimal, str]:
    """The catalog price in force; without a catalog row, the price the allocation was bound at (the node's)."""
    price = prices.price_at(gpu_model=model, tier=allocation.tier, at=at)
    if price is not None:
        return price, PriceSource.CATALOG
    return allocation.price_per_gpu_hour, PriceSource.ALLOCATION


class TeamHoldings:
    """What each team held between ``since`` and ``until``, read once and shared by every allocation closed in
    that window, with the borrowed jobs per (team, instant) memoized (billing.guarantee)."""

    def __init__(self, *, since: datetime, until: datetime) -> None:
        self.since = since
        self.until = until
        self._holdings: dict[int, list[Holding]] | None = None  # by team, sorted by start
        self._starts: dict[int, list[datetime]] = {}  # the same holdings' starts, to bisect
        self._quotas: dict[int, dict[str, Decimal]] = {}
        self._borrowed: dict[tuple[int, datetime], set[int]] = {}

    def _load(self) -> dict[int, list[Holding]]:
        if self._holdings is None:
            # Read as tuples, not models: a month's provisional figures build thousands of these per page.
            rows = (
                Allocation.objects.filter(started_at__lt=self.until)
                .filter(Q(ended_at__isnull=True) | Q(ended_at__gt=self.since))
                .values_list(
                    "pk",
                    "job_id",
                    "job__team_id",
                    "job__preemptible",
                    "job__priority",
                    "job__started_at",
                    "node__gpu_model__gpu_class",
                    "node__gpu_model__name",
                    "mig_profile",
                    "started_at",
                    "ended_at",
                )
            )
            holdings: dict[int, list[Holding]] = {}
            for pk, job_id, team_id, preemptible, priority, job_started, gpu_class, model, profile, start, end in rows:
                try:
                    units = _units(pk, model, profile)
                except LedgerInputError:
                    continue  # cannot be sized: its own close reports it; it holds nothing here
                holdings.setdefault(team_id, []).append(
                    Holding(
                        allocation_id=pk,
                        job_id=job_id,
                        preemptible=preemptible,
                        priority=priority,
                        job_started_at=job_started or start,
                        gpu_class=gpu_class,
                        units=units,
                        started_at=start,
                        ended_at=end,
                    )
                )
            for held in holdings.values():
                held.sort(key=lambda holding: holding.started_at)
            self._starts = {team_id: [holding.started_at for holding in held] for team_id, held in holdings.items()}
            for team_id, gpu_class, guaranteed in Quota.objects.values_list("team_id", "gpu_class", "guaranteed_gpus"):
                self._quotas.setdefault(team_id, {})[gpu_class] = guaranteed
            self._holdings = holdings
        return self._holdings

    def borrowed(self, *, team_id: int, job_id: int, at: datetime) -> bool:
        """Whether ``job_id`` of ``team_id`` held borrowed capacity at ``at``."""
        if not self.since <= at < self.until:
            raise ValueError(f"{at.isoformat()} is outside the window these holdings were read for")
        key = (team_id, at)
        if key not in self._borrowed:
            holdings = self._load().get(team_id, [])
            started = holdings[: bisect_right(self._starts.get(team_id, []), at)]  # sorted by start in _load
            self._borrowed[key] = borrowed_jobs(at=at, holdings=started, guaranteed=self._quotas.get(team_id, {}))
        return job_id in self._borrowed[key]


def _lost_work_record(ended: list[_Ended]) -> set[int]:
    """Record the work each preempted allocation of ``ended`` did since its job's last checkpoint; returns the
    allocations recorded (the others were not preempted: they finished or failed on their own)."""
    if not ended:
        return set()
    preemptions: set[tuple[int, datetime]] = set()
    checkpoints: dict[int, list[datetime]] = {}
    events = JobEvent.objects.filter(
        job_id__in={e.allocation.job_id for e in ended}, type__in=(EventType.PREEMPTED, EventType.CHECKPOINTED)
    )
    for job_id, kind, moment in events.values_list("job_id", "type", "at"):
        if kind == EventType.PREEMPTED:
            preemptions.add((job_id, moment))
        else:
            checkpoints.setdefault(job_id, []).append(moment)
    rows = []
    for item in ended:
        allocation = item.allocation
        ended_at = allocation.ended_at
        assert ended_at is not None
        if allocation.end_reason not in PREEMPTION_END_REASONS and (allocation.job_id, ended_at) not in preemptions:
            continue
        last_checkpoint = max(
            (at for at in checkpoints.get(allocation.job_id, ()) if allocation.started_at <= at <= ended_at),
            default=None,
        )
        rows.append(_lost_work(allocation, units=item.units, price=item.price, last_checkpoint=last_checkpoint))
    LostWork.objects.bulk_create(rows)
    return {row.allocation_id for row in rows}


def _lost_work(allocation: Allocation, *, units: int, price: Decimal, last_checkpoint: datetime | None) -> LostWork:
    """The lost work of a preempted allocation: from its job's last checkpoint within it (or its start) to its end."""
    ended_at = allocation.ended_at
    assert ended_at is not None
    lost_from = last_checkpoint or allocation.started_at
    start = allocation.started_at
    gpu_hours = accrued_gpu_hours(started_at=start, at=ended_at, units=units, units_per_gpu=UNITS_PER_GPU) - (
        accrued_gpu_hours(started_at=start, at=lost_from, units=units, units_per_gpu=UNITS_PER_GPU)
    )
    job = allocation.job
    return LostWork(
        allocation=allocation,
        job=job,
        team_id=job.team_id,
        project_id=job.project_id,
        gpu_model=allocation.node.gpu_model.name,
        tier=allocation.tier,
        reason=allocation.end_reason or EventType.PREEMPTED,
        preempted_at=ended_at,
        last_checkpoint_at=last_checkpoint,
        lost_s=Decimal((ended_at - lost_from) / timedelta(microseconds=1)).scaleb(-6),
        gpu_units=units,
        gpu_hours=gpu_hours,
        price_per_gpu_hour=price,
        cost=money(gpu_hours, price),
    )


def ledger_due_allocation_ids(*, until: datetime) -> list[int]:
    """Allocations with something to close by ``until``: live ones, and ended ones not closed to their end."""
    closed_to_end = LedgerEntry.objects.filter(allocation=OuterRef("pk"), interval_end=OuterRef("ended_at"))
    due = Allocation.objects.filter(started_at__lt=until).filter(
        Q(ended_at__isnull=True) | (Q(ended_at__gt=F("started_at")) & ~Exists(closed_to_end))
    )
    return list(due.order_by("started_at", "pk").values_list("pk", flat=True))


def _earliest_open(allocation_ids: list[int]) -> datetime:
    """The earliest instant any of these allocations still has to close: the batch's holdings window."""
    watermarks = dict(
        LedgerEntry.objects.filter(allocation_id__in=allocation_ids)
        .values("allocation_id")
        .annotate(end=Max("interval_end"))
        .values_list("allocation_id", "end")
    )
    starts = Allocation.objects.filter(pk__in=allocation_ids).values_list("pk", "started_at")
    return min(watermarks.get(pk) or started for pk, started in starts)


def ledger_close_due(*, now: datetime, settle_s: int = LIVE_SETTLE_S) -> CloseSummary:
    """Close everything due by ``now − settle_s``, ``CLOSE_BATCH`` allocations per transaction; never raises per
    allocation.

    An allocation that cannot be closed (a conflict, an unknown profile) is logged and listed in ``failed``;
    the others are still closed. Safe to run any number of times and from several workers at once.
    """
    until = now - timedelta(seconds=settle_s)
    prices = price_book_load()
    summary = CloseSummary()
    due = ledger_due_allocation_ids(until=until)
    if not due:
        return summary
    teams = TeamHoldings(since=_earliest_open(due), until=until)
    for start in range(0, len(due), CLOSE_BATCH):
        batch = due[start : start + CLOSE_BATCH]
        try:
            outcomes = _close_batch(batch, until=until, prices=prices, teams=teams)
        except IntegrityError:
            # Another closer wrote some of these first (no row locks: SQLite): one at a time, each says which.
            outcomes = [_close_one(allocation_id, until=until, prices=prices, teams=teams) for allocation_id in batch]
        for outcome in outcomes:
            _summarize(summary, outcome)
    return summary


def _close_one(
    allocation_id: int, *, until: datetime, prices: PriceBook, teams: TeamHoldings
) -> CloseResult | BillingError:
    try:
        return ledger_close_interval(allocation_id=allocation_id, until=until, prices=prices, teams=teams)
    except BillingError as error:
        return error


def _summarize(summary: CloseSummary, outcome: CloseResult | BillingError) -> None:
    if isinstance(outcome, BillingError):
        logger.error("ledger: %s", outcome)
        summary.failed.append(str(outcome))
        return
    summary.allocations += bool(outcome.entries)
    summary.entries += outcome.entries
    summary.gpu_hours += outcome.gpu_hours
    summary.lost_work += int(outcome.lost_work)
    summary.skipped += int(outcome.skipped)


def price_catalog_seed() -> int:
    """Add the default prices of docs/gpu-facts.md (billing.prices) that are missing; never change an existing row.

    Idempotent. GPU models come from the scheduler's catalog (``gpu_models_sync``); returns rows created.
    """
    from scheduler.services.fleet import gpu_models_sync

    created = 0
    with transaction.atomic():
        gpu_models_sync()
        models = {model.name: model for model in GpuModel.objects.all()}
        for row in default_prices():
            _, was_created = GpuPrice.objects.get_or_create(
                gpu_model=models[row.gpu_model],
                tier=row.tier,
                effective_from=row.effective_from,
                defaults={"price_per_gpu_hour": row.price_per_gpu_hour, "source": row.source},
            )
            created += was_created
    return created
