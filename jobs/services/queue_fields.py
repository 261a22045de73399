"""A pending job's queue fields — queue position, team position, start estimate and reason — written for many
jobs in one statement.

The scheduling cycle's record step writes them for every waiting job whose fields changed
(:mod:`scheduler.loop.record`), and an order change for every pending job whose place moved
(:mod:`jobs.services.positions`): thousands of rows in one transaction at scale. Not with ``bulk_update``:
Django's ``QuerySet.bulk_update`` sets each field to a ``CASE`` with one ``WHEN pk = … THEN …`` per row of the
batch (``Case(*when_statements)`` in github.com/django/django/blob/stable/5.2.x/django/db/models/query.py;
docs.djangoproject.com/en/5.2/ref/models/querysets/#bulk-update), which the database searches for every row it
updates: on PostgreSQL, where one batch holds every row, the time grows with the square of the rows.

- **PostgreSQL**: one ``UPDATE … FROM jsonb_array_elements(…)``, every row passed in one JSON document (an array
  of ``[id, position, team position, estimate, reason]``) and typed by the statement's casts, so the statement and
  its parameters stay two whatever the number of rows (PostgreSQL binds at most 65,535 parameters, which
  ``UPDATE … FROM (VALUES …)`` would pass at about 13,000 rows). Django's PostgreSQL cursor binds parameters on
  the client (``ClientCursor``: docs.djangoproject.com/en/5.2/ref/databases/#server-side-parameters-binding), so
  each parameter becomes a literal in the statement's text: one array per field (this module's earlier form) was
  written element by element by psycopg's Python array dumper after Django wrapped each integer in a typed value,
  where ``json.dumps`` writes the document in C. Measured at 31,000 rows (psycopg's ``ClientCursor``, a jobs-shaped
  table at fillfactor 70): 0.25–0.29 s with the arrays, 0.16–0.18 s with the document; inside the 5,000-node cycle
  the write took 0.5–0.7 s with the arrays, of which 0.23–0.38 s was the statement in the server's log. Against
  ``executemany`` (one statement per row, each parsed and planned, although psycopg 3 pipelines them:
  psycopg.org/psycopg3/docs/advanced/pipeline.html): 3–5 s at 8,000 rows, where the arrays took 0.5–0.8 s.
- **Elsewhere (SQLite)**: one parameterised ``UPDATE`` per row, sent with the cursor's ``executemany``
  (DB-API 2.0, PEP 249, passed through by Django's cursor:
  docs.djangoproject.com/en/5.2/topics/db/sql/#executing-custom-sql-directly), which SQLite runs in-process:
  0.4 s at 8,000 rows.

Only a job still pending is written (``state`` in the condition): a job cancelled, bound or rejected meanwhile
keeps what its new state wrote. On PostgreSQL the rows are not locked beforehand, and a row another transaction
holds locked (a cancel under way) is skipped rather than waited for (``FOR NO KEY UPDATE … SKIP LOCKED``, the
lock an ``UPDATE`` of non-key columns takes anyway: postgresql.org/docs/current/sql-select.html#SQL-FOR-UPDATE-SHARE,
postgresql.org/docs/current/explicit-locking.html#LOCKING-ROWS). So the write never waits on a waiting job's
row: it cannot deadlock with a bulk cancel that locks rows in another order, and a skipped job's fields are
written by the next cycle. A row this transaction has locked itself (a job the plan evicts) is not skipped.
SQLite has no row locks: its writers take turns on the whole database.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

from django.db import connection
from django.db.models import Field

from jobs.models import Job
from scheduler.core.model.vocabulary import JobState

QUEUE_FIELDS = ("queue_position", "team_queue_position", "eta_at", "state_reason")


class QueueFields(NamedTuple):
    """A pending job's queue fields, in :data:`QUEUE_FIELDS`' order: a plain tuple, cheap to read and compare."""

    queue_position: int | None
    team_queue_position: int | None
    eta_at: datetime | None
    state_reason: str


def job_queue_fields_write_bulk(rows: Sequence[tuple[int, QueueFields]]) -> int:
    """Inside the caller's transaction: write each (job id, queue fields) whose job is still pending and not
    locked by another transaction (module doc). Returns how many rows were written. A start estimate without a time
    zone is refused (``ValueError``) before anything is written, on every database: it names no instant."""
    if not rows:
        return 0
    naive = next((pk for pk, f in rows if f.eta_at is not None and f.eta_at.tzinfo is None), None)
    if naive is not None:
        raise ValueError(f"job {naive}: a start estimate must be aware (it is stored as an instant); nothing written")
    fields = [_field(name) for name in QUEUE_FIELDS]
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(_postgresql_sql(fields), [_document(rows), JobState.PENDING.value])
        else:
            # Each value goes through its field's preparation as the ORM's own writes do (a datetime is stored on
            # SQLite as Django stores it there: naive UTC text). Once per distinct value of a column (_Prepared):
            # after a cycle that bound thousands, every waiting row's place changes, and most of their start
            # estimates and team places are shared.
            preparers = [_Prepared(field) for field in fields]
            params = [
                (
                    *(prepare(value) for prepare, value in zip(preparers, values, strict=True)),
                    pk,
                    JobState.PENDING.value,
                )
                for pk, values in rows
            ]
            cursor.executemany(_each_sql(fields), params)
        return max(cursor.rowcount, 0)


def _document(rows: Sequence[tuple[int, QueueFields]]) -> str:
    """The rows as the PostgreSQL statement reads them: a JSON array of ``[id, *fields]``, a start estimate as its
    ISO 8601 text with its offset (which ``timestamptz`` reads as the same instant; each distinct one written once),
    an integer or a text as itself, None as null."""
    texts: dict[datetime, str] = {}

    def text(eta: datetime | None) -> str | None:
        if eta is None:
            return None
        made = texts.get(eta)
        if made is None:
            made = texts[eta] = eta.isoformat()
        return made

    return json.dumps([[pk, f.queue_position, f.team_queue_position, text(f.eta_at), f.state_reason] for pk, f in rows])


class _Prepared:
    """``field.get_db_prep_save(value, connection)``, made once per value (and its type: ``1`` and ``True`` are
    equal keys) of one write: the preparation is a function of the value, about 2 µs a call for an integer or a
    datetime, times tens of thousands of rows."""

    def __init__(self, field: Field[Any, Any]) -> None:
        self._field = field
        self._made: dict[tuple[type, Any], Any] = {}

    def __call__(self, value: Any) -> Any:
        key = (type(value), value)
        try:
            return self._made[key]
        except KeyError:
            made = self._made[key] = self._field.get_db_prep_save(value, connection)
            return made


def _each_sql(fields: Sequence[Field[Any, Any]]) -> str:
    """One row's ``UPDATE``, its parameters the fields' values, then the job's id and the pending state."""
    quote = connection.ops.quote_name
    assignments = ", ".join(f"{quote(field.column)} = %s" for field in fields)
    return (
        f"UPDATE {quote(Job._meta.db_table)} SET {assignments} "
        f"WHERE {quote(_field('id').column)} = %s AND {quote(_field('state').column)} = %s"
    )


def _postgresql_sql(fields: Sequence[Field[Any, Any]]) -> str:
    """Every row's ``UPDATE`` in one statement; its parameters the rows' JSON document (:func:`_document`: each
    element ``[id, *fields]``, each cast to its column's type) and the pending state. The inner ``SELECT`` takes the
    row locks, skipping rows held by others (module doc)."""
    quote = connection.ops.quote_name
    table, key, state = quote(Job._meta.db_table), quote(_field("id").column), quote(_field("state").column)
    names = [quote(field.column) for field in fields]
    columns = ", ".join(
        f"(e ->> {index})::{field.db_type(connection)} AS {quote(field.column)}"
        for index, field in enumerate([_field("id"), *fields])
    )
    assignments = ", ".join(f"{name} = v.{name}" for name in names)
    return (
        f"UPDATE {table} AS j SET {assignments} FROM ("
        f"SELECT v.* FROM (SELECT {columns} FROM jsonb_array_elements(%s::jsonb) AS e) AS v "
        f"JOIN {table} AS free ON free.{key} = v.{key} WHERE free.{state} = %s "
        f"FOR NO KEY UPDATE OF free SKIP LOCKED"
        f") AS v WHERE j.{key} = v.{key}"
    )


def _field(name: str) -> Field[Any, Any]:
    """``Job``'s concrete field ``name`` (its column and its preparation of values)."""
    field = Job._meta.get_field(name)
    if not isinstance(field, Field):
        raise TypeError(f"Job.{name} is not a concrete field")
    return field
