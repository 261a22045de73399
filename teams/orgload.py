"""Reading organisation files (``spec/org.md``) into plain data: JSON or YAML, strictly.

Strict means: duplicate keys are errors (YAML and JSON both silently keep the last one), JSON ``NaN`` and
``Infinity`` are refused, and fractions come back as ``Decimal`` so quotas keep their exact value. What the
data *means* is checked by :mod:`teams.orgfile`.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml

from teams.errors import OrgFileError


class _StrictYamlLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that rejects duplicate keys, which plain YAML silently resolves to the last one."""


def _construct_mapping(loader: _StrictYamlLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            duplicate = key in seen
            seen.add(key)
        except TypeError:  # unhashable key: construct_mapping below reports it with its position
            continue
        if duplicate:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
    return loader.construct_mapping(node, deep=deep)


_StrictYamlLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def _json_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number an organisation file may contain")


def load_org_file(path: str | Path) -> dict[str, Any]:
    """Read a ``.json``, ``.yaml`` or ``.yml`` organisation file into plain data (not yet validated).

    JSON numbers with a fraction come back as ``Decimal`` so quotas keep their exact value. Raises
    ``OrgFileError`` (with line and column when the parser gives them) if the file is missing, unreadable,
    of another type, syntactically invalid, or its top level is not an object.
    """
    name = str(path)
    suffix = Path(path).suffix.lower()
    if suffix not in (".json", ".yaml", ".yml"):
        raise OrgFileError(name, "unsupported file type; use .json, .yaml or .yml")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise OrgFileError(name, "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise OrgFileError(name, f"cannot read file: {exc}") from exc

    if suffix == ".json":
        try:
            data = json.loads(text, parse_float=Decimal, parse_constant=_json_constant, object_pairs_hook=_json_object)
        except json.JSONDecodeError as exc:
            raise OrgFileError(name, f"invalid JSON: {exc.msg}", line=exc.lineno, column=exc.colno) from exc
        except ValueError as exc:  # raised by our hooks, which have no position to give
            raise OrgFileError(name, f"invalid JSON: {exc}") from exc
    else:
        try:
            data = yaml.load(text, Loader=_StrictYamlLoader)  # SafeLoader subclass: no arbitrary objects
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark
            problem = exc.problem or "syntax error"
            if exc.context and exc.context_mark:  # where the unfinished construct began is often the real bug
                problem += f" ({exc.context} started at line {exc.context_mark.line + 1})"
            elif exc.context:
                problem += f" ({exc.context})"
            line, column = (mark.line + 1, mark.column + 1) if mark else (None, None)
            raise OrgFileError(name, f"invalid YAML: {problem}", line=line, column=column) from exc
        except yaml.YAMLError as exc:
            raise OrgFileError(name, f"invalid YAML: {exc}") from exc

    if data is None:
        raise OrgFileError(name, "file is empty; expected an object with 'teams'")
    if not isinstance(data, dict):
        raise OrgFileError(name, f"top level must be an object with 'teams', got {kind_of(data)}")
    return data


def kind_of(value: object) -> str:
    """Name a value's type the way a JSON/YAML author thinks of it (bool first: it is an int in Python)."""
    names = ((type(None), "null"), (bool, "boolean"), (int | float | Decimal, "number"), (str, "string"))
    names += ((list, "list"), (dict, "object"))
    return next((name for types, name in names if isinstance(value, types)), type(value).__name__)
