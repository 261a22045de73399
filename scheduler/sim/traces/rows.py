"""Reading a CSV trace row by row while collecting every problem as ``file:line: what is wrong``.

A person fixing a trace wants the whole list in one run, so readers record a problem and carry on;
:meth:`Problems.raise_if_any` raises one :class:`TraceError` at the end. Line numbers are the physical line
of the file (the header is line 1), as an editor shows them.

The bytes are read by :func:`scheduler.specs.files.read_text`, as every user file is: a size cap, UTF-8
(the first bad byte named with its offset and line) and no NUL bytes, so a binary file or the wrong file
fails at once with one line instead of a traceback or a screen of "malformed" rows.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

from scheduler.specs.files import SpecFileError, read_text

#: At most this many messages are kept in a :class:`TraceError`; the rest are only counted.
MAX_LISTED = 50

#: The real traces are a few MiB (the largest openb pod list 1.2 MiB); this only stops a wrong file early.
MAX_TRACE_BYTES = 64 * 1024 * 1024
#: Digits in an integer field: int64's 19 are more than any trace column needs, and Python refuses to
#: convert 4,300 or more (a ValueError the row readers would not expect).
MAX_INTEGER_DIGITS = 19

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
    one problem is recorded for line 1 and no row is yielded. So is a file with no row after its header.
    Blank lines are skipped; a row with the wrong number of fields is recorded and skipped. A file that
    cannot be read as text (missing, a directory, too large, not UTF-8, with NUL bytes) raises
    :class:`TraceError` at once, naming the first problem.
    """
    try:
        text = read_text(path, max_bytes=MAX_TRACE_BYTES)
    except SpecFileError as exc:
        raise TraceError(str(path), exc.errors, 1) from None
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader, None)
        if header is None:
            problems.add(1, "empty file: expected a header line")
            return
        columns = tuple(name.strip() for name in header)
        if not any(set(columns) == set(accepted) and len(columns) == len(accepted) for accepted in accepted_headers):
            expected = " or ".join(",".join(accepted) for accepted in accepted_headers)
            problems.add(1, f"header {show(','.join(columns))} does not match the expected columns {expected}")
            return
        width = len(columns)
        rows = 0
        for fields in reader:
            line = reader.line_num
            if not fields:
                continue
            rows += 1
            if len(fields) != width:
                problems.add(line, f"expected {width} fields, got {len(fields)}")
                continue
            yield line, dict(zip(columns, fields, strict=True))
        if rows == 0:  # every caller needs data: an empty list would only fail later, far from the file
            problems.add(1, "no rows after the header")
    except csv.Error as exc:
        problems.add(reader.line_num, f"malformed CSV: {exc}")


def integer(problems: Problems, line: int, column: str, text: str, minimum: int = 0) -> int | None:
    """``text`` as a decimal integer ≥ ``minimum``, or None after recording why it is not one."""
    if not _INTEGER.fullmatch(text):
        problems.add(line, f"{column}: expected an integer, got {show(text)}")
        return None
    if len(text.lstrip("-")) > MAX_INTEGER_DIGITS:
        problems.add(line, f"{column}: expected an integer of at most {MAX_INTEGER_DIGITS} digits, got {len(text)}")
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
        problems.add(line, f"{column}: expected a number, got {show(text)}")
        return None
    if not math.isfinite(value):
        problems.add(line, f"{column}: must be a finite number, got {show(text)}")
        return None
    if value < minimum:
        problems.add(line, f"{column}: must be ≥ {minimum:g}, got {text}")
        return None
    return value


def show(text: str) -> str:
    """A field as it appears in the file, short enough for one message line (a field may be 128 KiB)."""
    return repr(text) if len(text) <= 60 else repr(text[:57]) + "..."
