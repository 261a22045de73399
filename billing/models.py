"""The GPU-hour ledger, the work lost to preemption, and the price catalog finance keeps in the admin."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from scheduler.core.gpus.units import UNITS_PER_GPU  # the engine's units: a MIG slice and a milli share are exact
from scheduler.core.model.vocabulary import CapacityTier, choices_of


class PriceSource(models.TextChoices):
    CATALOG = "catalog", "price catalog"
    ALLOCATION = "allocation", "allocation (node price at bind time)"


class LedgerEntry(models.Model):
    """GPU-hours an allocation accrued in ``[interval_start, interval_end)`` and what they cost.

    ``gpu_hours`` is normalised: a whole GPU counts 1 per hour, a MIG slice its compute slices / 7, a shared
    GPU its fraction (``gpu_units`` / 7000). Team, project, job and GPU model are copied from live rows so
    reports never join through rows that may change later. Intervals end on the hour or at the allocation's
    end, so no entry straddles an hour, a day, a month or a price change (prices take effect at midnight UTC).
    ``cost`` is ``gpu_hours × price_per_gpu_hour`` rounded half-even to the micro-dollar (docs/billing.md).
    """

    allocation = models.ForeignKey("jobs.Allocation", on_delete=models.PROTECT, related_name="ledger_entries")
    job = models.ForeignKey("jobs.Job", on_delete=models.PROTECT, null=True, blank=True, related_name="ledger_entries")
    team = models.ForeignKey("teams.Team", on_delete=models.PROTECT, related_name="ledger_entries")
    project = models.ForeignKey(
        "teams.Project", on_delete=models.PROTECT, null=True, blank=True, related_name="ledger_entries"
    )
    interval_start = models.DateTimeField()
    interval_end = models.DateTimeField()
    gpu_model = models.CharField(max_length=64, blank=True, help_text="The node's GPU model when closed.")
    gpu_class = models.CharField(max_length=16, blank=True)
    gpu_units = models.PositiveIntegerField(
        default=UNITS_PER_GPU, help_text="Size in 1/7000 GPU: whole 7000, MIG slice compute slices × 1000."
    )
    gpu_hours = models.DecimalField(max_digits=14, decimal_places=6, validators=[MinValueValidator(Decimal(0))])
    tier = models.CharField(max_length=16, choices=choices_of(CapacityTier))
    price_per_gpu_hour = models.DecimalField(
        max_digits=10, decimal_places=4, validators=[MinValueValidator(Decimal(0))]
    )
    price_source = models.CharField(max_length=16, choices=PriceSource.choices, default=PriceSource.CATALOG)
    cost = models.DecimalField(max_digits=14, decimal_places=6, validators=[MinValueValidator(Decimal(0))])
    borrowed = models.BooleanField(default=False, help_text="Capacity above the team's guarantee.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-interval_start", "id"]
        verbose_name_plural = "ledger entries"
        indexes = [
            models.Index(fields=["team", "interval_start"], name="ledger_team_start"),
            models.Index(fields=["interval_start"], name="ledger_start"),
        ]
        constraints = [
            # Exactly once: an allocation's interval is closed one time, whoever closes it. Both ends are
            # unique, so two closers that disagreed on a boundary could still not both write.
            models.UniqueConstraint(fields=["allocation", "interval_start"], name="ledger_unique_allocation_interval"),
            models.UniqueConstraint(fields=["allocation", "interval_end"], name="ledger_unique_allocation_end"),
            models.CheckConstraint(
                condition=Q(interval_end__gt=models.F("interval_start")), name="ledger_interval_positive"
            ),
            models.CheckConstraint(condition=Q(gpu_hours__gte=0), name="ledger_gpu_hours_non_negative"),
            models.CheckConstraint(condition=Q(cost__gte=0), name="ledger_cost_non_negative"),
            models.CheckConstraint(condition=Q(price_per_gpu_hour__gte=0), name="ledger_price_non_negative"),
            models.CheckConstraint(condition=Q(tier__in=[v.value for v in CapacityTier]), name="ledger_tier_valid"),
            models.CheckConstraint(
                condition=Q(gpu_units__gte=1) & Q(gpu_units__lte=UNITS_PER_GPU), name="ledger_gpu_units_range"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.team.slug} {self.gpu_hours} GPU-h {self.interval_start:%Y-%m-%d %H:%M}"


class LostWork(models.Model):
    """GPU-hours a preempted allocation had done since the job's last checkpoint: work that must be redone.

    Written once per allocation (the unique allocation), in the same transaction as its last ledger entry.
    The ledger still bills those hours (the capacity was used); this row says how much of it was wasted.
    """

    allocation = models.OneToOneField("jobs.Allocation", on_delete=models.PROTECT, related_name="lost_work")
    job = models.ForeignKey("jobs.Job", on_delete=models.PROTECT, related_name="lost_work")
    team = models.ForeignKey("teams.Team", on_delete=models.PROTECT, related_name="lost_work")
    project = models.ForeignKey(
        "teams.Project", on_delete=models.PROTECT, null=True, blank=True, related_name="lost_work"
    )
    gpu_model = models.CharField(max_length=64, blank=True)
    tier = models.CharField(max_length=16, choices=choices_of(CapacityTier))
    reason = models.CharField(max_length=32, help_text="The allocation's end reason.")
    preempted_at = models.DateTimeField()
    last_checkpoint_at = models.DateTimeField(
        null=True, blank=True, help_text="The job's last checkpoint during this allocation; empty: none."
    )
    lost_s = models.DecimalField(max_digits=14, decimal_places=6, validators=[MinValueValidator(Decimal(0))])
    gpu_units = models.PositiveIntegerField(default=UNITS_PER_GPU)
    gpu_hours = models.DecimalField(max_digits=14, decimal_places=6, validators=[MinValueValidator(Decimal(0))])
    price_per_gpu_hour = models.DecimalField(
        max_digits=10, decimal_places=4, validators=[MinValueValidator(Decimal(0))]
    )
    cost = models.DecimalField(max_digits=14, decimal_places=6, validators=[MinValueValidator(Decimal(0))])
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-preempted_at", "id"]
        verbose_name_plural = "lost work"
        indexes = [models.Index(fields=["preempted_at"], name="lostwork_preempted_at")]
        constraints = [
            models.CheckConstraint(condition=Q(lost_s__gte=0), name="lostwork_seconds_non_negative"),
            models.CheckConstraint(condition=Q(gpu_hours__gte=0), name="lostwork_gpu_hours_non_negative"),
            models.CheckConstraint(condition=Q(cost__gte=0), name="lostwork_cost_non_negative"),
        ]

    def __str__(self) -> str:
        return f"{self.team.slug} lost {self.gpu_hours} GPU-h at {self.preempted_at:%Y-%m-%d %H:%M}"


class WaitCause(models.TextChoices):
    """Why production waited at a cycle although production preempts lower work (docs/billing.md, Procurement
    advisor): the stored values are the simulator's causes of unavoidable wait (``bench causes``)."""

    HELD = "held", "capacity: production's demand above what production could hold"
    BURST = "burst", "burst limit: the team's burst limit refused it"


# The advisor reads at most this many days back (billing.procurement.MAX_HISTORY_DAYS); older rows are deleted.
PRODUCTION_WAIT_KEPT_DAYS = 366


class ProductionWait(models.Model):
    """The GPU-equivalents of production that waited at one scheduling cycle, per GPU class and cause (and, for
    ``burst``, team), for ``seconds`` (the cycle's length). For ``held``, also how far production's demand on the
    class (what it holds and what waited) exceeded the class's capacity that takes new work (``short_units``); for
    ``burst``, the limit that refused it (``scope``: its class, or ``any``) and the team's production under that
    limit, held plus waited (``need_units``): the limit that would have let it run.

    Decided by the cycle (scheduler/loop/production_wait.py) and written by its record step in its transaction
    through ``billing.services.production_waits.production_wait_record``, one row per class and cause that had
    production waiting, none in a cycle where no production waits: the procurement advisor
    reads a period's rows (``billing.procurement.production_wait_advise``). A cycle that writes rows deletes those
    older than ``PRODUCTION_WAIT_KEPT_DAYS``, so a year of constant waiting is the most the table holds.
    """

    at = models.DateTimeField(help_text="The cycle's instant.")
    gpu_class = models.CharField(max_length=64, help_text="The GPU class production waited for.")
    cause = models.CharField(max_length=8, choices=WaitCause.choices)
    team = models.ForeignKey(
        "teams.Team",
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="production_waits",
        help_text="The team whose burst limit refused it (burst only).",
    )
    gpu_units = models.PositiveBigIntegerField(help_text="What waited, in 1/7000 GPU.")
    short_units = models.PositiveBigIntegerField(
        default=0,
        help_text="Held only: production's demand above the class's capacity, in 1/7000 GPU (0: it had room).",
    )
    scope = models.CharField(
        max_length=64, blank=True, help_text="Burst only: the class of the limit that refused it, or any (overall)."
    )
    need_units = models.PositiveBigIntegerField(
        default=0,
        help_text="Burst only: the team's production under that limit (held plus waited), in 1/7000 GPU.",
    )
    jobs = models.PositiveIntegerField(help_text="Production jobs that waited.")
    seconds = models.FloatField(validators=[MinValueValidator(0)], help_text="The cycle's length.")

    class Meta:
        ordering = ["-at", "gpu_class", "cause"]
        indexes = [models.Index(fields=["at"], name="productionwait_at")]
        constraints = [
            models.CheckConstraint(condition=Q(seconds__gt=0), name="productionwait_seconds_positive"),
            models.CheckConstraint(
                condition=Q(cause=WaitCause.HELD, team__isnull=True) | Q(cause=WaitCause.BURST, team__isnull=False),
                name="productionwait_team_iff_burst",
                violation_error_message="A burst wait names its team; a held wait names none.",
            ),
            models.CheckConstraint(
                condition=Q(cause=WaitCause.HELD, scope="", need_units=0)
                | Q(cause=WaitCause.BURST, short_units=0) & ~Q(scope=""),
                name="productionwait_fields_of_its_cause",
                violation_error_message=(
                    "A held wait has a shortfall and no scope or need; a burst wait names the scope of its limit "
                    "and had room (no shortfall)."
                ),
            ),
        ]

    def __str__(self) -> str:
        who = f" ({self.team.slug})" if self.team is not None else ""
        return (
            f"{self.gpus:g} {self.gpu_class} GPUs of production waited ({self.cause}{who}) at {self.at:%Y-%m-%d %H:%M}"
        )

    @property
    def gpus(self) -> float:
        return self.gpu_units / UNITS_PER_GPU

    @property
    def short_gpus(self) -> float:
        return self.short_units / UNITS_PER_GPU

    @property
    def need_gpus(self) -> float:
        return self.need_units / UNITS_PER_GPU


class GpuPrice(models.Model):
    """The price of one GPU-hour of ``gpu_model`` bought in ``tier``, from ``effective_from`` (00:00 UTC) on.

    The price in force at an instant is the row with the latest ``effective_from`` on or before it. Add a row
    to change a price; closed ledger entries keep the price they were closed with.
    """

    gpu_model = models.ForeignKey("scheduler.GpuModel", on_delete=models.PROTECT, related_name="prices")
    tier = models.CharField(max_length=16, choices=choices_of(CapacityTier))
    price_per_gpu_hour = models.DecimalField(
        max_digits=10, decimal_places=4, validators=[MinValueValidator(Decimal(0))]
    )
    effective_from = models.DateField(help_text="In force from 00:00 UTC of this day.")
    source = models.CharField(max_length=300, blank=True, help_text="Where the figure comes from, and its date.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["gpu_model__name", "tier", "-effective_from"]
        verbose_name = "GPU price"
        constraints = [
            models.UniqueConstraint(fields=["gpu_model", "tier", "effective_from"], name="gpuprice_unique_effective"),
            models.CheckConstraint(condition=Q(price_per_gpu_hour__gte=0), name="gpuprice_non_negative"),
            models.CheckConstraint(condition=Q(tier__in=[v.value for v in CapacityTier]), name="gpuprice_tier_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.gpu_model} {self.tier} ${self.price_per_gpu_hour}/GPU-h from {self.effective_from}"


class ReservedCommitment(models.Model):
    """Reserved capacity bought for a term: paid every month of the term whether the GPUs are used or not."""

    name = models.CharField(max_length=100, unique=True)
    gpu_model = models.ForeignKey("scheduler.GpuModel", on_delete=models.PROTECT, related_name="commitments")
    gpu_count = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    term_months = models.PositiveSmallIntegerField(validators=[MinValueValidator(1), MaxValueValidator(120)])
    monthly_price = models.DecimalField(
        max_digits=12, decimal_places=2, validators=[MinValueValidator(Decimal(0))], help_text="USD per month."
    )
    start = models.DateField(help_text="First day of the term (00:00 UTC).")
    note = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["start", "name"]
        verbose_name = "reserved commitment"
        constraints = [
            models.CheckConstraint(condition=Q(gpu_count__gte=1), name="commitment_gpu_count_positive"),
            models.CheckConstraint(condition=Q(term_months__gte=1), name="commitment_term_positive"),
            models.CheckConstraint(condition=Q(monthly_price__gte=0), name="commitment_price_non_negative"),
        ]

    def __str__(self) -> str:
        return f"{self.name}: {self.gpu_count} × {self.gpu_model} for {self.term_months} months from {self.start}"

    @property
    def end(self) -> date:
        """The first day after the term."""
        months = self.start.month - 1 + self.term_months
        year = self.start.year + months // 12
        month = months % 12 + 1
        # A term starting on the 31st ends on the last day of a shorter month: clamp the day.
        for day in (self.start.day, 30, 29, 28):
            try:
                return date(year, month, day)
            except ValueError:
                continue
        raise AssertionError("unreachable: every month has a 28th")
