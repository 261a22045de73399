"""The audit trail as CSV: one line per changed field, streamed so a year of changes never sits in memory."""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator
from dataclasses import astuple, fields

from audit.selectors import AuditRow
from billing.spreadsheet_cells import csv_cell

COLUMNS = tuple(f.name for f in fields(AuditRow))


class _Line:
    """csv.writer's file: hands back each line it writes instead of keeping it."""

    def write(self, line: str) -> str:
        return line


def _cell(value: object) -> str:
    return csv_cell(value.isoformat() if hasattr(value, "isoformat") else str(value))


def audit_csv(rows: Iterable[AuditRow]) -> Iterator[str]:
    writer = csv.writer(_Line(), lineterminator="\n")
    yield writer.writerow(COLUMNS)
    for row in rows:
        yield writer.writerow([_cell(value) for value in astuple(row)])
