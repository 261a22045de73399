"""What a cycle needs of the machine beside time: the worker's peak memory in it and the database's size.

``docs/deploy.md`` sizes a worker and a database from these (``bench loop``). The peak is the process's resident
high-water mark (``VmHWM``) over one cycle: Linux lets a process reset it by writing ``5`` to
``/proc/self/clear_refs`` (proc(5)), so each cycle's peak is its own, not the seeding's before it. Elsewhere the
lifetime peak (``ru_maxrss``) stands in, which can only overstate a cycle's.
"""

from __future__ import annotations

import contextlib
import resource
import sys
from pathlib import Path

from django.db import connection

_PROC = Path("/proc/self")


def peak_reset() -> None:
    """Start a new resident high-water mark (a no-op where the kernel offers none)."""
    with contextlib.suppress(OSError):
        (_PROC / "clear_refs").write_text("5")


def peak_rss_mib() -> float:
    """The resident high-water mark since :func:`peak_reset`, in MiB."""
    try:
        for line in (_PROC / "status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KiB on Linux


def database_mib() -> float:
    """The size of the connection's database: PostgreSQL's ``pg_database_size``, SQLite's pages."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT pg_database_size(current_database())")
            (size,) = cursor.fetchone()
        else:
            cursor.execute("PRAGMA page_count")
            (pages,) = cursor.fetchone()
            cursor.execute("PRAGMA page_size")
            (page,) = cursor.fetchone()
            size = pages * page
    return float(size) / 2**20
