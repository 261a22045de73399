"""Logging filters for ``portal/settings.py``'s ``LOGGING``."""

from __future__ import annotations

import logging


class ForbiddenOnOneLine(logging.Filter):
    """Log a refused request (403) as its one line, ``Forbidden (Permission denied): /path``, without the traceback
    Django attaches: a refusal is the access rules working, not a fault, and a traceback per refusal buries the
    real errors. Every other record passes unchanged."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "status_code", None) == 403:
            record.exc_info = None
            record.exc_text = None
        return True
