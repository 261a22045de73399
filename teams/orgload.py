"""Reading organisation files (``spec/org.md``) into plain data: JSON or YAML, strictly.

The reading itself is :func:`scheduler.specs.files.read_spec_file`, the one reader every command uses for
a person's file: size cap, UTF-8 without NUL, safe YAML (no objects, no alias bombs), capped nesting and
number length, duplicate keys and JSON ``NaN``/``Infinity`` refused. Here fractions come back as ``Decimal``
so quotas keep their exact value, and its error becomes an :class:`OrgFileError`. What the data *means* is
checked by :mod:`teams.orgfile`.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

from scheduler.specs.files import SpecFileError, kind_of, read_spec_file
from teams.errors import OrgFileError

__all__ = ["kind_of", "load_org_file"]


def load_org_file(path: str | Path) -> dict[str, Any]:
    """Read a ``.json``, ``.yaml`` or ``.yml`` organisation file into plain data (not yet validated).

    JSON numbers with a fraction come back as ``Decimal`` so quotas keep their exact value. Raises
    ``OrgFileError`` (with line and column when the reader gives them) if the file is missing, unreadable,
    of another type, not UTF-8 text, syntactically invalid, beyond the reader's limits, or its top level is
    not an object.
    """
    try:
        return read_spec_file(path, expected="an object with 'teams'", allow_yaml=True, parse_float=Decimal)
    except SpecFileError as exc:
        raise OrgFileError(exc.path, exc.message, line=exc.line, column=exc.column) from None
