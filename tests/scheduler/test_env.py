"""The typed env readers accept what they document and reject junk with a message that says how to fix it."""

from __future__ import annotations

import pytest

from scheduler.env import (
    EnvError,
    env_bool,
    env_choice,
    env_database,
    env_float,
    env_int,
    env_list,
    env_redis_url,
    env_str,
)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("1", True), ("true", True), ("YES", True), ("on", True), ("0", False), ("false", False), ("off", False)],
)
def test_env_bool_accepts_the_usual_spellings(raw: str, expected: bool) -> None:
    assert env_bool("DEBUG", environ={"DEBUG": raw}) is expected


def test_env_bool_default_when_unset() -> None:
    assert env_bool("DEBUG", default=True, environ={}) is True


@pytest.mark.parametrize("junk", ["maybe", "2", "tru", "y e s"])
def test_env_bool_rejects_junk(junk: str) -> None:
    with pytest.raises(EnvError, match=r"DEBUG=.* is not a boolean: use one of 1/0, true/false"):
        env_bool("DEBUG", environ={"DEBUG": junk})


def test_env_int_reads_and_checks_range() -> None:
    assert env_int("N", 10, environ={"N": " 42 "}) == 42
    assert env_int("N", 10, environ={}) == 10
    with pytest.raises(EnvError, match="is not a whole number"):
        env_int("N", 10, environ={"N": "4.5"})
    with pytest.raises(EnvError, match="below the minimum 1"):
        env_int("N", 10, minimum=1, environ={"N": "0"})
    with pytest.raises(EnvError, match="above the maximum 3600"):
        env_int("N", 10, maximum=3600, environ={"N": "9999"})


@pytest.mark.parametrize("junk", ["fast", "nan", "inf", "-inf"])
def test_env_float_rejects_junk(junk: str) -> None:
    with pytest.raises(EnvError, match="SPEED="):
        env_float("SPEED", 1.0, environ={"SPEED": junk})


def test_env_float_reads_numbers() -> None:
    assert env_float("SPEED", 1.0, environ={"SPEED": "2.5"}) == 2.5
    with pytest.raises(EnvError, match="below the minimum"):
        env_float("SPEED", 1.0, minimum=0.5, environ={"SPEED": "0.1"})


def test_env_list_splits_and_rejects_empty_items() -> None:
    assert env_list("HOSTS", environ={"HOSTS": "a.example, b.example"}) == ["a.example", "b.example"]
    assert env_list("HOSTS", default=["x"], environ={}) == ["x"]
    with pytest.raises(EnvError, match="has an empty item"):
        env_list("HOSTS", environ={"HOSTS": "a,,b"})


def test_env_choice() -> None:
    assert env_choice("BACKEND", ("simulated", "kubernetes"), "simulated", environ={}) == "simulated"
    assert env_choice("BACKEND", ("simulated", "kubernetes"), "simulated", environ={"BACKEND": "kubernetes"}) == (
        "kubernetes"
    )
    with pytest.raises(EnvError, match=r"BACKEND='slurm' is not one of: simulated, kubernetes"):
        env_choice("BACKEND", ("simulated", "kubernetes"), "simulated", environ={"BACKEND": "slurm"})


def test_env_str_required() -> None:
    assert env_str("KEY", environ={"KEY": "v"}) == "v"
    with pytest.raises(EnvError, match="KEY must be set"):
        env_str("KEY", required=True, environ={"KEY": "  "})


def test_env_database_parses_sqlite_and_postgres() -> None:
    sqlite = env_database("DATABASE_URL", "sqlite:////tmp/x.sqlite3", environ={})
    assert sqlite["ENGINE"] == "django.db.backends.sqlite3"
    assert sqlite["NAME"] == "/tmp/x.sqlite3"
    pg = env_database("DATABASE_URL", "", environ={"DATABASE_URL": "postgres://u:p@db.internal:5433/microcosm"})
    assert pg["ENGINE"] == "django.db.backends.postgresql"
    assert (pg["HOST"], pg["PORT"], pg["NAME"], pg["USER"]) == ("db.internal", 5433, "microcosm", "u")


@pytest.mark.parametrize(
    ("junk", "message"),
    [
        ("mysql://u@h/db", "not a supported database URL"),
        ("just-a-word", "not a supported database URL"),
        ("postgres://u@h:5432/", "names no database"),
    ],
)
def test_env_database_rejects_junk(junk: str, message: str) -> None:
    with pytest.raises(EnvError, match=message):
        env_database("DATABASE_URL", "", environ={"DATABASE_URL": junk})


def test_env_redis_url() -> None:
    assert env_redis_url("REDIS_URL", "redis://127.0.0.1:6379/0", environ={}) == "redis://127.0.0.1:6379/0"
    with pytest.raises(EnvError, match="is not a Redis URL"):
        env_redis_url("REDIS_URL", "", environ={"REDIS_URL": "http://localhost:6379"})
