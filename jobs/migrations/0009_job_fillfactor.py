"""Leave room in each page of the jobs table for its rows' next versions (PostgreSQL's ``fillfactor``).

Every scheduling cycle rewrites the queue fields of each waiting job whose position, estimate or reason moved
(``jobs.services.queue_fields``): tens of thousands of rows at 5,000 nodes. None of those columns is indexed, so
PostgreSQL can write the new row version beside the old one on the same page without touching any of the table's
indexes — a heap-only tuple update — but only when the page has room
(postgresql.org/docs/current/storage-hot.html). At the default fillfactor of 100 a page is filled by inserts, so
every such update writes a new entry into each of the table's six indexes. Measured on this project's machine
(PostgreSQL 15, 60,000 rows shaped like jobs with six indexes, 31,000 rows' four queue fields updated in one
``UPDATE … FROM unnest``, three times): 512, 598 and 669 ms at fillfactor 100; 436, 282 and 208 ms at 70.

The setting applies to pages written from now on (an existing table's pages fill up as they are rewritten). SQLite
has no such setting: the migration does nothing there.
"""

from __future__ import annotations

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

FILLFACTOR = 70  # percent of each page inserts may fill; the rest is kept for updated row versions


def _set(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        table = schema_editor.quote_name(apps.get_model("jobs", "Job")._meta.db_table)
        schema_editor.execute(f"ALTER TABLE {table} SET (fillfactor = {FILLFACTOR})")


def _reset(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        table = schema_editor.quote_name(apps.get_model("jobs", "Job")._meta.db_table)
        schema_editor.execute(f"ALTER TABLE {table} RESET (fillfactor)")


class Migration(migrations.Migration):
    dependencies = [("jobs", "0008_jobevent_node_request")]

    operations = [migrations.RunPython(_set, _reset, elidable=False)]
