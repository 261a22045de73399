"""Admin for the fleet inventory: GPU models, nodes (with cordon / ready actions) and their GPUs.

A node's GPU count is changed through :func:`scheduler.gpu_count.node_set_gpu_count`, so the GPU rows follow the
count; the form first says which GPUs the change creates or removes and takes it only with a ticked confirmation,
and refuses to remove a GPU a live allocation holds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypedDict

from django import forms
from django.contrib import admin, messages
from django.db import transaction
from django.db.models import Count, QuerySet
from django.forms.formsets import DELETION_FIELD_NAME
from django.forms.models import BaseInlineFormSet
from django.http import HttpRequest

from scheduler.core.vocabulary import NodeState
from scheduler.errors import InventoryError
from scheduler.gpu_count import check_shrink, gpu_count_change_summary, node_set_gpu_count
from scheduler.models import Gpu, GpuModel, Node

if TYPE_CHECKING:  # the stubs' helper package, not a runtime dependency
    from django_stubs_ext import WithAnnotations

    # Django's form classes are generic only in the stubs.
    _GpuRowsBase = BaseInlineFormSet[Gpu, Node, forms.ModelForm[Gpu]]
    _NodeFormBase = forms.ModelForm[Node]
else:
    _GpuRowsBase = BaseInlineFormSet
    _NodeFormBase = forms.ModelForm


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


class GpuRowsFormSet(_GpuRowsBase):
    """The node's GPU rows. Rows at or above a lowered GPU count are the GPUs the change removes: they are neither
    validated (their index is now out of range) nor saved."""

    def _should_delete_form(self, form: forms.Form) -> bool:
        index = getattr(form.instance, "index", None) if isinstance(form, forms.ModelForm) else None
        if index is not None and self.instance.gpu_count is not None and index >= self.instance.gpu_count:
            return True
        # Django's own rule: the row's delete box is ticked.
        return bool(form.cleaned_data.get(DELETION_FIELD_NAME, False))


class GpuInline(admin.TabularInline):
    model = Gpu
    formset = GpuRowsFormSet
    fields = ("index", "mig_layout")
    extra = 0


class NodeForm(_NodeFormBase):
    confirm_gpu_count = forms.BooleanField(
        required=False,
        label="Confirm the GPU count change",
        help_text="Changing the GPU count creates or removes GPU rows; the form says which before it applies.",
    )

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        new = data.get("gpu_count")
        old = self.instance.gpu_count if self.instance.pk is not None else None
        if old is None or new is None or new == old:
            return data
        try:
            check_shrink(self.instance, new)
        except InventoryError as error:
            self.add_error("gpu_count", str(error))
            return data
        if not data.get("confirm_gpu_count"):
            summary = gpu_count_change_summary(name=self.instance.name, old=old, new=new)
            self.add_error("gpu_count", f'{summary}. Tick "Confirm the GPU count change" and save again to apply it.')
        return data


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
    form = NodeForm

    def get_fields(self, request: HttpRequest, obj: Node | None = None) -> list[Any]:
        fields: list[Any] = [f for f in super().get_fields(request, obj) if f != "confirm_gpu_count"]
        if obj is None:
            return fields
        # The confirmation sits right below the count it confirms.
        at = fields.index("gpu_count") + 1
        return [*fields[:at], "confirm_gpu_count", *fields[at:]]

    def save_model(self, request: HttpRequest, obj: Node, form: forms.ModelForm[Node], change: bool) -> None:
        wanted = obj.gpu_count
        recount = not change or "gpu_count" in form.changed_data
        if change and recount:
            obj.gpu_count = form.initial["gpu_count"]  # the service changes the count and the GPU rows together
        super().save_model(request, obj, form, change)
        if not recount:
            return
        try:
            node_set_gpu_count(node=obj, gpu_count=wanted)
        except InventoryError as error:  # a live allocation arrived since the form was checked
            self.message_user(request, f"GPU count not changed: {error}", messages.ERROR)
            return
        if change:
            summary = gpu_count_change_summary(name=obj.name, old=form.initial["gpu_count"], new=wanted)
            self.message_user(request, f"{summary}: done.", messages.SUCCESS)

    def get_inlines(self, request: HttpRequest, obj: Node | None) -> tuple[type[admin.TabularInline], ...]:
        # Gpu.clean() skips validation while its node is unsaved (node_id is None), so GPU rows posted with a
        # new node would be stored unchecked; they are added once the node exists.
        return self.inlines if obj is not None else ()

    # Node by node, not queryset.update(): each save is an audit row naming the admin (audit/, docs/audit.md).
    @admin.action(description="Cordon selected nodes", permissions=["change"])
    def cordon_nodes(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        count = _nodes_set_state(queryset, NodeState.CORDONED)
        self.message_user(request, f"Cordoned {count} node(s): nothing new is placed on them.", messages.SUCCESS)

    @admin.action(description="Mark ready", permissions=["change"])
    def mark_nodes_ready(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        count = _nodes_set_state(queryset, NodeState.READY)
        self.message_user(request, f"Marked {count} node(s) ready for placement.", messages.SUCCESS)


def _nodes_set_state(queryset: QuerySet[Node], state: NodeState) -> int:
    with transaction.atomic():
        nodes = list(queryset.select_for_update())
        for node in nodes:
            if node.state != state:
                node.state = state
                node.save(update_fields=["state", "updated_at"])
    return len(nodes)


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
