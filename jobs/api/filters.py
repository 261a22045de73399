"""django-filter sets shared by the API and the queue page, so both filter the same way."""

from __future__ import annotations

import django_filters
from django.db.models import QuerySet

from jobs.models import Job
from scheduler.core.vocabulary import JobKind, JobState, Priority, choices_of


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
    submitted_after = django_filters.IsoDateTimeFilter(field_name="submitted_at", lookup_expr="gte")
    submitted_before = django_filters.IsoDateTimeFilter(field_name="submitted_at", lookup_expr="lt")

    class Meta:
        model = Job
        fields = ["team", "state", "kind", "priority", "name", "mine", "submitted_after", "submitted_before"]
