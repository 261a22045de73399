"""The audit trail as CSV: one line per changed field, streamed so a year of changes never sits in memory."""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator
from dataclasses import astuple, fields

from audit.selectors import AuditRow

COLUMNS = tuple(f.name for f in fields(AuditRow))
# A spreadsheet runs a cell that starts with one of these as a formula; names, notes and sources are typed
# by people, so such a value is written with a leading apostrophe (OWASP, CSV injection).
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


class _Line:
    """csv.writer's file: hands back each line it writes instead of keeping it."""

    def write(self, line: str) -> str:
        return line


def _cell(value: object) -> str:
    text = value.isoformat() if hasattr(value, "isoformat") else str(value)
    if text.startswith(_FORMULA_STARTS) and not _is_number(text):
        return "'" + text
    return text


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def audit_csv(rows: Iterable[AuditRow]) -> Iterator[str]:
    writer = csv.writer(_Line(), lineterminator="\n")
    yield writer.writerow(COLUMNS)
    for row in rows:
        yield writer.writerow([_cell(value) for value in astuple(row)])
