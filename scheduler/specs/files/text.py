"""Bytes to text for a user's file, and the error every spec-file reader raises.

See :mod:`scheduler.specs.files` for why each limit exists.
"""

from __future__ import annotations

import codecs
from decimal import Decimal
from pathlib import Path
from typing import Any

#: A spec file is a few kilobytes; this cap only stops the wrong file (a dump, a device) early.
MAX_BYTES = 8 * 1024 * 1024
#: Containers inside containers; the deepest file in tests/scheduler/scenarios/ nests 9 levels.
MAX_DEPTH = 32
#: Digits in one number literal; a count, a size or a duration never needs more than 20.
MAX_DIGITS = 100
#: Values in the whole document once YAML aliases are expanded (a billion-laughs file stops here).
MAX_VALUES = 1_000_000

JSON_SUFFIXES = (".json",)
YAML_SUFFIXES = (".yaml", ".yml")

_UTF16_32_MARKS = (codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


class SpecFileError(ValueError):
    """A file that cannot be read as a spec; one problem, found where reading stopped.

    ``str(error)`` is ``path:line:column: message`` when the position is known, ``path: key: message`` when
    the problem is a value at a key path, else ``path: message``. ``errors`` is that one line in a list, the
    shape of the validators' errors (``ScenarioError.errors``, ``TraceError.errors``).
    """

    def __init__(
        self, path: str, message: str, *, line: int | None = None, column: int | None = None, key: str = ""
    ) -> None:
        self.path = path
        self.message = f"{key}: {message}" if key else message
        self.line = line
        self.column = column
        super().__init__(str(self))

    def __str__(self) -> str:
        where = self.path
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        return f"{where}: {self.message}"

    @property
    def errors(self) -> list[str]:
        return [str(self)]


def kind_of(value: object) -> str:
    """Name a value's type the way a JSON/YAML author thinks of it (bool first: it is an int in Python)."""
    names: tuple[tuple[Any, str], ...] = ((type(None), "null"), (bool, "boolean"), (int | float | Decimal, "number"))
    names += ((str, "string"), (list, "list"), (dict, "object"))
    return next((name for types, name in names if isinstance(value, types)), type(value).__name__)


# ------------------------------------------------------------------------------------------------ bytes


def read_text(path: str | Path, *, max_bytes: int = MAX_BYTES) -> str:
    """The file's text: at most ``max_bytes`` bytes of UTF-8 (a leading byte-order mark is dropped), no NUL.

    Raises :class:`SpecFileError` for a missing file, a directory, an unreadable or oversized file, bytes
    that are not UTF-8 (naming the first bad byte, its offset and line) and NUL bytes.
    """
    name = str(path)
    try:
        with open(path, "rb") as handle:
            # One bounded read: a device or a pipe that never ends is cut off at the cap, not slurped.
            data = handle.read(max_bytes + 1)
    except FileNotFoundError:
        raise SpecFileError(name, "no such file") from None
    except IsADirectoryError:
        raise SpecFileError(name, "is a directory, not a file") from None
    except OSError as exc:
        raise SpecFileError(name, f"cannot read the file: {exc.strerror or exc}") from None
    except ValueError as exc:  # a NUL inside the path itself ("embedded null byte")
        raise SpecFileError(repr(name), f"not a usable file name: {exc}") from None
    if len(data) > max_bytes:
        raise SpecFileError(name, f"larger than {_size(max_bytes)}; is this the right file?")
    if data.startswith(_UTF16_32_MARKS):
        raise SpecFileError(name, "not UTF-8 text: it starts with a UTF-16/32 byte-order mark; save it as UTF-8")
    try:
        text = data.decode("utf-8-sig")  # -sig: editors on Windows prepend a UTF-8 byte-order mark
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise SpecFileError(
            name, f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})", line=line
        ) from None
    nul = text.find("\0")
    if nul >= 0:
        line, column = position(text, nul)
        raise SpecFileError(name, "contains a NUL byte: this is not a text file", line=line, column=column)
    return text


def _size(n_bytes: int) -> str:
    return f"{n_bytes / 2**20:g} MiB ({n_bytes:,} bytes)" if n_bytes >= 2**20 else f"{n_bytes:,} bytes"


def position(text: str, offset: int) -> tuple[int, int]:
    """1-based (line, column) of ``offset`` in ``text``, as an editor shows them."""
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1
