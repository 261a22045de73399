"""Admin for jobs and their audit: events and allocations are written by services and the scheduler only.

Jobs are not added here: ``jobs.services.job_submit`` is the one way in, because it records the ``submitted``
event and checks the request; a job added by hand would have no history. Changes go through the same services
as the portal's (priority, rank, cancel, requeue), so each leaves a job event with the admin as its actor.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.auth.models import User
from django.db.models import Model, QuerySet
from django.forms import ModelForm
from django.http import HttpRequest

from jobs.errors import JobsError
from jobs.models import Allocation, Job, JobEvent
from jobs.services import job_cancel_bulk, job_requeue_bulk, job_set_priority, job_set_rank
from jobs.services.positions import positions_lock
from scheduler.core.model.vocabulary import JobState
from teams.grants import grant_refusal

# What was asked for: once a job runs, its allocations were sized from these, so they stay as they were.
REQUEST_FIELDS = (
    "team",
    "kind",
    "gpus",
    "mig_profile",
    "memory_gib",
    "model",
    "replicas",
    "gpu_model",
    "image",
    "command",
)
# Changed through the services (an event each), and only while the job is live.
SERVICE_FIELDS = ("priority", "rank")


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
    "generation",
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


if TYPE_CHECKING:  # Django's form classes are generic only in the stubs.
    _JobFormBase = ModelForm[Job]
else:
    _JobFormBase = ModelForm


class JobAdminForm(_JobFormBase):
    """A job's page in the admin. The priority goes through ``job_set_priority``, which checks the team's grant;
    a change of kind or team keeps the priority it has, so the grant is checked here for the job it makes."""

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        if self.instance.pk is None or not {"kind", "team"} & set(self.changed_data):
            return data
        team, kind = data.get("team"), data.get("kind")
        priority = data.get("priority", self.instance.priority)
        if team is not None and kind is not None:
            refusal = grant_refusal(team, priority=priority, kind=kind)
            if refusal is not None:
                self.add_error("kind" if "kind" in self.changed_data else "team", refusal)
        return data


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    form = JobAdminForm
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
            {
                "fields": (
                    "priority",
                    "rank",
                    "preemptible",
                    "consolidate",
                    "tier",
                    "checkpoint_interval_s",
                    "duration_s",
                )
            },
        ),
        ("State (set by the scheduler)", {"fields": readonly_fields}),
    )
    inlines = (JobEventInline, AllocationInline)
    actions = ("cancel_jobs", "requeue_jobs")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def get_readonly_fields(self, request: HttpRequest, obj: Job | None = None) -> tuple[str, ...]:
        fields = tuple(self.readonly_fields)
        if obj is None or obj.state == JobState.PENDING:
            return fields
        # Running: the devices were chosen for this request. Ended: the job is history (and the services refuse
        # to change the priority or rank of an ended job).
        extra = REQUEST_FIELDS if obj.state == JobState.RUNNING else (*REQUEST_FIELDS, *SERVICE_FIELDS)
        return fields + extra

    def save_model(self, request: HttpRequest, obj: Job, form: ModelForm[Job], change: bool) -> None:
        if not change:
            super().save_model(request, obj, form, change)
            return
        wanted = {field: getattr(obj, field) for field in SERVICE_FIELDS if field in form.changed_data}
        plain = [field for field in form.changed_data if field not in SERVICE_FIELDS]
        if wanted:
            # The admin saves inside one transaction: the loop's fence before this job's row, in the order the
            # loop's record step and the services take them, so the two never wait on each other.
            positions_lock()
        if plain:
            # Only what the form changed: the loop may have moved the job's state since the page was loaded.
            obj.save(update_fields=plain)
        try:
            if "priority" in wanted:
                job_set_priority(job=obj, priority=wanted["priority"], actor=_user(request))
            if "rank" in wanted:
                job_set_rank(job=obj, rank=wanted["rank"], actor=_user(request))
        except JobsError as error:
            self.message_user(request, f"{obj}: {error}", messages.ERROR)

    @admin.action(description="Cancel selected jobs", permissions=["change"])
    def cancel_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        try:
            jobs = job_cancel_bulk(jobs=list(queryset), actor=_user(request), reason=f"cancelled by {request.user}")
        except JobsError as error:
            self.message_user(request, f"Nothing cancelled: {error}", messages.ERROR)
            return
        self.message_user(request, f"Cancelled {len(jobs)} job(s); the next cycle stops their pods.", messages.SUCCESS)

    @admin.action(description="Requeue selected running jobs", permissions=["change"])
    def requeue_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        try:
            jobs = job_requeue_bulk(jobs=list(queryset), actor=_user(request))
        except JobsError as error:
            self.message_user(request, f"Nothing requeued: {error}", messages.ERROR)
            return
        self.message_user(
            request,
            f"Requeued {len(jobs)} job(s): the next cycle stops their pods and they wait to be placed again.",
            messages.SUCCESS,
        )

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


def _user(request: HttpRequest) -> User:
    user: Any = request.user  # the admin site lets in only signed-in staff
    return user
