"""The two shapes a log line takes (``LOG_FORMAT`` in ``portal/settings.py``, docs/deploy.md, Logs).

``json``: one JSON object per line for a log pipeline (Loki, Elasticsearch, Cloud Logging), with ``time``,
``level``, ``logger`` and ``message`` on every line and whatever the caller passed as ``extra=`` beside them
(``job``, ``team``, ``node``, ``cycle`` from the scheduling loop), so a job's lines are found by a field, not
a text search. ``plain``: the same records as readable lines for a terminal, the demo and development.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from pythonjsonlogger.json import JsonFormatter

PLAIN_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonLines(JsonFormatter):
    """python-json-logger's formatter with the field names this project documents and UTC ISO 8601 times.

    Values that are not JSON (a Django request object attached to ``django.request`` records) are written as
    their ``str()`` by the library's encoder, so no record is ever lost to a serialisation error."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(
            "%(asctime)s %(levelname)s %(name)s %(message)s",
            rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
            **kwargs,
        )

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds")


def formatters() -> dict[str, dict[str, Any]]:
    """``LOGGING["formatters"]``: both shapes, so a handler names the one ``LOG_FORMAT`` picks."""
    return {
        "json": {"()": "portal.log_formats.JsonLines"},
        "plain": {"format": PLAIN_FORMAT},
    }
