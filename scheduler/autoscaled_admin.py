"""Admin for autoscaled pools (editable), their node requests (read-only: the loop writes them) and the cluster's
on-demand budget (one row). Imported by :mod:`scheduler.admin`."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from scheduler.autoscaled import AutoscaledPool, NodeRequest, OnDemandBudget


@admin.register(AutoscaledPool)
class AutoscaledPoolAdmin(admin.ModelAdmin):
    """``AutoscaledPool.clean`` says what a pool lacks for its autoscaler (a class, node labels)."""

    list_display = ("name", "autoscaler", "gpu_model", "gpus_per_node", "max_nodes", "price_per_gpu_hour", "enabled")
    list_filter = ("autoscaler", "enabled", "gpu_model")
    search_fields = ("name",)
    ordering = ("name",)
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "name",
                    "enabled",
                    "autoscaler",
                    "provisioning_class",
                    "provisioning_parameters",
                    "node_selector",
                )
            },
        ),
        (
            "The nodes it adds",
            {"fields": ("gpu_model", "gpus_per_node", "interconnect", "fabric", "placement_group", "max_nodes")},
        ),
        ("Price and arrival", {"fields": ("price_per_gpu_hour", "arrival_s")}),
    )


@admin.register(NodeRequest)
class NodeRequestAdmin(admin.ModelAdmin):
    """What the loop asked of the pools and how it went: a record, never edited by hand."""

    list_display = ("id", "job", "pool", "nodes", "state", "requested_at", "arrives_at", "message")
    list_filter = ("state", "pool")
    search_fields = ("job__name", "message")
    ordering = ("-requested_at",)
    list_select_related = ("job__team", "pool")  # a job prints its team

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: NodeRequest | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: NodeRequest | None = None) -> bool:
        return False


@admin.register(OnDemandBudget)
class OnDemandBudgetAdmin(admin.ModelAdmin):
    """One row: the cluster's daily on-demand GPU-hours (each team's own is on the team's page)."""

    list_display = ("__str__", "gpu_hours_per_day", "updated_at")
    fields = ("gpu_hours_per_day",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return not OnDemandBudget.objects.exists()

    def has_delete_permission(self, request: HttpRequest, obj: OnDemandBudget | None = None) -> bool:
        return False
