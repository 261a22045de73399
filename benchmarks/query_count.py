"""Counting a benchmark's SQL statements: a database execute wrapper (Django's ``connection.execute_wrapper``)
that counts every statement sent, an ``executemany`` as one."""

from __future__ import annotations

from typing import Any


class QueryCounter:
    """Install with ``with connection.execute_wrapper(counter):``; ``count`` is the statements sent meanwhile."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        self.count += 1
        return execute(sql, params, many, context)
