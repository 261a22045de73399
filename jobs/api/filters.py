"""django-filter sets shared by the API and the queue page, so both filter the same way."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import django_filters
from django import forms
from django.db.models import QuerySet
from django_filters.fields import IsoDateTimeField

from jobs.models import Job
from scheduler.core.vocabulary import JobKind, JobState, Priority, choices_of

# The UTC offsets clocks actually use: Baker Island's −12:00 to Kiribati's +14:00. Python accepts up to ±23:59
# and PostgreSQL refuses beyond ±15:59 with "time zone displacement out of range" (a 500 before this check).
EARLIEST_OFFSET = timedelta(hours=-12)
LATEST_OFFSET = timedelta(hours=14)


def _offset_text(offset: timedelta) -> str:
    minutes = int(offset.total_seconds()) // 60
    sign = "-" if minutes < 0 else "+"
    return f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


class UtcIsoDateTimeField(IsoDateTimeField):
    """An ISO 8601 date-time (``2026-01-01T09:00:00+02:00``; without an offset, in the reader's time zone) with an
    offset clocks use, handed on in UTC, so the database never sees an offset or a year it cannot hold."""

    def to_python(self, value: Any) -> datetime | None:
        parsed = super().to_python(value)
        if parsed is None:
            return None
        offset = parsed.utcoffset()
        if offset is not None and not EARLIEST_OFFSET <= offset <= LATEST_OFFSET:
            raise forms.ValidationError(
                f"UTC offset {_offset_text(offset)} does not exist: use one from -12:00 to +14:00, or Z",
                code="invalid",
            )
        # 9999-12-31T23:59-01:00 is in year 10000 in UTC; so is a naive 9999-12-31T23:59 read in the reader's
        # zone west of UTC (the tz cookie, portal/middleware.py).
        try:
            return parsed.astimezone(UTC)
        except OverflowError:
            raise forms.ValidationError(
                "date-time out of range: it must fall between years 1 and 9999 in UTC", code="invalid"
            ) from None


class UtcIsoDateTimeFilter(django_filters.IsoDateTimeFilter):
    field_class = UtcIsoDateTimeField


class QueueFilter(django_filters.FilterSet):
    """Filters of the queue (pending jobs only)."""

    team = django_filters.CharFilter(field_name="team__slug", label="Team (slug)")
    kind = django_filters.ChoiceFilter(choices=choices_of(JobKind), empty_label="any kind")
    priority = django_filters.ChoiceFilter(choices=choices_of(Priority), empty_label="any priority")
    name = django_filters.CharFilter(field_name="name", lookup_expr="icontains", label="Name contains")
    mine = django_filters.BooleanFilter(method="filter_mine", label="Only jobs I submitted")

    class Meta:
        model = Job
        fields = ["team", "kind", "priority", "name", "mine"]

    def filter_mine(self, queryset: QuerySet[Job], name: str, value: bool | None) -> QuerySet[Job]:
        user = getattr(self.request, "user", None)
        if not value or user is None or not user.is_authenticated:
            return queryset
        return queryset.filter(submitted_by_id=user.pk)


class JobFilter(QueueFilter):
    """Filters of the job list: the queue's, plus state and submit time."""

    state = django_filters.MultipleChoiceFilter(choices=choices_of(JobState))
    submitted_after = UtcIsoDateTimeFilter(field_name="submitted_at", lookup_expr="gte")
    submitted_before = UtcIsoDateTimeFilter(field_name="submitted_at", lookup_expr="lt")

    class Meta:
        model = Job
        fields = ["team", "state", "kind", "priority", "name", "mine", "submitted_after", "submitted_before"]
