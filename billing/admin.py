"""Admin for the GPU-hour ledger: view only, since finance reports must match what the ledger close wrote."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from billing.models import LedgerEntry


@admin.register(LedgerEntry)
class LedgerEntryAdmin(admin.ModelAdmin):
    list_display = (
        "interval_start",
        "interval_end",
        "team",
        "project",
        "allocation",
        "tier",
        "gpu_hours",
        "price_per_gpu_hour",
        "cost",
        "borrowed",
    )
    list_filter = ("tier", "borrowed", "team")
    search_fields = ("team__slug", "project__code", "allocation__job__name")
    ordering = ("-interval_start", "id")
    date_hierarchy = "interval_start"
    # Project.__str__ reads its team's slug and Allocation.__str__ its node's name.
    list_select_related = ("team", "project__team", "allocation__node")
    raw_id_fields = ("allocation",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: LedgerEntry | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: LedgerEntry | None = None) -> bool:
        return False
