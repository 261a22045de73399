"""Reading a file a person hands a command (a job spec, an organisation file, a scenario, a trace), safely.

Every command that reads a user's file goes through here, so a hostile or broken file gets the same answer
everywhere: one :class:`SpecFileError` whose text is ``file:line:column: what is wrong`` (or ``file: key path:
what is wrong``) and never a traceback. The limits exist because the standard parsers fail in ways a command
cannot report well:

- the bytes are capped (:data:`MAX_BYTES`) and read in one bounded read, so ``/dev/zero`` or a 4 GiB log
  passed by mistake fails at once instead of filling memory;
- the text must be UTF-8 without NUL bytes: the error names the first bad byte and its offset, where a plain
  ``read_text`` raises ``UnicodeDecodeError`` and a NUL would reach PostgreSQL, which refuses it;
- JSON nesting is capped (:data:`MAX_DEPTH`) before ``json.loads`` sees the text (its C scanner raises
  ``RecursionError`` near 1,000 levels, and ``repr`` of a deep value in an error message can too), and so is
  the length of a number (:data:`MAX_DIGITS`; Python refuses to convert an integer of 4,300+ digits);
- YAML is read with a safe loader that builds only JSON's kinds of value (no ``!!python/…`` objects, no
  ``!!binary`` or sets; a date stays the string it was written as), caps nesting, keys must be strings
  (``yes:`` and ``1:`` are not), refuses recursive aliases and stops a document whose
  aliases expand beyond :data:`MAX_VALUES` values (the "billion laughs" file: a few hundred bytes that
  expand to 10⁹ strings);
- duplicate keys are errors (both parsers silently keep the last one), ``NaN``/``Infinity`` are not JSON,
  and a string holding a NUL or a lone surrogate (``"\\u0000"``, ``"\\ud800"``) is refused where it is found,
  by key path: neither can be stored or printed.

What the data *means* is the caller's business (``scheduler.sim.scenario``, ``teams.orgfile``, the job
spec readers); this module only promises plain JSON data: dicts with string keys, lists, strings, numbers,
booleans and None. Pure Python: no Django.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from scheduler.core.sizing.bounds import text_problem
from scheduler.specs.fields import join
from scheduler.specs.files.json_doc import load_json
from scheduler.specs.files.text import (
    JSON_SUFFIXES,
    MAX_BYTES,
    MAX_DEPTH,
    MAX_DIGITS,
    MAX_VALUES,
    YAML_SUFFIXES,
    SpecFileError,
    kind_of,
    read_text,
)
from scheduler.specs.files.yaml_doc import load_yaml

__all__ = [
    "MAX_BYTES",
    "MAX_DEPTH",
    "MAX_DIGITS",
    "MAX_VALUES",
    "SpecFileError",
    "kind_of",
    "read_spec_file",
    "read_text",
]


def read_spec_file(
    path: str | Path,
    *,
    expected: str = "an object",
    allow_yaml: bool = False,
    parse_float: Callable[[str], Any] = float,
    max_bytes: int = MAX_BYTES,
) -> dict[str, Any]:
    """The JSON object (or, with ``allow_yaml``, YAML mapping) in ``path`` as plain data, not yet validated.

    Without ``allow_yaml`` the text is JSON whatever the file is called (so ``--spec <(...)`` works); with
    it the suffix chooses: ``.json``, ``.yaml`` or ``.yml``. ``expected`` names the top level in messages
    (``"an object with 'teams'"``); ``parse_float`` converts JSON fractions (``Decimal`` keeps them exact).
    Raises :class:`SpecFileError` on the first problem (module docstring).
    """
    name = str(path)
    use_yaml = False
    if allow_yaml:
        suffix = Path(path).suffix.lower()
        if suffix not in JSON_SUFFIXES + YAML_SUFFIXES:
            raise SpecFileError(name, "unsupported file type; use .json, .yaml or .yml")
        use_yaml = suffix in YAML_SUFFIXES
    text = read_text(path, max_bytes=max_bytes)
    if not text.strip():
        raise SpecFileError(name, f"file is empty; expected {expected}")
    data = load_yaml(name, text) if use_yaml else load_json(name, text, parse_float)
    if data is None and use_yaml:  # only comments, or a lone "---"
        raise SpecFileError(name, f"file is empty; expected {expected}")
    if not isinstance(data, dict):
        raise SpecFileError(name, f"top level must be {expected}, got {kind_of(data)}")
    _check_values(name, data)
    return data


def _check_values(name: str, data: dict[str, Any]) -> None:
    """Refuse strings that cannot be stored or printed, by key path; count the values (iteratively)."""
    stack: list[tuple[str, Any]] = [("", data)]
    count = 0
    while stack:
        path, value = stack.pop()
        count += 1
        if count > MAX_VALUES:
            raise SpecFileError(name, f"holds more than {MAX_VALUES:,} values")
        if isinstance(value, str):
            _check_string(name, path, value)
        elif isinstance(value, dict):
            for key in value:
                _check_string(name, path, key, key=True)
            # Reversed so the first problem reported is the first in the file.
            stack.extend((join(path, key), item) for key, item in reversed(value.items()))
        elif isinstance(value, list):
            stack.extend((join(path, index), item) for index, item in reversed(list(enumerate(value))))


def _check_string(name: str, path: str, text: str, *, key: bool = False) -> None:
    problem = text_problem(text)  # the job-spec readers' own wording for the same two faults
    if problem is not None:
        raise SpecFileError(name, f"a key {problem}" if key else problem, key=path or "(top level)")
