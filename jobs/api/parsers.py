"""The API's JSON parser (``REST_FRAMEWORK["DEFAULT_PARSER_CLASSES"]``): DRF's, with the limits a body must
respect before any serializer or service sees it.

- at most ``DATA_UPLOAD_MAX_MEMORY_SIZE`` bytes (DRF reads the stream itself and never checks Django's
  limit): 413 ``{"detail": "request body larger than N bytes"}``;
- UTF-8 only: 400;
- nested at most :data:`MAX_DEPTH` levels, checked on the text *before* it is parsed (``json.loads`` of a body
  nested 100,000 deep raises ``RecursionError``, and one nested 900 deep would recurse in every walk after it):
  400 ``{"detail": "body nested deeper than 32 levels"}``;
- no NUL character and no lone surrogate (``"\\ud800"``) in any string, key or value, and no number too large
  for a float (``1e400``): PostgreSQL refuses the first, UTF-8 cannot encode the second, the third is ``inf``.
  400 with one entry per field path (``{"model.dtype": ["…"], "command[1]": ["…"]}``, the paths of
  ``jobs.selectors.rightsizing.errors_by_key``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from rest_framework import status
from rest_framework.exceptions import APIException, ParseError, ValidationError
from rest_framework.parsers import JSONParser
from rest_framework.utils import json as drf_json

from scheduler.core import text_problem

MAX_DEPTH = 32
# A body with thousands of bad strings gets the first ones, not a response as big as the body.
MAX_FIELD_ERRORS = 50

# A JSON string, unrolled so that matching is linear (no alternation under a star), and the brackets outside it.
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")


class RequestBodyTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "request_too_large"

    def __init__(self, limit: int) -> None:
        super().__init__(f"request body larger than {limit} bytes")


def nesting_depth(text: str, *, stop_above: int) -> int:
    """How deep arrays and objects nest in the JSON ``text`` (brackets inside strings do not count); stops
    counting once past ``stop_above``. Malformed text gets some number: ``json.loads`` then says what is wrong."""
    depth = deepest = 0
    for match in _BRACKET.finditer(_STRING.sub('""', text)):
        if match.group() in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > stop_above:
                    break
        else:
            depth -= 1
    return deepest


def value_problems(value: Any, path: str = "") -> dict[str, list[str]]:
    """``{field path: [message]}`` for every string with a NUL or a lone surrogate and every non-finite
    number in a decoded JSON value (depth already bounded, so the recursion is too)."""
    problems: dict[str, list[str]] = {}

    def add(where: str, message: str) -> None:
        if len(problems) < MAX_FIELD_ERRORS:
            problems.setdefault(where or "non_field_errors", []).append(message)

    def walk(item: Any, where: str) -> None:
        if isinstance(item, str):
            message = text_problem(item)
            if message:
                add(where, message)
        elif isinstance(item, float) and not math.isfinite(item):
            add(where, "number too large")
        elif isinstance(item, Mapping):
            for key, child in item.items():
                message = text_problem(key)
                if message:
                    add(where, f"a key {message}")
                    continue
                walk(child, f"{where}.{key}" if where else key)
        elif isinstance(item, list):
            for index, child in enumerate(item):
                walk(child, f"{where}[{index}]")

    walk(value, path)
    return problems


class GuardedJSONParser(JSONParser):
    """DRF's :class:`~rest_framework.parsers.JSONParser` (same media type, same strictness about ``NaN``) with
    the limits of the module docstring."""

    max_depth = MAX_DEPTH

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None) -> Any:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        raw = stream.read() if limit is None else stream.read(limit + 1)
        if limit is not None and len(raw) > limit:
            raise RequestBodyTooLarge(limit)
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            text = raw.decode(encoding)
        except (UnicodeDecodeError, LookupError):
            raise ParseError(f"JSON parse error - the body is not valid {encoding.upper()} text") from None
        if nesting_depth(text, stop_above=self.max_depth) > self.max_depth:
            raise ParseError(f"body nested deeper than {self.max_depth} levels")
        try:
            data = json.loads(text, parse_constant=drf_json.strict_constant if self.strict else None)
        except ValueError as exc:  # JSONDecodeError, and int() refusing more than 4,300 digits
            raise ParseError(f"JSON parse error - {exc}") from None
        problems = value_problems(data)
        if problems:
            raise ValidationError(problems)
        return data
