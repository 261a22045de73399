"""The jobs table keeps room in its pages on PostgreSQL (jobs/migrations/0009_job_fillfactor.py), so a cycle's
rewrite of the waiting jobs' queue fields is a heap-only update that touches none of the table's indexes."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps
from django.db import connection
from django.utils import timezone

from jobs.models import Job
from jobs.services.queue_fields import QueueFields, job_queue_fields_write_bulk
from tests.factories import JobFactory, TeamFactory

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(
        connection.vendor != "postgresql",
        reason="fillfactor and heap-only updates are PostgreSQL's: run with DATABASE_URL=postgres://…",
    ),
]

migration = importlib.import_module("jobs.migrations.0009_job_fillfactor")
ROWS = 300  # several pages of jobs


def _reloptions() -> list[str] | None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE oid = %s::regclass", [Job._meta.db_table])
        row = cursor.fetchone()
    assert row is not None
    return row[0]


def _updates() -> tuple[int, int]:
    """This transaction's updates of the jobs table so far: (all, heap-only)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables WHERE relid = %s::regclass",
            [Job._meta.db_table],
        )
        row = cursor.fetchone()
    return (row[0], row[1]) if row else (0, 0)


def test_the_jobs_table_keeps_30_percent_of_each_page_for_updated_rows() -> None:
    assert _reloptions() == [f"fillfactor={migration.FILLFACTOR}"]


def test_the_migration_sets_and_resets_the_fillfactor() -> None:
    with connection.schema_editor() as editor:
        migration._reset(apps, editor)
    assert _reloptions() is None
    with connection.schema_editor() as editor:
        migration._set(apps, editor)
    assert _reloptions() == [f"fillfactor={migration.FILLFACTOR}"]


def test_rewriting_the_queue_fields_of_waiting_jobs_finds_room_on_their_pages() -> None:
    """The first rewrite after the inserts: the room the fillfactor left takes a new version of about a third of the
    rows, where full pages take none. (Later rewrites also reuse the room of the versions before, once PostgreSQL
    prunes them, which waits for every snapshot that could see them: a fact of the whole database, not of this test.)"""
    team = TeamFactory()
    jobs = JobFactory.create_batch(ROWS, team=team)
    at = timezone.now().replace(microsecond=0)
    before = _updates()
    written = job_queue_fields_write_bulk(
        [(job.pk, QueueFields(n, n, at, "waiting for capacity")) for n, job in enumerate(jobs, start=1)]
    )
    updated, heap_only = (now - then for now, then in zip(_updates(), before, strict=True))
    assert written == updated == ROWS
    # Measured: 99-105 of 300 at fillfactor 70; at the default 100 the inserts fill each page and none is.
    assert heap_only >= ROWS // 4, heap_only
