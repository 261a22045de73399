"""The GPU-hour ledger: one row per allocation and closed interval."""

from __future__ import annotations

from decimal import Decimal

from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Q

from scheduler.core.vocabulary import CapacityTier, choices_of


class LedgerEntry(models.Model):
    """GPU-hours an allocation accrued in ``[interval_start, interval_end)`` and what they cost.

    ``gpu_hours`` is normalised: a whole GPU counts 1 per hour, a MIG slice its compute slices / 7, a shared
    GPU its fraction. Team and project are copied from the job so reports never join through live rows.
    """

    allocation = models.ForeignKey("jobs.Allocation", on_delete=models.PROTECT, related_name="ledger_entries")
    team = models.ForeignKey("teams.Team", on_delete=models.PROTECT, related_name="ledger_entries")
    project = models.ForeignKey(
        "teams.Project", on_delete=models.PROTECT, null=True, blank=True, related_name="ledger_entries"
    )
    interval_start = models.DateTimeField()
    interval_end = models.DateTimeField()
    gpu_hours = models.DecimalField(max_digits=14, decimal_places=6, validators=[MinValueValidator(Decimal(0))])
    tier = models.CharField(max_length=16, choices=choices_of(CapacityTier))
    price_per_gpu_hour = models.DecimalField(
        max_digits=10, decimal_places=4, validators=[MinValueValidator(Decimal(0))]
    )
    cost = models.DecimalField(max_digits=14, decimal_places=6, validators=[MinValueValidator(Decimal(0))])
    borrowed = models.BooleanField(default=False, help_text="Capacity above the team's guarantee.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-interval_start", "id"]
        verbose_name_plural = "ledger entries"
        indexes = [models.Index(fields=["team", "interval_start"], name="ledger_team_start")]
        constraints = [
            # Exactly once: an allocation's interval is closed one time, whoever closes it.
            models.UniqueConstraint(fields=["allocation", "interval_start"], name="ledger_unique_allocation_interval"),
            models.CheckConstraint(
                condition=Q(interval_end__gt=models.F("interval_start")), name="ledger_interval_positive"
            ),
            models.CheckConstraint(condition=Q(gpu_hours__gte=0), name="ledger_gpu_hours_non_negative"),
            models.CheckConstraint(condition=Q(cost__gte=0), name="ledger_cost_non_negative"),
            models.CheckConstraint(condition=Q(price_per_gpu_hour__gte=0), name="ledger_price_non_negative"),
            models.CheckConstraint(condition=Q(tier__in=[v.value for v in CapacityTier]), name="ledger_tier_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.team.slug} {self.gpu_hours} GPU-h {self.interval_start:%Y-%m-%d %H:%M}"
