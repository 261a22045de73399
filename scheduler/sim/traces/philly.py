"""Loader for the Philly run-time sample (``../shared/traces/philly/philly_runtime.csv``).

One column, ``runtime``: a job's run time in seconds (83,154 values; 0.0 occurs). Every row must be a finite
number ≥ 0; each bad row is reported as ``file:line: what is wrong``.
"""

from __future__ import annotations

from pathlib import Path

from scheduler.sim.traces.rows import Problems, read_rows, real

RUNTIME_COLUMNS = ("runtime",)


def load_philly_runtimes(path: str | Path) -> tuple[float, ...]:
    """Every run time of the file in seconds, in file order; raises TraceError listing every bad row."""
    problems = Problems(str(path))
    runtimes_s: list[float] = []
    for line, row in read_rows(path, (RUNTIME_COLUMNS,), problems):
        value = real(problems, line, "runtime", row["runtime"].strip())
        if value is not None:
            runtimes_s.append(value)
    problems.raise_if_any()
    return tuple(runtimes_s)
