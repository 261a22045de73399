"""A throwaway database beside the configured one, for a benchmark that writes as production does.

``bench loop`` runs whole scheduling cycles: they read every job and node of the database and commit what they
decide, so the benchmark cannot share a database with anything (a demo's jobs would be scheduled onto its nodes)
nor run inside a transaction it rolls back (commits are part of what it measures). :func:`scratch_database`
creates an empty, migrated database on the same server with Django's own test-database machinery
(``BaseDatabaseCreation.create_test_db``, the one ``manage.py test`` and pytest-django use), points the connection
at it, and drops it afterwards, restoring the connection: SQLite gets a file in a temporary folder (not the
test machinery's in-memory default: an in-memory database would skip the disk writes a worker makes),
PostgreSQL a database named ``<configured name>_bench_loop`` (the role needs ``CREATEDB``, as for the tests).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from django.db import connections

SUFFIX = "_bench_loop"


@contextmanager
def scratch_database(alias: str = "default") -> Iterator[str]:
    """Run the body on a fresh migrated database beside ``alias``'s (module doc); yields its name."""
    connection = connections[alias]
    old_name = connection.settings_dict["NAME"]
    test = connection.settings_dict.setdefault("TEST", {})
    saved = test.get("NAME")
    folder = None
    if connection.vendor == "sqlite":
        folder = Path(tempfile.mkdtemp(prefix="bench-loop-"))
        test["NAME"] = str(folder / "bench-loop.sqlite3")
    else:
        test["NAME"] = f"{old_name}{SUFFIX}"
    try:
        name = connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
        try:
            yield name
        finally:
            connection.creation.destroy_test_db(old_name, verbosity=0)
    finally:
        if saved is None:
            test.pop("NAME", None)
        else:
            test["NAME"] = saved
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
