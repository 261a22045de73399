"""Organisation files (``spec/org.md``): load JSON/YAML, validate everything, return a frozen ``OrgSpec``.

Validation never stops at the first problem: a platform engineer fixing a file in git wants the whole list
in one run, each message carrying its path in the file (``teams[1].quotas[0].burst: must be ≥ guaranteed (4)``).

A key that is absent means "not managed by this file" and an empty list means "none": ``finance``,
``platform_admins`` and a team's ``quotas``/``projects``/``members`` are ``None`` in the spec when absent, so
``--prune`` with a file that omits ``platform_admins`` cannot strip every admin by accident.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import yaml
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import ValidationError

from teams.errors import OrgFileError, OrgValidationError
from teams.models import Membership, Team
from teams.validators import QUOTA_GPU_CLASSES, validate_chargeback_code, validate_namespace, validate_slug

TOP_KEYS = ("teams", "finance", "platform_admins")
TEAM_KEYS = ("name", "slug", "namespace", "weight", "quotas", "projects", "members")
QUOTA_KEYS = ("gpu_class", "guaranteed", "burst")
PROJECT_KEYS = ("code", "name")
MEMBER_KEYS = ("username", "role")
ROLES = tuple(Membership.Role.values)

# Limits mirror the model fields so a valid file never fails on a column constraint halfway through.
_TEAM_NAME_MAX, _SLUG_MAX, _PROJECT_NAME_MAX, _CODE_MAX, _USERNAME_MAX = 100, 50, 200, 64, 150
_WEIGHT_MAX = 2_147_483_647  # PositiveIntegerField on PostgreSQL
_QUOTA_PLACES, _QUOTA_MAX = 3, Decimal(10) ** 6  # DecimalField(max_digits=9, decimal_places=3)


@dataclass(frozen=True)
class QuotaSpec:
    gpu_class: str
    guaranteed: Decimal
    burst: Decimal


@dataclass(frozen=True)
class ProjectSpec:
    code: str
    name: str = ""


@dataclass(frozen=True)
class MemberSpec:
    username: str
    role: str = Membership.Role.MEMBER.value


@dataclass(frozen=True)
class TeamSpec:
    """One team; ``None`` for quotas/projects/members means the file does not manage them."""

    name: str
    slug: str
    namespace: str
    weight: int = 1
    quotas: tuple[QuotaSpec, ...] | None = None
    projects: tuple[ProjectSpec, ...] | None = None
    members: tuple[MemberSpec, ...] | None = None


@dataclass(frozen=True)
class OrgSpec:
    """A validated organisation file; ``None`` for a list means the file does not manage it."""

    teams: tuple[TeamSpec, ...] | None = None
    finance: tuple[str, ...] | None = None
    platform_admins: tuple[str, ...] | None = None


# ---------------------------------------------------------------------------------------------- loading


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
            data = yaml.load(text, Loader=_StrictYamlLoader)  # noqa: S506 -- a SafeLoader subclass
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark
            problem = " ".join(p for p in (exc.context, exc.problem) if p) or "syntax error"
            line, column = (mark.line + 1, mark.column + 1) if mark else (None, None)
            raise OrgFileError(name, f"invalid YAML: {problem}", line=line, column=column) from exc
        except yaml.YAMLError as exc:
            raise OrgFileError(name, f"invalid YAML: {exc}") from exc

    if data is None:
        raise OrgFileError(name, "file is empty; expected an object with 'teams'")
    if not isinstance(data, dict):
        raise OrgFileError(name, f"top level must be an object with 'teams', got {_kind(data)}")
    return data


# ------------------------------------------------------------------------------------------- validation


def _kind(value: object) -> str:
    """Name a value's type the way a JSON/YAML author thinks of it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float | Decimal):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


class _Errors:
    """Collects ``path: message`` lines in file order."""

    def __init__(self) -> None:
        self.messages: list[str] = []

    def add(self, path: str, message: str) -> None:
        self.messages.append(f"{path}: {message}")


def _check_keys(errors: _Errors, path: str, obj: dict[str, Any], allowed: tuple[str, ...]) -> None:
    for key in obj:
        if key not in allowed:
            where = f"{path}.{key}" if path else str(key)
            errors.add(where, f"unknown key {key!r}; allowed keys: {', '.join(allowed)}")


def _string_value(
    errors: _Errors, where: str, value: object, *, max_length: int, validator: Callable[[str], None] | None = None
) -> str | None:
    """``value`` if it is a valid non-empty string, else ``None`` after recording why not."""
    if not isinstance(value, str):
        errors.add(where, f"must be a string, got {_kind(value)}")
        return None
    if not value.strip():
        errors.add(where, "must not be empty")
        return None
    if len(value) > max_length:
        errors.add(where, f"must be at most {max_length} characters (got {len(value)})")
        return None
    if validator is not None:
        try:
            validator(value)
        except ValidationError as exc:
            errors.add(where, " ".join(exc.messages))
            return None
    return value


def _string(
    errors: _Errors,
    path: str,
    obj: dict[str, Any],
    key: str,
    *,
    max_length: int,
    required: bool = True,
    validator: Callable[[str], None] | None = None,
) -> str | None:
    """The valid string at ``obj[key]``, or ``None`` after recording why it is absent or invalid."""
    if key not in obj:
        if required:
            errors.add(f"{path}.{key}", "required")
        return None
    return _string_value(errors, f"{path}.{key}", obj[key], max_length=max_length, validator=validator)


def _list(errors: _Errors, path: str, value: object) -> list[Any] | None:
    if not isinstance(value, list):
        errors.add(path, f"must be a list, got {_kind(value)}")
        return None
    return value


def _objects(errors: _Errors, path: str, value: object, allowed: tuple[str, ...]) -> Iterable[tuple[str, dict]]:
    """Yield ``(path, object)`` for each element of a list of objects, reporting wrong shapes and keys."""
    items = _list(errors, path, value)
    for index, item in enumerate(items or ()):
        where = f"{path}[{index}]"
        if not isinstance(item, dict):
            errors.add(where, f"must be an object, got {_kind(item)}")
            continue
        _check_keys(errors, where, item, allowed)
        yield where, item


def _weight(errors: _Errors, path: str, value: object) -> int | None:
    # Booleans are ints in Python and strings are a YAML quoting accident; neither is a weight.
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        errors.add(path, f"must be a positive integer, got {_kind(value)}")
        return None
    if value != value or value in (float("inf"), float("-inf")) or value != int(value):
        errors.add(path, f"must be a positive integer, got {value}")
        return None
    if not 1 <= int(value) <= _WEIGHT_MAX:
        errors.add(path, f"must be a positive integer, got {value}")
        return None
    return int(value)


def _gpus(errors: _Errors, path: str, value: object) -> Decimal | None:
    """A non-negative GPU-equivalent count as an exact ``Decimal`` that fits the quota columns."""
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        errors.add(path, f"must be a non-negative number, got {_kind(value)}")
        return None
    try:
        # str() first: Decimal(0.1) would carry the float's binary error into the database.
        number = Decimal(str(value)) if isinstance(value, float) else Decimal(value)
    except InvalidOperation:
        errors.add(path, f"must be a non-negative number, got {value}")
        return None
    if not number.is_finite() or number < 0:
        errors.add(path, f"must be a non-negative number, got {value}")
        return None
    if number != number.quantize(Decimal(1).scaleb(-_QUOTA_PLACES)):
        errors.add(path, f"must have at most {_QUOTA_PLACES} decimal places, got {value}")
        return None
    if number >= _QUOTA_MAX:
        errors.add(path, f"must be less than {_QUOTA_MAX}, got {value}")
        return None
    return number


_username_validator = UnicodeUsernameValidator()


def _usernames(errors: _Errors, path: str, value: object) -> tuple[str, ...] | None:
    items = _list(errors, path, value)
    if items is None:
        return None
    names: list[str] = []
    for index, item in enumerate(items):
        where = f"{path}[{index}]"
        username = _string_value(errors, where, item, max_length=_USERNAME_MAX, validator=_username_validator)
        if username is None:
            continue
        if username in names:
            errors.add(where, f"duplicate username {username!r}")
            continue
        names.append(username)
    return tuple(names)


def _team(errors: _Errors, path: str, obj: dict[str, Any]) -> TeamSpec | None:
    name = _string(errors, path, obj, "name", max_length=_TEAM_NAME_MAX)
    slug = _string(errors, path, obj, "slug", max_length=_SLUG_MAX, validator=validate_slug)
    namespace = _string(errors, path, obj, "namespace", max_length=63, validator=validate_namespace)
    weight = _weight(errors, f"{path}.weight", obj["weight"]) if "weight" in obj else 1

    quotas: list[QuotaSpec] | None = None
    if "quotas" in obj:
        quotas, seen_classes = [], {}
        for where, q in _objects(errors, f"{path}.quotas", obj["quotas"], QUOTA_KEYS):
            gpu_class = _string(errors, where, q, "gpu_class", max_length=16)
            if gpu_class is not None and gpu_class not in QUOTA_GPU_CLASSES:
                errors.add(f"{where}.gpu_class", f"unknown GPU class {gpu_class!r}; use one of {', '.join(QUOTA_GPU_CLASSES)}")
                gpu_class = None
            elif gpu_class is not None and gpu_class in seen_classes:
                errors.add(f"{where}.gpu_class", f"duplicate GPU class {gpu_class!r} (also {seen_classes[gpu_class]})")
                gpu_class = None
            guaranteed = _gpus(errors, f"{where}.guaranteed", q["guaranteed"]) if "guaranteed" in q else None
            burst = _gpus(errors, f"{where}.burst", q["burst"]) if "burst" in q else None
            for key in ("guaranteed", "burst"):
                if key not in q:
                    errors.add(f"{where}.{key}", "required")
            if guaranteed is not None and burst is not None and burst < guaranteed:
                errors.add(f"{where}.burst", f"must be ≥ guaranteed ({guaranteed})")
                burst = None
            if gpu_class is not None:
                seen_classes[gpu_class] = where
                if guaranteed is not None and burst is not None:
                    quotas.append(QuotaSpec(gpu_class=gpu_class, guaranteed=guaranteed, burst=burst))

    projects: list[ProjectSpec] | None = None
    if "projects" in obj:
        projects, seen_codes = [], {}
        for where, p in _objects(errors, f"{path}.projects", obj["projects"], PROJECT_KEYS):
            code = _string(errors, where, p, "code", max_length=_CODE_MAX, validator=validate_chargeback_code)
            project_name = _string(errors, where, p, "name", max_length=_PROJECT_NAME_MAX, required=False)
            if code is not None and code in seen_codes:
                errors.add(f"{where}.code", f"duplicate project code {code!r} (also {seen_codes[code]})")
            elif code is not None:
                seen_codes[code] = where
                projects.append(ProjectSpec(code=code, name=project_name or ""))

    members: list[MemberSpec] | None = None
    if "members" in obj:
        members, seen_users = [], {}
        for where, m in _objects(errors, f"{path}.members", obj["members"], MEMBER_KEYS):
            username = _string(errors, where, m, "username", max_length=_USERNAME_MAX, validator=_username_validator)
            role = m.get("role", Membership.Role.MEMBER.value)
            if role not in ROLES:
                errors.add(f"{where}.role", f"must be one of {', '.join(ROLES)}, got {role!r}")
                role = None
            if username is not None and username in seen_users:
                errors.add(f"{where}.username", f"duplicate member {username!r} (also {seen_users[username]})")
            elif username is not None and role is not None:
                seen_users[username] = where
                members.append(MemberSpec(username=username, role=role))

    if name is None or slug is None or namespace is None or weight is None:
        return None
    return TeamSpec(
        name=name,
        slug=slug,
        namespace=namespace,
        weight=weight,
        quotas=None if quotas is None else tuple(quotas),
        projects=None if projects is None else tuple(projects),
        members=None if members is None else tuple(members),
    )


def _check_unique_in_file(errors: _Errors, teams: list[tuple[str, TeamSpec]]) -> None:
    for field in ("slug", "name", "namespace"):
        first_seen: dict[str, str] = {}
        for path, team in teams:
            value = getattr(team, field)
            if value in first_seen:
                errors.add(f"{path}.{field}", f"duplicate {field} {value!r} (also {first_seen[value]})")
            else:
                first_seen[value] = path


def _check_against_database(errors: _Errors, teams: list[tuple[str, TeamSpec]]) -> None:
    """A team is matched by slug, so a name or namespace held by another slug would break a unique column."""
    for field in ("name", "namespace"):
        values = {getattr(team, field) for _, team in teams}
        holders = dict(Team.objects.filter(**{f"{field}__in": values}).values_list(field, "slug"))
        for path, team in teams:
            holder = holders.get(getattr(team, field))
            if holder is not None and holder != team.slug:
                errors.add(
                    f"{path}.{field}",
                    f"{getattr(team, field)!r} is already used by existing team {holder!r}; "
                    f"free it first (rename that team in an earlier apply)",
                )


def validate_org(data: object) -> OrgSpec:
    """Validate parsed organisation data completely, checking the database for conflicts; write nothing.

    Returns a frozen ``OrgSpec`` only when there is no error at all; otherwise raises ``OrgValidationError``
    whose ``errors`` lists every problem in file order, each prefixed with its path.
    """
    errors = _Errors()
    if not isinstance(data, dict):
        raise OrgValidationError([f"(top level): must be an object with 'teams', got {_kind(data)}"])
    _check_keys(errors, "", data, TOP_KEYS)

    teams: list[tuple[str, TeamSpec]] | None = None
    if "teams" in data:
        teams = []
        for where, obj in _objects(errors, "teams", data["teams"], TEAM_KEYS):
            team = _team(errors, where, obj)
            if team is not None:
                teams.append((where, team))
        _check_unique_in_file(errors, teams)
    finance = _usernames(errors, "finance", data["finance"]) if "finance" in data else None
    admins = _usernames(errors, "platform_admins", data["platform_admins"]) if "platform_admins" in data else None

    if errors.messages:
        raise OrgValidationError(errors.messages)
    # Only a structurally valid file is worth a query; conflicts are reported the same way.
    if teams:
        _check_against_database(errors, teams)
        if errors.messages:
            raise OrgValidationError(errors.messages)
    return OrgSpec(
        teams=None if teams is None else tuple(team for _, team in teams),
        finance=finance,
        platform_admins=admins,
    )
