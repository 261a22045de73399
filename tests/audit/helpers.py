"""Reading the audit trail in tests: the latest entry for a row, and its changes as before → after."""

from __future__ import annotations

from auditlog.models import LogEntry
from django.contrib.contenttypes.models import ContentType
from django.db.models import Model

from audit.selectors import actor_of, field_changes, via_of


def entries_for(obj: Model) -> list[LogEntry]:
    content_type = ContentType.objects.get_for_model(type(obj))
    return list(LogEntry.objects.filter(content_type=content_type, object_pk=str(obj.pk)).order_by("timestamp", "pk"))


def last_entry(obj: Model) -> LogEntry:
    found = entries_for(obj)
    assert found, f"no audit entry for {obj!r}"
    return found[-1]


def changes(entry: LogEntry) -> dict[str, tuple[str, str]]:
    return {field: (before, after) for field, before, after in field_changes(entry)}


def who(entry: LogEntry) -> tuple[str, str]:
    return actor_of(entry), via_of(entry)
