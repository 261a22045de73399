"""Organisation files (``spec/org.md``): validate everything, return a frozen ``OrgSpec``.

Reading the file is :mod:`teams.orgload`'s job; ``load_org_file`` is re-exported here for callers.

Validation never stops at the first problem: a platform engineer fixing a file in git wants the whole list
in one run, each message carrying its path in the file (``teams[1].quotas[0].burst: must be ≥ guaranteed (4)``).

A key that is absent means "not managed by this file" and an empty list means "none": ``finance``,
``platform_admins`` and a team's ``quotas``/``projects``/``members``/``checkpoint_claim``/``max_priority``/
``production_kinds``/``sso_groups`` (and the top-level ``sso_groups``) are ``None`` in the spec when absent (a new
team gets the model's default: ``high``, production for inference), so
``--prune`` with a file that omits ``platform_admins`` cannot strip every admin by accident.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import ValidationError

from teams.errors import OrgValidationError
from teams.grants import JOB_KINDS, PRIORITIES, kinds_normalized
from teams.models import Membership, Team
from teams.orgload import kind_of as _kind
from teams.orgload import load_org_file
from teams.roles import FINANCE, PLATFORM_ADMIN
from teams.validators import (
    QUOTA_GPU_CLASSES,
    validate_chargeback_code,
    validate_claim_name,
    validate_namespace,
    validate_slug,
)

__all__ = [
    "MemberSpec",
    "OrgSpec",
    "ProjectSpec",
    "QuotaSpec",
    "SsoGroupSpec",
    "TeamSpec",
    "load_org_file",
    "validate_org",
]

TOP_KEYS = ("teams", "finance", "platform_admins", "sso_groups")
TEAM_KEYS = (
    "name",
    "slug",
    "namespace",
    "weight",
    "checkpoint_claim",
    "max_priority",
    "production_kinds",
    "quotas",
    "projects",
    "members",
    "sso_groups",
)
# Single sign-on (docs/security.md): the provider's groups that give a team role, and the organisation-wide ones.
TEAM_SSO_KEYS = ("lead", "member")
ORG_SSO_KEYS = ("finance", "platform_admins")
_ORG_SSO_ROLES = {"finance": FINANCE, "platform_admins": PLATFORM_ADMIN}  # file key → role (teams.roles)
_GROUP_MAX = 255  # SsoGroup.group
QUOTA_KEYS = ("gpu_class", "guaranteed", "burst")
PROJECT_KEYS = ("code", "name")
MEMBER_KEYS = ("username", "role")
ROLES = tuple(Membership.Role.values)

# Limits mirror the model fields so a valid file never fails on a column constraint halfway through.
_TEAM_NAME_MAX, _SLUG_MAX, _CODE_MAX, _USERNAME_MAX, _CLAIM_MAX = 100, 50, 64, 150, 253
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
class SsoGroupSpec:
    """A provider group and the role it gives: ``lead``/``member`` in a team, ``finance``/``platform-admin``
    across the organisation."""

    group: str
    role: str


@dataclass(frozen=True)
class TeamSpec:
    """One team; ``None`` for quotas/projects/members/checkpoint_claim means the file does not manage them."""

    name: str
    slug: str
    namespace: str
    weight: int = 1
    checkpoint_claim: str | None = None  # "": Microcosm's own claim; a name: the team's existing claim
    max_priority: str | None = None  # the priority grant (teams.grants)
    production_kinds: tuple[str, ...] | None = None
    quotas: tuple[QuotaSpec, ...] | None = None
    projects: tuple[ProjectSpec, ...] | None = None
    members: tuple[MemberSpec, ...] | None = None
    sso_groups: tuple[SsoGroupSpec, ...] | None = None


@dataclass(frozen=True)
class OrgSpec:
    """A validated organisation file; ``None`` for a list means the file does not manage it."""

    teams: tuple[TeamSpec, ...] | None = None
    finance: tuple[str, ...] | None = None
    platform_admins: tuple[str, ...] | None = None
    sso_groups: tuple[SsoGroupSpec, ...] | None = None  # the organisation-wide roles' groups


# ------------------------------------------------------------------------------------------- validation


def _show(value: object) -> str:
    kind = _kind(value)
    return str(value) if kind == "number" else f"string {value!r}" if kind == "string" else kind


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


_MISSING: Any = object()  # marks an absent key, so "required" is reported where the value is checked


def _string(
    errors: _Errors, where: str, value: object, *, max_length: int, validator: Callable[[str], None] | None = None
) -> str | None:
    """``value`` if it is a valid non-empty string, else ``None`` after recording why not."""
    if value is _MISSING:
        errors.add(where, "required")
    elif not isinstance(value, str):
        errors.add(where, f"must be a string, got {_kind(value)}")
    elif not value.strip():
        errors.add(where, "must not be empty")
    elif len(value) > max_length:
        errors.add(where, f"must be at most {max_length} characters (got {len(value)})")
    else:
        try:
            if validator is not None:
                validator(value)
        except ValidationError as exc:
            errors.add(where, " ".join(exc.messages))
        else:
            return value
    return None


def _field(errors: _Errors, path: str, obj: dict[str, Any], key: str, **checks: Any) -> str | None:
    """The valid string at required ``obj[key]`` (see ``_string`` for ``checks``)."""
    return _string(errors, f"{path}.{key}", obj.get(key, _MISSING), **checks)


def _list(errors: _Errors, path: str, value: object) -> list[Any]:
    if isinstance(value, list):
        return value
    errors.add(path, f"must be a list, got {_kind(value)}")
    return []


def _objects(errors: _Errors, path: str, value: object, allowed: tuple[str, ...]) -> Iterable[tuple[str, dict]]:
    """Yield ``(path, object)`` for each element of a list of objects, reporting wrong shapes and keys."""
    for index, item in enumerate(_list(errors, path, value)):
        where = f"{path}[{index}]"
        if not isinstance(item, dict):
            errors.add(where, f"must be an object, got {_kind(item)}")
            continue
        _check_keys(errors, where, item, allowed)
        yield where, item


def _number(value: object) -> Decimal | None:
    """An exact finite ``Decimal`` for a JSON/YAML number; ``None`` for booleans, strings, inf and nan."""
    # Booleans are ints in Python and a quoted number is a YAML accident; neither is accepted as a number.
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        return None
    # str() first: Decimal(0.1) would carry the float's binary error into the database.
    number = Decimal(str(value)) if isinstance(value, float) else Decimal(value)
    return number if number.is_finite() else None


def _weight(errors: _Errors, path: str, value: object) -> int | None:
    number = _number(value)
    if number is None or number != number.to_integral_value() or not 1 <= number <= _WEIGHT_MAX:
        errors.add(path, f"must be a positive integer, got {_show(value)}")
        return None
    return int(number)


def _gpus(errors: _Errors, path: str, value: object) -> Decimal | None:
    """A non-negative GPU-equivalent count as an exact ``Decimal`` that fits the quota columns."""
    number = None if value is _MISSING else _number(value)
    if value is _MISSING:
        errors.add(path, "required")
    elif number is None or number < 0:
        errors.add(path, f"must be a non-negative number, got {_show(value)}")
    elif number >= _QUOTA_MAX:
        errors.add(path, f"must be less than {_QUOTA_MAX}, got {value}")
    elif number != number.quantize(Decimal(1).scaleb(-_QUOTA_PLACES)):
        errors.add(path, f"must have at most {_QUOTA_PLACES} decimal places, got {value}")
    else:
        return number
    return None


_username_validator = UnicodeUsernameValidator()


def _usernames(errors: _Errors, path: str, value: object) -> tuple[str, ...]:
    names: list[str] = []
    for index, item in enumerate(_list(errors, path, value)):
        where = f"{path}[{index}]"
        username = _string(errors, where, item, max_length=_USERNAME_MAX, validator=_username_validator)
        if username in names:
            errors.add(where, f"duplicate username {username!r}")
        elif username is not None:
            names.append(username)
    return tuple(names)


def _quotas(errors: _Errors, path: str, value: object) -> tuple[QuotaSpec, ...]:
    quotas: list[QuotaSpec] = []
    seen: dict[str, str] = {}
    for where, q in _objects(errors, path, value, QUOTA_KEYS):
        gpu_class = _field(errors, where, q, "gpu_class", max_length=16)
        if gpu_class is not None and gpu_class not in QUOTA_GPU_CLASSES:
            errors.add(
                f"{where}.gpu_class", f"unknown GPU class {gpu_class!r}; use one of {', '.join(QUOTA_GPU_CLASSES)}"
            )
            gpu_class = None
        elif gpu_class in seen:
            errors.add(f"{where}.gpu_class", f"duplicate GPU class {gpu_class!r} (also {seen[gpu_class]})")
            gpu_class = None
        guaranteed = _gpus(errors, f"{where}.guaranteed", q.get("guaranteed", _MISSING))
        burst = _gpus(errors, f"{where}.burst", q.get("burst", _MISSING))
        if guaranteed is not None and burst is not None and burst < guaranteed:
            errors.add(f"{where}.burst", f"must be ≥ guaranteed ({guaranteed})")
        elif gpu_class is not None and guaranteed is not None and burst is not None:
            quotas.append(QuotaSpec(gpu_class=gpu_class, guaranteed=guaranteed, burst=burst))
        if gpu_class is not None:
            seen[gpu_class] = where
    return tuple(quotas)


def _projects(errors: _Errors, path: str, value: object) -> tuple[ProjectSpec, ...]:
    projects: list[ProjectSpec] = []
    seen: dict[str, str] = {}
    for where, p in _objects(errors, path, value, PROJECT_KEYS):
        code = _field(errors, where, p, "code", max_length=_CODE_MAX, validator=validate_chargeback_code)
        # The name is optional and may be "": the model's column is blank=True.
        name = "" if p.get("name", "") == "" else _field(errors, where, p, "name", max_length=200)
        if code in seen:
            errors.add(f"{where}.code", f"duplicate project code {code!r} (also {seen[code]})")
        elif code is not None:
            seen[code] = where
            projects.append(ProjectSpec(code=code, name=name or ""))
    return tuple(projects)


def _members(errors: _Errors, path: str, value: object) -> tuple[MemberSpec, ...]:
    members: list[MemberSpec] = []
    seen: dict[str, str] = {}
    for where, m in _objects(errors, path, value, MEMBER_KEYS):
        username = _field(errors, where, m, "username", max_length=_USERNAME_MAX, validator=_username_validator)
        role = m.get("role", Membership.Role.MEMBER.value)
        if role not in ROLES:
            errors.add(f"{where}.role", f"must be one of {', '.join(ROLES)}, got {role!r}")
        if username in seen:
            errors.add(f"{where}.username", f"duplicate member {username!r} (also {seen[username]})")
        elif username is not None and role in ROLES:
            seen[username] = where
            members.append(MemberSpec(username=username, role=role))
    return tuple(members)


def _team(errors: _Errors, path: str, obj: dict[str, Any]) -> tuple[TeamSpec | None, dict[str, str]]:
    """The team at ``path`` (``None`` if invalid) and its identifying fields that are valid on their own.

    The identity lets uniqueness be checked even for a team with other errors, so one run reports all.
    """
    name = _field(errors, path, obj, "name", max_length=_TEAM_NAME_MAX)
    slug = _field(errors, path, obj, "slug", max_length=_SLUG_MAX, validator=validate_slug)
    namespace = _field(errors, path, obj, "namespace", max_length=63, validator=validate_namespace)
    weight = _weight(errors, f"{path}.weight", obj["weight"]) if "weight" in obj else 1
    claim = _claim(errors, f"{path}.checkpoint_claim", obj["checkpoint_claim"]) if "checkpoint_claim" in obj else None
    ceiling = _max_priority(errors, f"{path}.max_priority", obj["max_priority"]) if "max_priority" in obj else None
    kinds = _production_kinds(errors, f"{path}.production_kinds", obj.get("production_kinds", _MISSING))
    # Absent stays None (not managed by the file); present is validated even if the team is otherwise broken.
    parts = {key: parse(errors, f"{path}.{key}", obj[key]) if key in obj else None for key, parse in _PARTS}
    identity = {key: value for key, value in (("name", name), ("slug", slug), ("namespace", namespace)) if value}
    broken = ("max_priority" in obj and ceiling is None) or ("production_kinds" in obj and kinds is None)
    if name is None or slug is None or namespace is None or weight is None or broken:
        return None, identity
    team = TeamSpec(
        name=name,
        slug=slug,
        namespace=namespace,
        weight=weight,
        checkpoint_claim=claim,
        max_priority=ceiling,
        production_kinds=kinds,
        **parts,
    )
    return team, identity


def _max_priority(errors: _Errors, path: str, value: object) -> str | None:
    """The team's highest priority (teams.grants), or None after recording why ``value`` is not one."""
    if isinstance(value, str) and value in PRIORITIES:
        return value
    errors.add(path, f"must be one of {', '.join(PRIORITIES)} (highest first), got {_show(value)}")
    return None


def _production_kinds(errors: _Errors, path: str, value: object) -> tuple[str, ...] | None:
    """The job kinds that may run at production (teams.grants): a non-empty list of distinct kinds; None when
    absent or after recording why ``value`` is not one."""
    if value is _MISSING:
        return None
    if not isinstance(value, list) or not value:
        shown = "an empty list" if value == [] else _show(value)
        errors.add(
            path,
            f"must be a non-empty list of job kinds ({', '.join(JOB_KINDS)}), got {shown}; to grant no production, "
            "set max_priority below production",
        )
        return None
    ok = True
    for index, kind in enumerate(value):
        if not isinstance(kind, str) or kind not in JOB_KINDS:
            errors.add(f"{path}[{index}]", f"must be a job kind ({', '.join(JOB_KINDS)}), got {_show(kind)}")
            ok = False
        elif kind in value[:index]:
            errors.add(f"{path}[{index}]", f"duplicate job kind {kind!r}")
            ok = False
    return tuple(kinds_normalized(value)) if ok else None


def _claim(errors: _Errors, path: str, value: object) -> str | None:
    """The team's checkpoint claim: "" (Microcosm creates its own) or an existing claim's name; None after
    recording why ``value`` is neither."""
    if value == "":
        return ""
    return _string(errors, path, value, max_length=_CLAIM_MAX, validator=validate_claim_name)


def _sso_groups(
    errors: _Errors, path: str, value: object, keys: tuple[str, ...], roles: dict[str, str]
) -> tuple[SsoGroupSpec, ...]:
    """``{key: [group, ...]}`` for each role key: every group a non-empty string, named once across the keys
    (a group that gave two roles in one place would leave the reader to guess which one wins)."""
    if not isinstance(value, dict):
        errors.add(path, f"must be an object with {' and/or '.join(keys)} lists of group names, got {_kind(value)}")
        return ()
    _check_keys(errors, path, value, keys)
    groups: list[SsoGroupSpec] = []
    seen: dict[str, str] = {}
    for key in keys:
        for index, item in enumerate(_list(errors, f"{path}.{key}", value.get(key, []))):
            where = f"{path}.{key}[{index}]"
            group = _string(errors, where, item, max_length=_GROUP_MAX)
            if group is None:
                continue
            if group in seen:
                errors.add(where, f"group {group!r} is listed twice (also {seen[group]}); give each group one role")
                continue
            seen[group] = where
            groups.append(SsoGroupSpec(group=group, role=roles[key]))
    return tuple(groups)


def _team_sso_groups(errors: _Errors, path: str, value: object) -> tuple[SsoGroupSpec, ...]:
    return _sso_groups(errors, path, value, TEAM_SSO_KEYS, {key: key for key in TEAM_SSO_KEYS})


_PARTS: tuple[tuple[str, Callable[[_Errors, str, object], tuple[Any, ...]]], ...] = (
    ("quotas", _quotas),
    ("projects", _projects),
    ("members", _members),
    ("sso_groups", _team_sso_groups),
)


def _check_unique_in_file(errors: _Errors, identities: list[tuple[str, dict[str, str]]]) -> None:
    for field in ("slug", "name", "namespace"):
        first_seen: dict[str, str] = {}
        for path, identity in identities:
            value = identity.get(field)
            if value is None:
                continue
            if value in first_seen:
                errors.add(f"{path}.{field}", f"duplicate {field} {value!r} (also {first_seen[value]})")
            else:
                first_seen[value] = path


def _check_against_database(errors: _Errors, identities: list[tuple[str, dict[str, str]]]) -> None:
    """A team is matched by slug, so a name or namespace held by another slug would break a unique column.

    Deliberately strict: even if the file also moves the holder off that value, the update order inside
    one transaction would trip the unique constraint, so the move has to be applied in two steps.
    """
    with_slug = [(path, identity) for path, identity in identities if "slug" in identity]
    for field in ("name", "namespace"):
        values = {identity[field] for _, identity in with_slug if field in identity}
        if not values:
            continue
        holders = dict(Team.objects.filter(**{f"{field}__in": values}).values_list(field, "slug"))
        for path, identity in with_slug:
            holder = holders.get(identity.get(field, ""))
            if holder is not None and holder != identity["slug"]:
                errors.add(
                    f"{path}.{field}",
                    f"{identity[field]!r} is already used by existing team {holder!r}; "
                    "free it in an earlier apply first",
                )


def validate_org(data: object) -> OrgSpec:
    """Validate parsed organisation data completely, checking the database for conflicts; write nothing.

    Returns a frozen ``OrgSpec`` only when there is no error at all; otherwise raises ``OrgValidationError``
    whose ``errors`` lists every problem found, each prefixed with its path (database conflicts last).
    """
    errors = _Errors()
    if not isinstance(data, dict):
        raise OrgValidationError([f"(top level): must be an object with 'teams', got {_kind(data)}"])
    _check_keys(errors, "", data, TOP_KEYS)

    teams: list[TeamSpec] | None = None
    identities: list[tuple[str, dict[str, str]]] = []
    if "teams" in data:
        teams = []
        for where, obj in _objects(errors, "teams", data["teams"], TEAM_KEYS):
            team, identity = _team(errors, where, obj)
            identities.append((where, identity))
            if team is not None:
                teams.append(team)
        _check_unique_in_file(errors, identities)
    finance = _usernames(errors, "finance", data["finance"]) if "finance" in data else None
    admins = _usernames(errors, "platform_admins", data["platform_admins"]) if "platform_admins" in data else None
    sso = None
    if "sso_groups" in data:
        sso = _sso_groups(errors, "sso_groups", data["sso_groups"], ORG_SSO_KEYS, _ORG_SSO_ROLES)
    _check_against_database(errors, identities)

    if errors.messages:
        raise OrgValidationError(errors.messages)
    return OrgSpec(
        teams=None if teams is None else tuple(teams),
        finance=finance,
        platform_admins=admins,
        sso_groups=sso,
    )
