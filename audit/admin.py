"""The audit trail in the admin: read-only, for platform admins only, filtered by model, actor and date, and
downloadable as CSV with the same filters (``export.csv`` beside the list)."""

from __future__ import annotations

from typing import Any

from auditlog.admin import LogEntryAdmin
from auditlog.filters import ResourceTypeFilter
from auditlog.models import LogEntry
from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponseBadRequest, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.urls import URLPattern, path
from django.utils import timezone

from audit.exports import audit_csv
from audit.selectors import SYSTEM_ACTOR, actor_of, audit_rows, field_changes
from teams.roles import is_platform_admin

NO_PERSON = "-"


class ActorFilter(admin.SimpleListFilter):
    """Who made the change: each person who has, or ``no person`` (the scheduler, an unattended teams apply)."""

    title = "actor"
    parameter_name = "actor"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        people = (
            LogEntry.objects.filter(actor__isnull=False)
            .values_list("actor_id", "actor__username")
            .distinct()
            .order_by("actor__username")
        )
        return [(NO_PERSON, f"no person ({SYSTEM_ACTOR}, teams apply)")] + [(str(pk), name) for pk, name in people]

    def queryset(self, request: HttpRequest, queryset: QuerySet[LogEntry]) -> QuerySet[LogEntry]:
        value = self.value()
        if value is None:
            return queryset
        if value == NO_PERSON:
            return queryset.filter(actor__isnull=True)
        if not value.isdigit():
            raise IncorrectLookupParameters(f"actor={value!r} is not a user id")
        return queryset.filter(actor_id=int(value))


admin.site.unregister(LogEntry)


@admin.register(LogEntry)
class AuditEntryAdmin(LogEntryAdmin):
    """django-auditlog's read-only entry admin, opened to platform admins only: the trail names who changed
    whose quota, which is not every staff member's business (finance keeps prices here, but reads no roles)."""

    list_display = ["created", "resource_url", "action", "before_after", "who"]
    list_filter = ["action", ResourceTypeFilter, ActorFilter, ("timestamp", admin.DateFieldListFilter)]
    change_list_template = "admin/audit/change_list.html"

    def has_module_permission(self, request: HttpRequest) -> bool:
        return is_platform_admin(request.user)

    def has_view_permission(self, request: HttpRequest, obj: object | None = None) -> bool:
        return is_platform_admin(request.user)

    @admin.display(description="Who")
    def who(self, obj: LogEntry) -> str:
        return actor_of(obj)

    @admin.display(description="Before → after")
    def before_after(self, obj: LogEntry) -> str:
        return "; ".join(f"{field}: {before or '—'} → {after or '—'}" for field, before, after in field_changes(obj))

    def get_urls(self) -> list[URLPattern]:
        export = path("export.csv", self.admin_site.admin_view(self.export_view), name="auditlog_logentry_export")
        return [export, *super().get_urls()]

    def export_view(self, request: HttpRequest) -> HttpResponseBase:
        """The list's rows (its filters, search and date drill-down from the query string) as CSV."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        try:
            entries = self.get_changelist_instance(request).get_queryset(request)
        except IncorrectLookupParameters as error:
            return HttpResponseBadRequest(f"The audit filters are not valid ({error}); open the list and filter again.")
        response = StreamingHttpResponse(
            audit_csv(audit_rows(entries.iterator(chunk_size=500))), content_type="text/csv; charset=utf-8"
        )
        stamp = timezone.now().strftime("%Y-%m-%dT%H%M")
        response["Content-Disposition"] = f'attachment; filename="audit-trail-{stamp}.csv"'
        return response
