"""The start estimates each pending job was shown, kept as they change (:class:`~scheduler.models.EtaHistory`), for
the error of the estimates that the loop's stats measure (:mod:`scheduler.loop.stats`).

Every cycle compares each pending job's estimate with the last one kept for it; at scale that is thousands of
jobs, of which few change. So the histories are read as value tuples (not model instances) and the changed ones
written in one statement, not with ``bulk_update`` (its ``CASE`` per row: :mod:`jobs.services.queue_fields` says
why that grows with the square of the rows on PostgreSQL): on PostgreSQL one ``UPDATE … FROM
jsonb_array_elements(…)`` whose one parameter is every row as a JSON document, as the queue fields are written
(:mod:`jobs.services.queue_fields` says why a document and not one array per column), each list taken from it as
``jsonb``; elsewhere (SQLite) one ``executemany`` of a row's ``UPDATE``. Both store what the ORM would store: the
list as JSON (Django's ``JSONField`` writes ``json.dumps`` of the value).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from django.db import connection

from scheduler.kept_rows import KeptRows
from scheduler.models import EtaHistory

Changes = list[list[float | None]]  # [[at, eta or None], ...] (Unix times)


# Every cycle reads every history and changes few: an unchanged one is not decoded again (scheduler.kept_rows).
_kept = KeptRows(tuple)


def histories_locked() -> dict[int, Changes]:
    """Every job's kept estimates, by job id, locked until the caller's transaction ends. The lists may be those of
    the last call (:class:`~scheduler.kept_rows.KeptRows`): a caller makes a new list rather than change one."""
    return dict(_kept.read(EtaHistory.objects.select_for_update().values_list("job_id", "changes")))


def histories_create(rows: Sequence[tuple[int, Changes]]) -> None:
    """A history for each (job id, changes): the jobs' first estimates (a new job's, one per job)."""
    EtaHistory.objects.bulk_create(EtaHistory(job_id=job_id, changes=changes) for job_id, changes in rows)


def histories_write(rows: Sequence[tuple[int, Changes]]) -> None:
    """Set each (job id, changes) in one statement (module doc); a job without a history is left out."""
    if not rows:
        return
    quote = connection.ops.quote_name
    table = quote(EtaHistory._meta.db_table)
    job, changes = quote(_column("job")), quote(_column("changes"))
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                f"UPDATE {table} AS h SET {changes} = v.changes "
                f"FROM (SELECT (e ->> 0)::bigint AS job, e -> 1 AS changes FROM jsonb_array_elements(%s::jsonb) AS e) "
                f"AS v WHERE h.{job} = v.job",
                [json.dumps([[job_id, values] for job_id, values in rows])],
            )
        else:
            cursor.executemany(
                f"UPDATE {table} SET {changes} = %s WHERE {job} = %s",
                [(json.dumps(values), job_id) for job_id, values in rows],
            )


def histories_delete(job_ids: Sequence[int]) -> None:
    """Forget the histories of ``job_ids`` (jobs no longer pending)."""
    EtaHistory.objects.filter(job_id__in=job_ids).delete()


def _column(name: str) -> str:
    field: Any = EtaHistory._meta.get_field(name)
    return str(field.column)
