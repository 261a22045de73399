"""Admin for the fleet inventory: GPU models, nodes (with cordon / ready actions) and their GPUs."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

from django.contrib import admin, messages
from django.db.models import Count, QuerySet
from django.http import HttpRequest
from django.utils import timezone

from scheduler.core.vocabulary import NodeState
from scheduler.models import Gpu, GpuModel, Node

if TYPE_CHECKING:  # the stubs' helper package, not a runtime dependency
    from django_stubs_ext import WithAnnotations


class _NodeCount(TypedDict):
    node_count: int


@admin.register(GpuModel)
class GpuModelAdmin(admin.ModelAdmin):
    list_display = ("name", "gpu_class", "memory_mib", "mig_capable", "node_count")
    list_filter = ("gpu_class", "mig_capable")
    search_fields = ("name",)
    ordering = ("name",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[GpuModel]:
        # One aggregate in the changelist query instead of a count per row.
        return super().get_queryset(request).annotate(node_count=Count("nodes"))

    @admin.display(description="nodes", ordering="node_count")
    def node_count(self, obj: WithAnnotations[GpuModel, _NodeCount]) -> int:
        return obj.node_count


class GpuInline(admin.TabularInline):
    model = Gpu
    fields = ("index", "mig_layout")
    extra = 0


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = (
        "name",
        "gpu_model",
        "gpu_count",
        "interconnect",
        "leaf_switch",
        "spine",
        "tier",
        "price_per_gpu_hour",
        "zone",
        "fabric",
        "fabric_devices",
        "placement_group",
        "state",
    )
    list_filter = ("tier", "state", "interconnect", "fabric", "gpu_model", "leaf_switch", "placement_group")
    search_fields = ("name", "leaf_switch", "spine", "zone", "placement_group")
    ordering = ("name",)
    list_select_related = ("gpu_model",)
    readonly_fields = ("created_at", "updated_at")
    inlines = (GpuInline,)
    actions = ("cordon_nodes", "mark_nodes_ready")

    def get_inlines(self, request: HttpRequest, obj: Node | None) -> tuple[type[admin.TabularInline], ...]:
        # Gpu.clean() skips validation while its node is unsaved (node_id is None), so GPU rows posted with a
        # new node would be stored unchecked; they are added once the node exists.
        return self.inlines if obj is not None else ()

    # queryset.update() skips auto_now, so both actions stamp updated_at themselves.
    @admin.action(description="Cordon selected nodes", permissions=["change"])
    def cordon_nodes(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        count = queryset.update(state=NodeState.CORDONED, updated_at=timezone.now())
        self.message_user(request, f"Cordoned {count} node(s): nothing new is placed on them.", messages.SUCCESS)

    @admin.action(description="Mark ready", permissions=["change"])
    def mark_nodes_ready(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        count = queryset.update(state=NodeState.READY, updated_at=timezone.now())
        self.message_user(request, f"Marked {count} node(s) ready for placement.", messages.SUCCESS)


@admin.register(Gpu)
class GpuAdmin(admin.ModelAdmin):
    """Gpu.clean() checks the index against the node and the MIG layout against the catalog."""

    list_display = ("__str__", "node", "index", "gpu_model", "mig_layout")
    list_filter = ("node__gpu_model", "node__tier", "node__state")
    search_fields = ("node__name",)
    ordering = ("node__name", "index")
    # __str__ reads node.name and the model column node.gpu_model.name.
    list_select_related = ("node__gpu_model",)
    autocomplete_fields = ("node",)

    @admin.display(description="GPU model", ordering="node__gpu_model__name")
    def gpu_model(self, obj: Gpu) -> str:
        return obj.node.gpu_model.name
