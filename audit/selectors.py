"""Reading the audit trail: its entries, and each entry as one row per changed field (before → after)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from auditlog.models import LogEntry
from django.db.models import QuerySet

# No person and no tool: the scheduler, the cluster sync or the demo's seed wrote the row.
SYSTEM_ACTOR = "system"
ACTIONS = {
    LogEntry.Action.CREATE: "create",
    LogEntry.Action.UPDATE: "update",
    LogEntry.Action.DELETE: "delete",
    LogEntry.Action.ACCESS: "access",
}


@dataclass(frozen=True)
class AuditRow:
    at: datetime
    actor: str
    via: str
    model: str
    object_id: str
    object: str
    action: str
    field: str
    before: str
    after: str
    address: str


def audit_entries() -> QuerySet[LogEntry]:
    """Every entry, newest first (the admin's list narrows it with its filters)."""
    return LogEntry.objects.select_related("content_type", "actor").order_by("-timestamp", "-pk")


def via_of(entry: LogEntry) -> str:
    """The tool that made the change: ``admin``, ``portal``, ``teams apply``; empty when none was recorded."""
    extra = entry.additional_data
    return str(extra.get("via", "")) if isinstance(extra, dict) else ""


def actor_of(entry: LogEntry) -> str:
    """The person (their username), else the tool (``teams apply`` run without ``--actor``), else ``system``."""
    if entry.actor is not None:
        return entry.actor.get_username()
    return via_of(entry) or SYSTEM_ACTOR


def _shown(value: Any) -> str:
    return "" if value is None or value == "None" else str(value)


def field_changes(entry: LogEntry) -> list[tuple[str, str, str]]:
    """``(field, before, after)`` for each field the entry changed. A role (a group) given or taken away reads
    as before ``""`` → after ``finance`` or before ``finance`` → after ``""``."""
    changes = entry.changes_dict or {}
    found: list[tuple[str, str, str]] = []
    for field, values in changes.items():
        if isinstance(values, dict) and values.get("type") == "m2m":
            names = ", ".join(str(o) for o in values.get("objects", []))
            added = values.get("operation") == "add"
            found.append((field, "" if added else names, names if added else ""))
        elif isinstance(values, list | tuple) and len(values) == 2:
            found.append((field, _shown(values[0]), _shown(values[1])))
    return found


def audit_rows(entries: Iterable[LogEntry]) -> Iterator[AuditRow]:
    """One row per changed field; an entry that changed none (a bare delete) still gives one row."""
    for entry in entries:
        model = entry.content_type.model_class()
        label = model._meta.label if model is not None else f"{entry.content_type.app_label}.{entry.content_type.model}"
        actor, via = actor_of(entry), via_of(entry)
        action = ACTIONS.get(entry.action, str(entry.action))
        for field, before, after in field_changes(entry) or [("", "", "")]:
            yield AuditRow(
                at=entry.timestamp,
                actor=actor,
                via=via,
                model=label,
                object_id=entry.object_pk,
                object=entry.object_repr,
                action=action,
                field=field,
                before=before,
                after=after,
                address=entry.remote_addr or "",
            )
