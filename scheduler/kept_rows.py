"""Value rows read every cycle, each converted once: a row unchanged since the last read is the same value.

A cycle reads thousands of rows as value tuples (every pending and running job, every simulated pod), and about
half of that read is Django converting each column as the database returned it into a Python value: datetimes
parsed and made aware, JSON decoded, decimals and booleans made (``SQLCompiler.apply_converters``: measured at 0.05 s
of the snapshot's 0.1 s read of 11,941 job rows on SQLite). In a steady cycle almost none of those rows changed.
:class:`KeptRows` executes a ``values_list`` queryset itself, keys each row by the values the database returned,
and converts (and makes into the caller's value) only the rows it did not see in its last read; the others are
the objects it made then. So the values are those of iterating the queryset, made from the same converted row.

Keys compare with ``==``, as the rows' converted values already did where a cache kept engine jobs by their row
(:mod:`scheduler.bridge.snapshot`): equal raw values of one column convert to equal values. A row that cannot be a
key (a backend returning an unhashable value) is converted every time.

Only the last read's rows are kept, so the memory is one read's; each call site keeps its own :class:`KeptRows`,
and only a caller that reads the same query every cycle gains from one.

The rows that are converted are converted column by column, each distinct raw value of a column once when what it
converts to cannot be changed (a datetime, a decimal, a number, a string, None; not a decoded JSON list or object,
which every row gets its own of): after a cycle that bound thousands of jobs, the next read converts every one of
their rows, and they share their start time, their flags and most of their nulls (:func:`_converted`).
"""

from __future__ import annotations

import datetime
import decimal
import uuid
from collections.abc import Callable, Sequence
from itertools import chain
from typing import Any, Generic, TypeVar

from django.db.models import QuerySet
from django.db.models.sql.compiler import SQLCompiler
from django.db.models.sql.constants import MULTI

T = TypeVar("T")


class KeptRows(Generic[T]):
    """``make`` of each row of a ``values_list`` queryset (module doc); ``make`` must be a function of the row."""

    def __init__(self, make: Callable[[tuple[Any, ...]], T]) -> None:
        self._make = make
        # Raw row -> (that raw row, its value). The entry is kept whole and reused for an unchanged row, so the read
        # leaves no new object behind for it: the fresh raw tuple is freed at once, and the cyclic collector's next
        # pass (scheduler.gcpause) walks only the rows that changed, not every row read.
        self._last: dict[tuple[Any, ...], tuple[tuple[Any, ...], T]] = {}

    def read(self, rows: QuerySet[Any, tuple[Any, ...]]) -> list[T]:
        """``[make(row) for row in rows]``, in the queryset's order, the rows unchanged since the last read not
        converted again (module doc). ``rows`` must be a plain ``values_list`` (not ``flat`` nor ``named``)."""
        # What Django 5.2's ValuesListIterable does (QuerySet.values_list's iterator): the compiler's raw rows, then
        # results_iter's converters; here the raw rows first, then the converters (_converted) on only those not kept.
        compiler = rows.query.get_compiler(using=rows.db)
        raw: list[tuple[Any, ...]] = list(chain.from_iterable(compiler.execute_sql(MULTI)))
        get = self._last.get
        entries: list[Any] = []
        missing: list[int] = []
        for row in raw:
            try:
                entry = get(row)
            except TypeError:  # unhashable: converted every time
                entry = None
            if entry is None:
                missing.append(len(entries))
            entries.append(entry)
        if missing:
            made = _converted(compiler, [raw[i] for i in missing])
            for index, converted in zip(missing, made, strict=True):
                entries[index] = (raw[index], self._make(converted))
        try:
            self._last = {entry[0]: entry for entry in entries}
        except TypeError:
            self._last = {}
            for entry in entries:
                try:
                    self._last[entry[0]] = entry
                except TypeError:
                    continue
        return [entry[1] for entry in entries]

    def forget(self) -> None:
        """Keep nothing: the next read converts every row."""
        self._last = {}


def values_read(rows: QuerySet[Any, tuple[Any, ...]], make: Callable[[tuple[Any, ...]], T]) -> list[T]:
    """``[make(row) for row in rows]``, each column converted once per distinct immutable value (:func:`_converted`)
    and nothing kept: for rows that change between reads (the waiting jobs' places after every bind), where keeping
    them would only leave more for the collector to walk. ``rows`` as for :meth:`KeptRows.read`."""
    compiler = rows.query.get_compiler(using=rows.db)
    raw: list[tuple[Any, ...]] = list(chain.from_iterable(compiler.execute_sql(MULTI)))
    return [make(row) for row in _converted(compiler, raw)] if raw else []


# What a converter may return and be shared between rows: values no one can change in place.
_IMMUTABLE = frozenset(
    {
        type(None),
        bool,
        int,
        float,
        str,
        bytes,
        decimal.Decimal,
        datetime.datetime,
        datetime.date,
        datetime.time,
        datetime.timedelta,
        uuid.UUID,
    }
)


def _converted(compiler: SQLCompiler, rows: Sequence[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """``compiler.results_iter(results=[rows], tuple_expected=True)`` as a list: each column's converters
    (``SQLCompiler.get_converters``, applied in order as ``apply_converters`` does), run once per distinct raw value
    of the column (and its type: ``1`` and ``1.0`` are equal keys) when the value they make is immutable
    (:data:`_IMMUTABLE`); a mutable one (decoded JSON), or a raw value that cannot be a key, is made for each row."""
    fields = [column[0] for column in compiler.select[0 : compiler.col_count]]
    if compiler.has_composite_fields(fields):  # not a plain values_list: Django's own path
        return [tuple(row) for row in compiler.results_iter(results=[list(rows)], tuple_expected=True)]
    converters = compiler.get_converters(fields)
    if not converters:
        return [tuple(row) for row in rows]
    connection = compiler.connection
    columns = [list(column) for column in zip(*rows, strict=True)]
    for pos, (convs, expression) in converters.items():
        made: dict[tuple[type, Any], Any] = {}
        column = columns[pos]
        for i, raw in enumerate(column):
            try:
                key = (type(raw), raw)
                column[i] = made[key]
                continue
            except KeyError:
                pass
            except TypeError:  # unhashable: converted for this row alone
                key = None
            value = raw
            for converter in convs:
                value = converter(value, expression, connection)
            if key is not None and type(value) in _IMMUTABLE:
                made[key] = value
            column[i] = value
    return list(zip(*columns, strict=True))
