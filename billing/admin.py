"""Admin for billing: the ledger and lost work are view only (the ledger close writes them); finance keeps the
price catalog and the reserved commitments here."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from billing.models import GpuPrice, LedgerEntry, LostWork, ProductionWait, ReservedCommitment


class _ViewOnly(admin.ModelAdmin):
    """Rows only the ledger close writes: reports must match what it wrote, so nobody edits them here."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object | None = None) -> bool:
        return False


@admin.register(LedgerEntry)
class LedgerEntryAdmin(_ViewOnly):
    list_display = (
        "interval_start",
        "interval_end",
        "team",
        "project",
        "allocation",
        "gpu_model",
        "tier",
        "gpu_hours",
        "price_per_gpu_hour",
        "price_source",
        "cost",
        "borrowed",
    )
    list_filter = ("tier", "borrowed", "price_source", "gpu_model", "team")
    search_fields = ("team__slug", "project__code", "allocation__job__name")
    ordering = ("-interval_start", "id")
    date_hierarchy = "interval_start"
    # Project.__str__ reads its team's slug and Allocation.__str__ its node's name.
    list_select_related = ("team", "project__team", "allocation__node")
    raw_id_fields = ("allocation", "job")


@admin.register(LostWork)
class LostWorkAdmin(_ViewOnly):
    list_display = ("preempted_at", "team", "job", "gpu_model", "tier", "reason", "lost_s", "gpu_hours", "cost")
    list_filter = ("tier", "reason", "team")
    date_hierarchy = "preempted_at"
    list_select_related = ("team", "job__team")
    raw_id_fields = ("allocation", "job")


@admin.register(ProductionWait)
class ProductionWaitAdmin(_ViewOnly):
    """What production waited for, cycle by cycle (the scheduling cycle writes it; the advisor reads it)."""

    list_display = ("at", "gpu_class", "cause", "team", "gpus", "short_gpus", "scope", "need_gpus", "jobs", "seconds")
    list_filter = ("cause", "gpu_class", "team")
    date_hierarchy = "at"
    list_select_related = ("team",)


@admin.register(GpuPrice)
class GpuPriceAdmin(admin.ModelAdmin):
    """Prices per GPU-hour. To change a price, add a row with a later effective day: closed ledger entries
    keep the price they were closed with, and the reports of past months stay as they were."""

    list_display = ("gpu_model", "tier", "price_per_gpu_hour", "effective_from", "source")
    list_filter = ("tier", "gpu_model")
    ordering = ("gpu_model__name", "tier", "-effective_from")
    search_fields = ("gpu_model__name", "source")


@admin.register(ReservedCommitment)
class ReservedCommitmentAdmin(admin.ModelAdmin):
    list_display = ("name", "gpu_model", "gpu_count", "term_months", "monthly_price", "start", "end")
    list_filter = ("gpu_model",)
    ordering = ("start", "name")

    @admin.display(description="ends")
    def end(self, obj: ReservedCommitment) -> object:
        return obj.end
