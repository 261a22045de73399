"""Rows read every cycle and converted once (scheduler.kept_rows): the values of iterating the queryset, in its
order and in its one query, with an unchanged row the same object as in the last read."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.db.models.sql.compiler import SQLCompiler
from django.utils import timezone

from jobs.models import Job
from scheduler.bridge.snapshot import _JOB_COLUMNS, _JobRow
from scheduler.kept_rows import KeptRows, values_read
from tests.factories import JobFactory, ProjectFactory, TeamFactory


def _varied() -> list[Job]:
    """Jobs whose rows hold every kind of column the cycle's reads convert: datetimes (some null), JSON, decimals,
    booleans, and a related row's column."""
    team = TeamFactory()
    now = timezone.now()
    return [
        JobFactory(team=team, state="pending", submitted_at=now - timedelta(hours=2)),
        JobFactory(team=team, state="pending", gpus=None, model={"params_b": 7, "dtype": "bf16"}, preemptible=False),
        JobFactory(team=team, state="pending", gpus=None, memory_gib=Decimal("18.5"), consolidate=True),
        JobFactory(team=team, state="running", submitted_at=now - timedelta(hours=1), started_at=now),
        JobFactory(team=team, state="pending", project=ProjectFactory(team=team), checkpoint_interval_s=600),
    ]


def _rows() -> Any:
    return Job.objects.order_by("-submitted_at", "-id").values_list(*_JOB_COLUMNS)


@pytest.mark.django_db
def test_the_rows_are_those_of_the_queryset_in_its_order_and_its_one_query(django_assert_num_queries) -> None:
    _varied()
    kept = KeptRows(_JobRow._make)
    expected = [_JobRow._make(row) for row in _rows()]
    with django_assert_num_queries(1):
        first = kept.read(_rows())
    with django_assert_num_queries(1):
        second = kept.read(_rows())
    assert first == second == expected
    assert [type(value) for value in first[1]] == [type(value) for value in expected[1]]  # converted, not raw


@pytest.mark.django_db
def test_an_unchanged_row_is_the_same_value_and_a_changed_one_is_made_again() -> None:
    jobs = _varied()
    made: list[tuple[Any, ...]] = []

    def make(row: tuple[Any, ...]) -> _JobRow:
        made.append(row)
        return _JobRow._make(row)

    kept = KeptRows(make)
    first = {row.pk: row for row in kept.read(_rows())}
    assert len(made) == len(jobs)
    Job.objects.filter(pk=jobs[1].pk).update(model={"params_b": 13, "dtype": "bf16"})
    Job.objects.filter(pk=jobs[2].pk).delete()
    made.clear()
    second = {row.pk: row for row in kept.read(_rows())}
    assert [row[0] for row in made] == [jobs[1].pk]  # only the changed row was converted
    assert second[jobs[1].pk].model == {"params_b": 13, "dtype": "bf16"}
    assert all(second[job.pk] is first[job.pk] for job in (jobs[0], jobs[3], jobs[4]))
    assert jobs[2].pk not in second
    # Only the last read is kept: a row seen two reads ago and back again is converted again.
    Job.objects.filter(pk=jobs[1].pk).update(model={"params_b": 7, "dtype": "bf16"})
    made.clear()
    kept.read(_rows())
    assert [row[0] for row in made] == [jobs[1].pk]
    kept.forget()
    made.clear()
    kept.read(_rows())
    assert len(made) == 4


@pytest.mark.django_db
def test_no_rows_and_no_query_are_no_values() -> None:
    _varied()
    kept = KeptRows(_JobRow._make)
    assert kept.read(_rows().filter(state="completed")) == []
    assert kept.read(_rows().filter(pk__in=[])) == []  # Django sends no query at all


@pytest.mark.django_db
def test_a_row_that_cannot_be_a_key_is_converted_every_time(monkeypatch) -> None:
    jobs = _varied()
    execute_sql = SQLCompiler.execute_sql

    def unhashable(self: SQLCompiler, *args: Any, **kwargs: Any) -> Any:
        # A backend returning a list for a column (psycopg can, for arrays): the row cannot be a dict key.
        return [[(pk, [name]) for pk, name in chunk] for chunk in execute_sql(self, *args, **kwargs)]

    monkeypatch.setattr(SQLCompiler, "execute_sql", unhashable)
    made: list[tuple[Any, ...]] = []
    kept = KeptRows(lambda row: made.append(row) or row)
    rows = Job.objects.order_by("pk").values_list("pk", "name")
    expected = [(job.pk, [job.name]) for job in sorted(jobs, key=lambda job: job.pk)]
    assert kept.read(rows) == expected
    assert kept.read(rows) == expected
    assert len(made) == 2 * len(jobs)


@pytest.mark.django_db
def test_an_unchanged_row_leaves_no_new_object_behind() -> None:
    """What the read keeps for an unchanged row is what it kept before, its raw row included: the fresh one is
    freed, so the collector's next pass walks only the rows that changed."""
    jobs = _varied()
    kept = KeptRows(_JobRow._make)
    kept.read(_rows())
    before = {entry[1].pk: entry for entry in kept._last.values()}
    Job.objects.filter(pk=jobs[0].pk).update(rank=9)
    kept.read(_rows())
    after = {entry[1].pk: entry for entry in kept._last.values()}
    assert after.keys() == before.keys()
    assert all(after[job.pk] is before[job.pk] for job in jobs[1:])
    assert after[jobs[0].pk] is not before[jobs[0].pk] and after[jobs[0].pk][1].rank == 9
    assert all(key is entry[0] for key, entry in kept._last.items())


@pytest.mark.django_db
def test_a_value_shared_by_rows_is_converted_once_and_a_mutable_one_for_each_row(monkeypatch) -> None:
    team, now = TeamFactory(), timezone.now()
    for _ in range(3):  # the same start, flags and model: as the jobs one cycle bound
        JobFactory(team=team, state="running", submitted_at=now, started_at=now, gpus=None, model={"params_b": 7})
    _varied()
    calls: list[Any] = []
    convert = getattr(connection.ops, "convert_datetimefield_value", None)
    if convert is not None:  # SQLite's: PostgreSQL's driver returns datetimes itself

        def counted(value: Any, expression: Any, conn: Any) -> Any:
            calls.append(value)
            return convert(value, expression, conn)

        monkeypatch.setattr(connection.ops, "convert_datetimefield_value", counted)
    rows = KeptRows(_JobRow._make).read(_rows())
    monkeypatch.undo()
    assert rows == [_JobRow._make(row) for row in _rows()]  # what iterating the queryset gives
    if convert is not None:  # once per distinct value of each datetime column, not once per row
        assert len(calls) == len({row.submitted_at for row in rows}) + len({row.started_at for row in rows})
        assert len(calls) < 2 * len(rows)
    shared = [row for row in rows if row.started_at == now and row.submitted_at == now]
    assert len(shared) == 3
    assert shared[0].model == shared[1].model and shared[0].model is not shared[1].model  # JSON: each row its own


@pytest.mark.django_db
def test_values_read_are_the_querysets_rows_made() -> None:
    _varied()
    assert values_read(_rows(), _JobRow._make) == [_JobRow._make(row) for row in _rows()]
    assert values_read(_rows().filter(state="completed"), _JobRow._make) == []
    assert values_read(_rows().filter(pk__in=[]), _JobRow._make) == []  # Django sends no query at all
    plain = Job.objects.order_by("pk").values_list("pk", "name")  # columns with no converter on SQLite
    assert values_read(plain, tuple) == list(plain)
