"""django-filter sets shared by the API and the pages, so both filter the same way: :class:`QueueFilter` for
the queue (page and ``/api/v1/queue/``), :class:`JobFilter` for the job list (the jobs page and
``/api/v1/jobs/``). A bad value is a form error: the page shows it, the API answers 400 with it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import django_filters
from django import forms
from django.db.models import Case, Exists, IntegerField, OuterRef, Q, QuerySet, Value, When
from django_filters.fields import IsoDateTimeField

from jobs.models import Allocation, Job
from scheduler.core.gpus.catalog import GPU_CLASSES, GPU_MODELS
from scheduler.core.model.vocabulary import PRIORITY_INDEX, JobKind, JobState, Priority, choices_of

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


# A search box is one line of text; anything longer is not a name, id, user name or image someone typed.
MAX_SEARCH_CHARS = 200
MAX_ID = 2**63 - 1  # the largest value of the id column (a BigAutoField)

GPU_MODEL_CHOICES = [(c, f"{c} (any model)") for c in GPU_CLASSES] + [(m.name, m.name) for m in GPU_MODELS]

# The sorts a reader can pick, ``-`` for descending (the newest, highest priority, last in the alphabet first);
# each then sorts by id the same way, so a page boundary never moves between two equal values.
SORT_KEYS = {"submitted": "submitted_at", "priority": "priority_weight", "state": "state", "name": "name"}
SORT_CHOICES = [
    ("-submitted", "Newest first"),
    ("submitted", "Oldest first"),
    ("-priority", "Highest priority first"),
    ("priority", "Lowest priority first"),
    ("state", "State (A to Z)"),
    ("-state", "State (Z to A)"),
    ("name", "Name (A to Z)"),
    ("-name", "Name (Z to A)"),
]
DEFAULT_SORT = "-submitted"


class JobFilter(QueueFilter):
    """Filters of the job list: the queue's, plus state, project, GPU model, submit time, a free-text search and
    the sort. Everything lives in the query string, so a filtered page is a bookmark."""

    q = django_filters.CharFilter(
        method="filter_search", max_length=MAX_SEARCH_CHARS, label="Search (name, id, submitter, image)"
    )
    state = django_filters.MultipleChoiceFilter(choices=choices_of(JobState))
    project = django_filters.CharFilter(field_name="project__code", label="Project (chargeback code)")
    gpu_model = django_filters.ChoiceFilter(
        choices=GPU_MODEL_CHOICES, method="filter_gpu_model", empty_label="any GPU", label="GPU model"
    )
    submitted_after = UtcIsoDateTimeFilter(field_name="submitted_at", lookup_expr="gte")
    submitted_before = UtcIsoDateTimeFilter(field_name="submitted_at", lookup_expr="lt")
    sort = django_filters.ChoiceFilter(choices=SORT_CHOICES, method="filter_sort", empty_label=None, label="Sort by")

    class Meta:
        model = Job
        fields = [
            "q",
            "team",
            "project",
            "state",
            "kind",
            "priority",
            "gpu_model",
            "name",
            "mine",
            "submitted_after",
            "submitted_before",
            "sort",
        ]

    def filter_queryset(self, queryset: QuerySet[Job]) -> QuerySet[Job]:
        # No sort given still sorts, newest first: a filter method runs only for a value in the query string.
        jobs = super().filter_queryset(queryset)
        if not self.form.cleaned_data.get("sort"):
            jobs = self.filter_sort(jobs, "sort", DEFAULT_SORT)
        return jobs

    def filter_search(self, queryset: QuerySet[Job], name: str, value: str) -> QuerySet[Job]:
        """Name, submitter's user name or image containing the text (any case), or the job's id (``42``,
        ``#42``)."""
        text = value.strip()
        if not text:
            return queryset
        match = Q(name__icontains=text) | Q(submitted_by__username__icontains=text) | Q(image__icontains=text)
        digits = text.removeprefix("#")
        if digits.isascii() and digits.isdigit() and 0 < int(digits) <= MAX_ID:
            match |= Q(pk=int(digits))
        return queryset.filter(match)

    def filter_gpu_model(self, queryset: QuerySet[Job], name: str, value: str) -> QuerySet[Job]:
        """Jobs that asked for the model (or class), or were ever placed on it."""
        if not value:
            return queryset
        placed = Allocation.objects.filter(job=OuterRef("pk")).filter(
            Q(node__gpu_model__name=value) | Q(node__gpu_model__gpu_class=value)
        )
        return queryset.filter(Q(gpu_model=value) | Exists(placed))

    def filter_sort(self, queryset: QuerySet[Job], name: str, value: str) -> QuerySet[Job]:
        descending = value.startswith("-")
        field = SORT_KEYS[value.removeprefix("-")]
        if field == "priority_weight":
            # The vocabulary's order, not the alphabet's: production weighs most, low least.
            queryset = queryset.annotate(
                priority_weight=Case(
                    *(When(priority=p, then=Value(len(PRIORITY_INDEX) - i)) for p, i in PRIORITY_INDEX.items()),
                    output_field=IntegerField(),
                )
            )
        sign = "-" if descending else ""
        return queryset.order_by(f"{sign}{field}", f"{sign}id")
