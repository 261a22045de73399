"""pytest-xdist's workers each take a Redis database of their own, on the same server (tests/workers.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.workers import redis_url_of_worker, worker_number

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("url", "worker", "expected"),
    [
        ("redis://127.0.0.1:6379/15", "gw0", "redis://127.0.0.1:6379/15"),
        ("redis://127.0.0.1:6379/15", "gw1", "redis://127.0.0.1:6379/14"),
        ("redis://:s3cret@redis.internal:6380/2", "gw3", "redis://:s3cret@redis.internal:6380/15"),
        ("rediss://cache:6379", "gw1", "rediss://cache:6379/15"),
        ("unix:///run/redis.sock?db=4", "gw2", "unix:///run/redis.sock?db=2"),
        ("unix:///run/redis.sock", "gw1", "unix:///run/redis.sock?db=15"),
    ],
)
def test_each_worker_has_its_own_database_on_the_same_server(url: str, worker: str, expected: str) -> None:
    assert redis_url_of_worker(url, worker) == expected


def test_workers_below_sixteen_never_share_a_database() -> None:
    urls = {redis_url_of_worker("redis://127.0.0.1:6379/15", f"gw{n}") for n in range(16)}
    assert len(urls) == 16 and worker_number("gw12") == 12


def _settings_redis_url(environ: dict[str, str]) -> str:
    code = "import tests.settings as s; print(s.REDIS_URL)"
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=environ, capture_output=True, text=True, check=True
    ).stdout.strip()


def test_the_settings_move_a_worker_once_and_its_subprocesses_keep_it() -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "MICROCOSM_TEST_REDIS"))}
    base["REDIS_URL"] = "redis://127.0.0.1:6379/15"
    assert _settings_redis_url(base) == "redis://127.0.0.1:6379/15"
    worker = {**base, "PYTEST_XDIST_WORKER": "gw1"}
    assert _settings_redis_url(worker) == "redis://127.0.0.1:6379/14"
    # A worker's subprocess inherits the moved URL and the record of the move: it stays on database 14.
    child = {**worker, "REDIS_URL": "redis://127.0.0.1:6379/14", "MICROCOSM_TEST_REDIS_WORKER": "gw1"}
    assert _settings_redis_url(child) == "redis://127.0.0.1:6379/14"
