"""Admin for the fleet inventory: GPU models, nodes (with cordon / drain / ready actions) and their GPUs.

A node's GPU count is changed through :func:`scheduler.gpu_count.node_set_gpu_count`, so the GPU rows follow the
count; the form first says which GPUs the change creates or removes and takes it only with a ticked confirmation,
and refuses to remove a GPU a live allocation holds.

A GPU's MIG layout is written in NVIDIA's notation (``3g.40gb@0,3g.40gb@4``; empty: MIG off) and changed through
:func:`scheduler.mig_layouts.gpu_set_mig_layout`, on the node page and the GPU page alike: checked against the
catalog, refused while a live allocation holds the GPU, and recorded in the audit trail.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, TypedDict

from django import forms
from django.contrib import admin, messages
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Count, IntegerField, OuterRef, Prefetch, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.forms.formsets import DELETION_FIELD_NAME
from django.forms.models import BaseInlineFormSet
from django.http import HttpRequest
from django.utils.html import format_html_join
from django.utils.safestring import mark_safe

from jobs.models import Allocation
from scheduler.core.gpus.catalog import LayoutError
from scheduler.core.model.vocabulary import NodeState
from scheduler.core.sizing.layouts import parse_layout
from scheduler.errors import InventoryError
from scheduler.gpu_count import check_shrink, gpu_count_change_summary, node_set_gpu_count
from scheduler.mig_layouts import (
    MIG_OFF,
    check_unheld,
    gpu_set_mig_layout,
    layout_text,
    node_layouts_text,
    stored_layout,
)
from scheduler.models import Gpu, GpuModel, Node
from scheduler.node_states import node_cordon, node_drain, node_mark_ready

if TYPE_CHECKING:  # the stubs' helper package, not a runtime dependency
    from django_stubs_ext import WithAnnotations

    # Django's form classes are generic only in the stubs.
    _GpuRowsBase = BaseInlineFormSet[Gpu, Node, forms.ModelForm[Gpu]]
    _NodeFormBase = forms.ModelForm[Node]
    _GpuFormBase = forms.ModelForm[Gpu]
else:
    _GpuRowsBase = BaseInlineFormSet
    _NodeFormBase = forms.ModelForm
    _GpuFormBase = forms.ModelForm


class _NodeCount(TypedDict):
    node_count: int


class _GpusUsed(TypedDict):
    gpus_used: int


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


class MigLayoutField(forms.Field):
    """A GPU's MIG layout as NVIDIA writes it, ``3g.40gb@0,3g.40gb@4``; empty is MIG off (stored ``[]``).

    JSON pairs (``[["3g.40gb", 0]]``, what this field showed before and ``cluster sync --json`` prints) are read
    too. Only the syntax is checked here; whether the layout fits the GPU is :class:`GpuForm`'s question."""

    widget = forms.TextInput(attrs={"size": 48, "placeholder": f"empty: {MIG_OFF}"})

    def __init__(self, **kwargs: Any) -> None:
        # The model field's JSON encoder/decoder arguments mean nothing to a text field.
        for key in ("encoder", "decoder", "max_length"):
            kwargs.pop(key, None)
        kwargs["required"] = False
        # The model field's callable default would render a hidden copy of the initial value and judge "changed"
        # against what the browser sends back; judged against the row as loaded, a change cannot skip the service.
        kwargs["show_hidden_initial"] = False
        kwargs["help_text"] = kwargs.get("help_text") or (
            f"PROFILE@START items, e.g. 3g.40gb@0,3g.40gb@4 (START: first memory slice); empty: {MIG_OFF}."
        )
        super().__init__(**kwargs)

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, list):  # the stored layout; a string is what the admin typed, shown back as typed
            return layout_text(value) if value else ""
        return value

    def to_python(self, value: Any) -> list[list[object]]:
        if isinstance(value, list):
            return value
        text = "" if value in self.empty_values else str(value).strip()
        if not text:
            return []
        if text.startswith("["):
            try:
                pairs = json.loads(text)
            except ValueError:
                raise ValidationError("Not valid JSON: write the layout as PROFILE@START items instead.") from None
            if not isinstance(pairs, list):
                raise ValidationError("Write the layout as PROFILE@START items, e.g. 3g.40gb@0,3g.40gb@4.")
            return pairs
        try:
            return [[profile, start] for profile, start in parse_layout(text)]
        except LayoutError as exc:
            raise ValidationError(f"{exc}; separate items with commas, leave empty for {MIG_OFF}.") from None

    def has_changed(self, initial: Any, data: Any) -> bool:
        # Compared as layouts: "3g.40gb@4, 3g.40gb@0" is the stored [["3g.40gb", 0], ["3g.40gb", 4]].
        try:
            wanted = self.to_python(data)
        except ValidationError:
            return True
        return _sorted_pairs(initial or []) != _sorted_pairs(wanted)


def _sorted_pairs(layout: Any) -> list[Any]:
    try:
        return sorted((list(pair) for pair in layout), key=repr)
    except TypeError:
        return [layout]


class GpuForm(_GpuFormBase):
    """A GPU row: its layout checked against the node's GPU model, and a change refused while a live allocation
    holds the GPU (the message names the job). The save goes through ``gpu_set_mig_layout`` (see
    :func:`_gpu_layouts_save`)."""

    class Meta:
        model = Gpu
        fields = ("index", "mig_layout")
        field_classes = {"mig_layout": MigLayoutField}

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        layout = data.get("mig_layout")
        node = data.get("node") or (self.instance.node if self.instance.node_id is not None else None)
        if layout is None or node is None:
            return data
        try:
            data["mig_layout"] = stored_layout(node.gpu_model.name, layout)
        except InventoryError as error:
            self.add_error("mig_layout", str(error))
            return data
        if self.instance.pk is not None and "mig_layout" in self.changed_data:
            try:
                check_unheld(self.instance)  # still the row as stored: the form's values are applied after clean()
            except InventoryError as error:
                self.add_error("mig_layout", str(error))
        return data


def _gpu_layouts_hold_back(forms_: list[forms.ModelForm[Gpu]]) -> dict[int, list[list[object]]]:
    """Keep the stored layout on each changed GPU row, so the form's own save leaves ``mig_layout`` alone; return
    the wanted layouts by GPU id for :func:`_gpu_layouts_save`."""
    wanted: dict[int, list[list[object]]] = {}
    for form in forms_:
        if form.instance.pk is not None and "mig_layout" in form.changed_data:
            wanted[form.instance.pk] = form.cleaned_data["mig_layout"]
            form.instance.mig_layout = form.initial["mig_layout"]
    return wanted


def _gpu_layouts_save(admin_: admin.ModelAdmin, request: HttpRequest, wanted: dict[int, list[list[object]]]) -> None:
    """Write each wanted layout through the service (validated, refused while held, audited)."""
    for gpu in Gpu.objects.filter(pk__in=wanted).select_related("node").order_by("index"):
        try:
            gpu_set_mig_layout(gpu=gpu, layout=wanted[gpu.pk])
        except InventoryError as error:  # a cycle bound work on the GPU since the form was checked
            admin_.message_user(request, f"MIG layout of {gpu} not changed: {error}", messages.ERROR)


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
    form = GpuForm
    formset = GpuRowsFormSet
    fields = ("index", "mig_layout")
    extra = 0


# The states an admin sets; ``gone`` is the cluster sync's to say (scheduler.node_states).
_ADMIN_STATES = [(s.value, s.value) for s in (NodeState.READY, NodeState.CORDONED, NodeState.DRAINING)]


class NodeForm(_NodeFormBase):
    state_note = forms.CharField(
        required=False,
        max_length=150,
        label="Reason",
        help_text="Why you cordon or drain the node (kept with its state and in the audit trail).",
    )
    confirm_gpu_count = forms.BooleanField(
        required=False,
        label="Confirm the GPU count change",
        help_text="Changing the GPU count creates or removes GPU rows; the form says which before it applies.",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        state = self.fields.get("state")
        if isinstance(state, forms.ChoiceField):
            current = self.instance.state if self.instance.pk is not None else NodeState.READY
            extra = [] if current in dict(_ADMIN_STATES) else [(current, f"{current} (set by the cluster)")]
            state.choices = [*extra, *_ADMIN_STATES]
            state.help_text = (
                "ready: takes new work. cordoned: takes no new work, running jobs stay. draining: takes no new "
                "work, and its jobs checkpoint, stop and are requeued at the head of their priority. A cordon or "
                "drain holds until an admin marks the node ready (docs/node-states.md)."
            )

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        state = data.get("state")
        changed = state is not None and self.instance.pk is not None and state != self.instance.state
        if changed and state not in dict(_ADMIN_STATES):
            self.add_error("state", f"{state} is set by the cluster sync; choose ready, cordoned or draining.")
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
    # What an admin scans for, narrow enough for 1,400 px beside the admin's sidebar and filters: the zone and the
    # topology (interconnect, leaf, spine, fabric, placement group) are in the filters, they and the price on the
    # node's page.
    list_display = ("name", "state", "gpu_model", "tier", "gpu_use", "mig_layouts")
    list_filter = (
        "tier",
        "state",
        "interconnect",
        "fabric",
        "gpu_model",
        "zone",
        "leaf_switch",
        "spine",
        "placement_group",
    )
    search_fields = ("name", "leaf_switch", "spine", "zone", "placement_group")
    ordering = ("name",)
    list_select_related = ("gpu_model",)
    # An autoscaled node's pool, request, idle time and release are the loop's to write (scheduler.loop.provisioning).
    readonly_fields = (
        "state_source",
        "state_reason",
        "state_changed_at",
        "pool",
        "node_request",
        "idle_since",
        "released_at",
        "created_at",
        "updated_at",
    )
    inlines = (GpuInline,)
    actions = ("cordon_nodes", "drain_nodes", "mark_nodes_ready")
    form = NodeForm

    def get_queryset(self, request: HttpRequest) -> QuerySet[Node]:
        # GPUs in use and the layouts in the changelist's own query plus one for all GPU rows, not one per node.
        used = (
            Allocation.objects.filter(node=OuterRef("pk"), ended_at__isnull=True)
            .order_by()
            .values("node")
            .annotate(gpus=Count("gpu_index", distinct=True))
            .values("gpus")
        )
        return (
            super()
            .get_queryset(request)
            .annotate(gpus_used=Coalesce(Subquery(used, output_field=IntegerField()), 0))
            .prefetch_related(Prefetch("gpus", queryset=Gpu.objects.order_by("index")))
        )

    @admin.display(description="GPUs free / used", ordering="gpus_used")
    def gpu_use(self, obj: WithAnnotations[Node, _GpusUsed]) -> str:
        # A GPU is used when a live allocation holds it whole or holds one of its MIG instances.
        return f"{obj.gpu_count - obj.gpus_used} / {obj.gpus_used} of {obj.gpu_count}"

    @admin.display(description="MIG layouts")
    def mig_layouts(self, obj: Node) -> str:
        layouts = {gpu.index: gpu.mig_layout for gpu in obj.gpus.all()}
        lines = node_layouts_text(layouts, obj.gpu_count)
        # A line may break after each instance (<wbr>), so a node of eight different layouts stays narrow.
        return format_html_join(
            "",
            "<div>{}</div>",
            ((format_html_join(mark_safe(",<wbr>"), "{}", ((p,) for p in line.split(","))),) for line in lines),
        )

    def get_fields(self, request: HttpRequest, obj: Node | None = None) -> list[Any]:
        own = ("confirm_gpu_count", "state_note")
        fields: list[Any] = [f for f in super().get_fields(request, obj) if f not in own]
        if obj is None:
            return [f for f in fields if f not in ("state_source", "state_reason", "state_changed_at")]
        # The reason sits right below the state it explains, the confirmation below the count it confirms.
        fields.remove("state")
        at = fields.index("state_source")
        fields = [*fields[:at], "state", "state_note", *fields[at:]]
        at = fields.index("gpu_count") + 1
        return [*fields[:at], "confirm_gpu_count", *fields[at:]]

    def save_model(self, request: HttpRequest, obj: Node, form: forms.ModelForm[Node], change: bool) -> None:
        wanted = obj.gpu_count
        recount = not change or "gpu_count" in form.changed_data
        if change and recount:
            obj.gpu_count = form.initial["gpu_count"]  # the service changes the count and the GPU rows together
        wanted_state = NodeState(obj.state)
        restate = change and "state" in form.changed_data
        if restate:
            obj.state = form.initial["state"]  # a state change goes through scheduler.node_states, audited
        super().save_model(request, obj, form, change)
        if restate:
            note = form.cleaned_data.get("state_note", "")
            _node_set_state(obj, wanted_state, request, note)
            self.message_user(request, _STATE_DONE[wanted_state].format(count=1), messages.SUCCESS)
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

    def save_formset(self, request: HttpRequest, form: forms.ModelForm[Node], formset: Any, change: bool) -> None:
        if formset.model is not Gpu:
            super().save_formset(request, form, formset, change)
            return
        # Rows the GPU count removes are not relaid out: they are deleted.
        kept = [f for f in formset.forms if f.has_changed() and not formset._should_delete_form(f)]
        wanted = _gpu_layouts_hold_back(kept)
        super().save_formset(request, form, formset, change)
        _gpu_layouts_save(self, request, wanted)

    def get_inlines(self, request: HttpRequest, obj: Node | None) -> tuple[type[admin.TabularInline], ...]:
        # Gpu.clean() skips validation while its node is unsaved (node_id is None), so GPU rows posted with a
        # new node would be stored unchecked; they are added once the node exists.
        return self.inlines if obj is not None else ()

    # Node by node through scheduler.node_states, not queryset.update(): each change is an audit row naming the
    # admin (audit/, docs/audit.md).
    @admin.action(description="Cordon selected nodes", permissions=["change"])
    def cordon_nodes(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        self._set_states(request, queryset, NodeState.CORDONED)

    @admin.action(description="Drain selected nodes (jobs checkpoint and are requeued)", permissions=["change"])
    def drain_nodes(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        self._set_states(request, queryset, NodeState.DRAINING)

    @admin.action(description="Mark ready", permissions=["change"])
    def mark_nodes_ready(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        self._set_states(request, queryset, NodeState.READY)

    def _set_states(self, request: HttpRequest, queryset: QuerySet[Node], state: NodeState) -> None:
        with transaction.atomic():
            changed = sum(_node_set_state(node, state, request, "") for node in queryset.order_by("name"))
        self.message_user(request, _STATE_DONE[state].format(count=changed), messages.SUCCESS)


_STATE_DONE = {
    NodeState.CORDONED: "Cordoned {count} node(s): nothing new is placed on them; running jobs stay.",
    NodeState.DRAINING: (
        "Draining {count} node(s): nothing new is placed on them, and the next scheduling cycle asks their jobs to "
        "checkpoint and stop, then requeues them. They stay drained until you mark them ready."
    ),
    NodeState.READY: "Marked {count} node(s) ready for placement.",
}


def _node_set_state(node: Node, state: NodeState, request: HttpRequest, note: str) -> bool:
    actor = request.user if isinstance(request.user, User) else None
    if state == NodeState.DRAINING:
        return node_drain(node=node, actor=actor, reason=note)
    if state == NodeState.CORDONED:
        return node_cordon(node=node, actor=actor, reason=note)
    return node_mark_ready(node=node, actor=actor)


@admin.register(Gpu)
class GpuAdmin(admin.ModelAdmin):
    """Gpu.clean() checks the index against the node and :class:`GpuForm` the MIG layout; a reconfiguration is saved
    through ``gpu_set_mig_layout``."""

    form = GpuForm
    fields = ("node", "index", "mig_layout")
    list_display = ("__str__", "node", "index", "gpu_model", "layout")
    list_filter = ("node__gpu_model", "node__tier", "node__state")
    search_fields = ("node__name",)
    ordering = ("node__name", "index")
    # __str__ reads node.name and the model column node.gpu_model.name.
    list_select_related = ("node__gpu_model",)
    autocomplete_fields = ("node",)

    @admin.display(description="GPU model", ordering="node__gpu_model__name")
    def gpu_model(self, obj: Gpu) -> str:
        return obj.node.gpu_model.name

    @admin.display(description="MIG layout")
    def layout(self, obj: Gpu) -> str:
        return layout_text(obj.mig_layout)

    def save_model(self, request: HttpRequest, obj: Gpu, form: forms.ModelForm[Gpu], change: bool) -> None:
        wanted = _gpu_layouts_hold_back([form]) if change else {}
        super().save_model(request, obj, form, change)
        _gpu_layouts_save(self, request, wanted)


# Autoscaled pools, node requests and the on-demand budget: their admin lives beside their models.
import scheduler.autoscaled_admin  # noqa: E402, F401
