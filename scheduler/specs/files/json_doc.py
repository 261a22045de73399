"""JSON text to plain data, refusing what ``json.loads`` would crash on or silently accept."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from scheduler.specs.files.text import MAX_DEPTH, MAX_DIGITS, SpecFileError, position

# Outside strings: brackets (for the depth), over-long digit runs and the non-JSON constants. A string is
# matched whole first so nothing inside it counts; an unterminated one (a lone quote) ends the scan and
# json.loads reports it. The string pattern is the unrolled loop, linear on any input.
_JSON_TOKEN = re.compile(
    r'"[^"\\]*(?:\\.[^"\\]*)*"|(?P<quote>")|(?P<open>[\[{])|(?P<close>[\]}])'
    rf"|(?P<digits>[0-9]{{{MAX_DIGITS + 1},}})|(?P<constant>NaN|-?Infinity)",
    re.DOTALL,
)


class _JsonRefusal(ValueError):
    """Raised by the decoder hooks, which have no position to give."""


def load_json(name: str, text: str, parse_float: Callable[[str], Any]) -> Any:
    _scan_json(name, text)
    try:
        return json.loads(
            text,
            parse_float=parse_float,
            parse_int=_json_int,
            parse_constant=_json_constant,
            object_pairs_hook=_json_object,
        )
    except json.JSONDecodeError as exc:
        raise SpecFileError(name, f"invalid JSON: {exc.msg}", line=exc.lineno, column=exc.colno) from None
    except _JsonRefusal as exc:
        raise SpecFileError(name, f"invalid JSON: {exc}") from None
    except RecursionError:  # the scan caps depth far below this; kept so no limit change can bring it back
        raise SpecFileError(name, f"nested deeper than {MAX_DEPTH} levels") from None


def _scan_json(name: str, text: str) -> None:
    """Refuse what ``json.loads`` would crash on or silently accept, with the line and column of it."""
    depth = 0
    for match in _JSON_TOKEN.finditer(text):
        kind = match.lastgroup
        if kind is None:  # a whole string
            continue
        if kind == "quote":
            return
        if kind == "open":
            depth += 1
            if depth > MAX_DEPTH:
                problem = f"nested deeper than {MAX_DEPTH} levels"
                break
        elif kind == "close":
            depth -= 1
        elif kind == "digits":
            problem = f"a number with more than {MAX_DIGITS} digits"
            break
        else:
            problem = f"invalid JSON: {match.group()} is not a number (JSON has no NaN or Infinity)"
            break
    else:
        return
    line, column = position(text, match.start())
    raise SpecFileError(name, problem, line=line, column=column)


def _json_int(text: str) -> int:
    if len(text) > MAX_DIGITS:  # the scan caught it already; this keeps int() from ever raising
        raise _JsonRefusal(f"a number with more than {MAX_DIGITS} digits")
    return int(text)


def _json_constant(name: str) -> Any:
    raise _JsonRefusal(f"{name} is not a number (JSON has no NaN or Infinity)")


def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _JsonRefusal(f"duplicate key {key!r}")
        result[key] = value
    return result
