"""Reading a CSV trace row by row while collecting every problem as ``file:line: what is wrong``.

A person fixing a trace wants the whole list in one run, so readers record a problem and carry on;
:meth:`Problems.raise_if_any` raises one :class:`TraceError` at the end. Line numbers are the physical line
of the file (the header is line 1), as an editor shows them.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

#: At most this many messages are kept in a :class:`TraceError`; the rest are only counted.
MAX_LISTED = 50

_INTEGER = re.compile(r"-?[0-9]+")


class TraceError(ValueError):
    """A trace file that cannot be used.

    ``errors`` holds up to :data:`MAX_LISTED` messages ``file:line: what is wrong``; ``total`` counts all of
    them (``total > len(errors)`` when the list was capped).
    """

    def __init__(self, source: str, errors: Sequence[str], total: int) -> None:
        self.source = source
        self.errors = tuple(errors)
        self.total = total
        lines = list(self.errors)
        if total > len(lines):
            lines.append(f"... and {total - len(lines)} more problems in {source}")
        super().__init__("\n".join(lines))


class Problems:
    """The problems found in one file; keeps the first :data:`MAX_LISTED` and counts the others."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.messages: list[str] = []
        self.total = 0

    def add(self, line: int, reason: str) -> None:
        self.total += 1
        if len(self.messages) < MAX_LISTED:
            self.messages.append(f"{self.source}:{line}: {reason}")

    def raise_if_any(self) -> None:
        if self.total:
            raise TraceError(self.source, self.messages, self.total)


def read_rows(
    path: str | Path, accepted_headers: Sequence[tuple[str, ...]], problems: Problems
) -> Iterator[tuple[int, dict[str, str]]]:
    """Yield ``(line, row)`` for each data row of ``path`` whose field count matches the header.

    The header must name exactly one of ``accepted_headers`` (as a set of columns, in any order); otherwise
    one problem is recorded for line 1 and no row is yielded. Blank lines are skipped; a row with the wrong
    number of fields is recorded and skipped. A missing file raises :class:`TraceError` at once.
    """
    try:
        handle = open(path, newline="", encoding="utf-8")  # noqa: SIM115 - closed in the finally below
    except OSError as exc:
        raise TraceError(str(path), [f"{path}:0: cannot open: {exc.strerror}"], 1) from exc
    try:
        reader = csv.reader(handle)
        header = next(reader, None)
        if header is None:
            problems.add(1, "empty file: expected a header line")
            return
        columns = tuple(name.strip() for name in header)
        if not any(set(columns) == set(accepted) and len(columns) == len(accepted) for accepted in accepted_headers):
            expected = " or ".join(",".join(accepted) for accepted in accepted_headers)
            problems.add(1, f"header {','.join(columns)!r} does not match the expected columns {expected}")
            return
        width = len(columns)
        for fields in reader:
            line = reader.line_num
            if not fields:
                continue
            if len(fields) != width:
                problems.add(line, f"expected {width} fields, got {len(fields)}")
                continue
            yield line, dict(zip(columns, fields, strict=True))
    except UnicodeDecodeError as exc:
        problems.add(reader.line_num + 1, f"not UTF-8 text: {exc.reason}")
    except csv.Error as exc:
        problems.add(reader.line_num, f"malformed CSV: {exc}")
    finally:
        handle.close()


def integer(problems: Problems, line: int, column: str, text: str, minimum: int = 0) -> int | None:
    """``text`` as a decimal integer ≥ ``minimum``, or None after recording why it is not one."""
    if not _INTEGER.fullmatch(text):
        problems.add(line, f"{column}: expected an integer, got {text!r}")
        return None
    value = int(text)
    if value < minimum:
        problems.add(line, f"{column}: must be ≥ {minimum}, got {value}")
        return None
    return value


def real(problems: Problems, line: int, column: str, text: str, minimum: float = 0.0) -> float | None:
    """``text`` as a finite number ≥ ``minimum``, or None after recording why it is not one."""
    try:
        value = float(text)
    except ValueError:
        problems.add(line, f"{column}: expected a number, got {text!r}")
        return None
    if not math.isfinite(value):
        problems.add(line, f"{column}: must be a finite number, got {text!r}")
        return None
    if value < minimum:
        problems.add(line, f"{column}: must be ≥ {minimum:g}, got {text}")
        return None
    return value
