"""Admin for jobs and their audit: events and allocations are written by services and the scheduler only.

Jobs are not added here: ``jobs.services.job_submit`` is the one way in, because it records the ``submitted``
event and checks the request; a job added by hand would have no history.
"""

from __future__ import annotations

from django.contrib import admin
from django.db.models import Model, QuerySet
from django.http import HttpRequest

from jobs.models import Allocation, Job, JobEvent


class ViewOnlyMixin:
    """Rows that only code writes: an admin may look, never add, change or delete.

    Refusing change also means the admin never calls ``save()`` on them, which for ``JobEvent`` would raise.
    """

    def has_add_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False


class JobEventInline(ViewOnlyMixin, admin.TabularInline):
    model = JobEvent
    fields = ("at", "type", "actor", "details")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True

    def get_queryset(self, request: HttpRequest) -> QuerySet[JobEvent]:
        return super().get_queryset(request).select_related("actor")


# What an allocation row shows, on the job page and in the allocation list alike.
ALLOCATION_COLUMNS = (
    "replica",
    "node",
    "gpu_index",
    "mig_profile",
    "mig_start",
    "tier",
    "price_per_gpu_hour",
    "started_at",
    "ended_at",
    "end_reason",
)


class AllocationInline(ViewOnlyMixin, admin.TabularInline):
    model = Allocation
    fields = ALLOCATION_COLUMNS
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True

    def get_queryset(self, request: HttpRequest) -> QuerySet[Allocation]:
        return super().get_queryset(request).select_related("node")


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ("name", "team", "project", "kind", "request_summary", "priority", "rank", "state", "submitted_at")
    list_filter = ("state", "kind", "priority", "tier", "team")
    search_fields = ("name", "team__slug", "submitted_by__username")
    ordering = ("-submitted_at", "-id")
    date_hierarchy = "submitted_at"
    # Project.__str__ reads its team's slug.
    list_select_related = ("team", "project__team")
    autocomplete_fields = ("project", "submitted_by")
    # The scheduler owns these; an admin edits what was asked for, never what happened.
    readonly_fields = ("state", "state_reason", "submitted_at", "started_at", "finished_at")
    fieldsets = (
        (None, {"fields": ("team", "project", "submitted_by", "name", "kind", "image", "command", "env")}),
        (
            "Request (per replica: exactly one of gpus, MIG profile, memory or model)",
            {"fields": ("gpus", "mig_profile", "memory_gib", "model", "replicas", "gpu_model")},
        ),
        (
            "Scheduling",
            {"fields": ("priority", "rank", "preemptible", "tier", "checkpoint_interval_s", "duration_s")},
        ),
        ("State (set by the scheduler)", {"fields": readonly_fields}),
    )
    inlines = (JobEventInline, AllocationInline)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.display(description="request")
    def request_summary(self, obj: Job) -> str:
        return obj.request_display


@admin.register(JobEvent)
class JobEventAdmin(ViewOnlyMixin, admin.ModelAdmin):
    list_display = ("at", "job", "type", "actor")
    list_filter = ("type",)
    search_fields = ("job__name", "job__team__slug", "actor__username")
    ordering = ("-at", "-id")
    date_hierarchy = "at"
    # Job.__str__ reads its team's slug.
    list_select_related = ("job__team", "actor")
    raw_id_fields = ("job", "actor")


@admin.register(Allocation)
class AllocationAdmin(ViewOnlyMixin, admin.ModelAdmin):
    list_display = ("job", *ALLOCATION_COLUMNS)
    list_filter = ("tier", ("ended_at", admin.EmptyFieldListFilter), "node__gpu_model", "job__team")
    search_fields = ("job__name", "job__team__slug", "node__name")
    ordering = ("-started_at", "id")
    date_hierarchy = "started_at"
    list_select_related = ("job__team", "node")
    raw_id_fields = ("job", "node")
