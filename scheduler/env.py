"""Typed environment readers.

Settings are read once, in ``portal/settings.py``, through these functions. Each reader either returns a
value of its type or raises :class:`EnvError` naming the variable, the junk it found and what would be
accepted, so a misconfigured deployment fails at start-up with a message a person can act on instead of
misbehaving later.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import dj_database_url
from dj_database_url import DBConfig
from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class EnvError(ImproperlyConfigured):
    """An environment variable holds a value its reader cannot accept."""


def _raw(name: str, environ: Mapping[str, str] | None) -> str | None:
    source = os.environ if environ is None else environ
    value = source.get(name)
    return None if value is None else value.strip()


def env_str(
    name: str, default: str | None = None, *, required: bool = False, environ: Mapping[str, str] | None = None
) -> str:
    value = _raw(name, environ)
    if value:
        return value
    if required or default is None:
        raise EnvError(f"{name} must be set to a non-empty value.")
    return default


def env_bool(name: str, default: bool = False, *, environ: Mapping[str, str] | None = None) -> bool:
    value = _raw(name, environ)
    if value is None:
        return default
    lowered = value.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise EnvError(f"{name}={value!r} is not a boolean: use one of 1/0, true/false, yes/no, on/off.")


def env_int(
    name: str,
    default: int,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    environ: Mapping[str, str] | None = None,
) -> int:
    value = _raw(name, environ)
    if not value:
        return default
    try:
        number = int(value)
    except ValueError:
        raise EnvError(f"{name}={value!r} is not a whole number.") from None
    _check_range(name, number, minimum, maximum)
    return number


def env_float(
    name: str,
    default: float,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    environ: Mapping[str, str] | None = None,
) -> float:
    value = _raw(name, environ)
    if not value:
        return default
    try:
        number = float(value)
    except ValueError:
        raise EnvError(f"{name}={value!r} is not a number.") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise EnvError(f"{name}={value!r} must be a finite number.")
    _check_range(name, number, minimum, maximum)
    return number


def _check_range(name: str, number: float, minimum: float | None, maximum: float | None) -> None:
    if minimum is not None and number < minimum:
        raise EnvError(f"{name}={number} is below the minimum {minimum}.")
    if maximum is not None and number > maximum:
        raise EnvError(f"{name}={number} is above the maximum {maximum}.")


def env_list(name: str, default: Sequence[str] = (), *, environ: Mapping[str, str] | None = None) -> list[str]:
    """A comma-separated list; blanks around items are ignored, empty items are junk."""
    value = _raw(name, environ)
    if value is None or value == "":
        return list(default)
    items = [item.strip() for item in value.split(",")]
    if any(not item for item in items):
        raise EnvError(f"{name}={value!r} has an empty item: separate values with single commas.")
    return items


def env_choice(name: str, choices: Sequence[str], default: str, *, environ: Mapping[str, str] | None = None) -> str:
    value = _raw(name, environ)
    if not value:
        return default
    if value not in choices:
        raise EnvError(f"{name}={value!r} is not one of: {', '.join(choices)}.")
    return value


_RATE_PERIODS = {"s": "second", "m": "minute", "h": "hour", "d": "day"}


def env_rate(name: str, default: str, *, environ: Mapping[str, str] | None = None) -> str:
    """A request rate as DRF's throttles read it, ``<count>/<period>``: ``600/min``, ``10/s``, ``5000/day``.

    DRF looks only at the period's first letter, so ``600/mango`` would quietly mean per minute; this reader
    accepts the period only as that letter or a word it starts (``m``, ``min``, ``minute``)."""
    value = _raw(name, environ) or default
    count, _, period = value.partition("/")
    word = _RATE_PERIODS.get(period[:1].lower(), "")
    if not (count.isdigit() and int(count) > 0 and word and word.startswith(period.lower())):
        raise EnvError(f"{name}={value!r} is not a rate: use <count>/<period> with a period of s, min, h or day.")
    return f"{int(count)}/{period.lower()}"


_DB_SCHEMES = ("sqlite", "postgres", "postgresql", "pgsql")


def env_database(name: str, default: str, *, environ: Mapping[str, str] | None = None) -> DBConfig:
    """A database URL (``sqlite:///path`` or ``postgres://user@host:port/name``) as a Django DATABASES entry."""
    url = _raw(name, environ) or default
    scheme = url.split("://", 1)[0] if "://" in url else ""
    if scheme not in _DB_SCHEMES:
        raise EnvError(
            f"{name}={url!r} is not a supported database URL: use sqlite:///path/to/db.sqlite3 "
            "or postgres://user:password@host:5432/dbname."
        )
    try:
        config = dj_database_url.parse(url, conn_max_age=60 if scheme != "sqlite" else 0)
    except ValueError as exc:
        raise EnvError(f"{name}={url!r} cannot be parsed: {exc}") from None
    if not config.get("NAME"):
        raise EnvError(f"{name}={url!r} names no database: add it after the last '/'.")
    return config


_REDIS_SCHEMES = ("redis", "rediss", "unix")


def env_redis_url(name: str, default: str, *, environ: Mapping[str, str] | None = None) -> str:
    url = _raw(name, environ) or default
    scheme = url.split("://", 1)[0] if "://" in url else ""
    if scheme not in _REDIS_SCHEMES:
        raise EnvError(f"{name}={url!r} is not a Redis URL: use redis://host:6379/0 (or rediss://, unix://).")
    return url
