"""Typed readers for scenario files that collect every problem instead of stopping at the first.

A scenario author fixing a file wants the whole list in one run, each message carrying the key path in the
file (``events[3].submit.gpus: must be a positive integer, got 0``). :class:`Errors` gathers the messages;
the readers return ``None`` (or a default) after recording a problem so the caller can carry on.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Any, TypeVar

from scheduler.core.sizing.bounds import text_problem

E = TypeVar("E", bound=StrEnum)

# An integer this wide is no count or duration of any job, and float() of it would overflow: readers refuse it.
_HUGE_BITS = 128


class ScenarioError(ValueError):
    """A scenario file that cannot be replayed; ``errors`` lists every problem as ``file: key path: reason``."""

    def __init__(self, source: str, errors: list[str]) -> None:
        self.source = source
        self.errors = errors
        super().__init__("\n".join(errors))


class Errors:
    """The problems found in one file, each prefixed with the file name and the key path."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.messages: list[str] = []

    def add(self, path: str, reason: str) -> None:
        where = f"{self.source}: {path}" if path else self.source
        self.messages.append(f"{where}: {reason}")

    def raise_if_any(self) -> None:
        if self.messages:
            raise ScenarioError(self.source, list(self.messages))


def join(path: str, key: str | int) -> str:
    """``join("events[3]", "submit")`` → ``events[3].submit``; integers become indexes."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def describe(value: Any) -> str:
    """A value as it appears in the file, short enough for an error message."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > _HUGE_BITS:
        # repr() of an integer over 4,300 digits raises (Python's guard against quadratic conversion).
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    if isinstance(value, dict | list) and len(value) > 20:
        return f"{'an object' if isinstance(value, dict) else 'a list'} of {len(value)} items"
    try:
        text = repr(value) if not isinstance(value, bool | type(None)) else str(value).lower().replace("none", "null")
    except (ValueError, RecursionError):  # an integer too long to write, or a structure nested too deep
        text = f"a {type(value).__name__}"
    return text if len(text) <= 60 else text[:57] + "..."


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_keys(
    errors: Errors, path: str, data: Mapping[str, Any], allowed: Iterable[str], required: Iterable[str] = ()
) -> None:
    """Record every key of ``data`` not in ``allowed`` and every ``required`` key that is missing."""
    allowed = tuple(allowed)
    for key in data:
        if key not in allowed:
            errors.add(join(path, key), f"unknown key; allowed here: {', '.join(allowed)}")
    for key in required:
        if key not in data:
            errors.add(join(path, key), "required key is missing")


def read_object(errors: Errors, path: str, value: Any) -> dict[str, Any] | None:
    if not isinstance(value, dict):
        errors.add(path, f"must be an object, got {describe(value)}")
        return None
    return value


def read_list(errors: Errors, path: str, value: Any) -> list[Any] | None:
    if not isinstance(value, list):
        errors.add(path, f"must be a list, got {describe(value)}")
        return None
    return value


def read_str(
    errors: Errors, path: str, value: Any, *, allow_empty: bool = False, max_chars: int | None = None
) -> str | None:
    """A JSON string (non-blank unless ``allow_empty``) of at most ``max_chars`` characters, with no NUL and no
    lone surrogate (:func:`scheduler.core.sizing.bounds.text_problem`)."""
    if not isinstance(value, str) or (not allow_empty and not value.strip()):
        errors.add(path, f"must be a non-empty string, got {describe(value)}")
        return None
    problem = text_problem(value)
    if problem is not None:
        errors.add(path, problem)
        return None
    if max_chars is not None and len(value) > max_chars:
        errors.add(path, f"must be at most {max_chars} characters, got {len(value)}")
        return None
    return value


def read_bool(errors: Errors, path: str, value: Any) -> bool | None:
    if not isinstance(value, bool):
        errors.add(path, f"must be true or false, got {describe(value)}")
        return None
    return value


def read_number(
    errors: Errors,
    path: str,
    value: Any,
    *,
    positive: bool = False,
    minimum: float | None = 0.0,
    maximum: float | None = None,
) -> float | None:
    """A JSON number (never a boolean); ``positive``: > 0; otherwise ≥ ``minimum`` unless that is None; and
    ≤ ``maximum`` when one is given."""
    if not is_number(value) or value != value or value in (float("inf"), float("-inf")):
        errors.add(path, f"must be a number, got {describe(value)}")
        return None
    if isinstance(value, int) and value.bit_length() > _HUGE_BITS:
        errors.add(path, f"must be a number of ordinary size, got {describe(value)}")
        return None
    if positive and value <= 0:
        errors.add(path, f"must be a positive number, got {describe(value)}")
        return None
    if minimum is not None and value < minimum:
        errors.add(path, f"must be a number ≥ {minimum:g}, got {describe(value)}")
        return None
    if maximum is not None and value > maximum:
        bound = f"{int(maximum):,}" if float(maximum).is_integer() else f"{maximum:,}"
        errors.add(path, f"must be at most {bound}, got {describe(value)}")
        return None
    return float(value)


def read_int(
    errors: Errors, path: str, value: Any, *, minimum: int | None = 1, maximum: int | None = None
) -> int | None:
    """A JSON integer (``4.0`` is accepted as 4; ``true`` is not) within ``[minimum, maximum]``."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > _HUGE_BITS:
        errors.add(path, f"must be an integer of ordinary size, got {describe(value)}")
        return None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        errors.add(path, f"must be an integer, got {describe(value)}")
        return None
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        bounds = f"between {minimum} and {maximum}" if maximum is not None else f"≥ {minimum}"
        errors.add(path, f"must be an integer {bounds}, got {value}")
        return None
    return value


def read_choice(errors: Errors, path: str, value: Any, enum: type[E]) -> E | None:
    choices = [member.value for member in enum]
    if not isinstance(value, str) or value not in choices:
        errors.add(path, f"must be one of {', '.join(choices)}; got {describe(value)}")
        return None
    return enum(value)
