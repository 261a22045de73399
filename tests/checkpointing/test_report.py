"""Checkpoint reports against a real HTTP server on loopback: what is sent, what is retried, and that no failure
ever reaches the training loop."""

from __future__ import annotations

import socket
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from microcosm_checkpoint import manifest
from microcosm_checkpoint.manifest import Entry
from microcosm_checkpoint.report import DEFAULT_TOKEN_FILE, Reporter, endpoint

from .conftest import Recorder

ENTRY = Entry(
    step=1200, name=manifest.file_name(1200), saved_at=1_767_225_600.25, size_bytes=4096, duration_s=1.5, sha256="ab"
)


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text("mcj.42.secret\n")
    return path


def reporter(
    url: str, token_file: Path, *, timeout_s: float = 2.0, attempts: int = 2, retry_pause_s: float = 0.5
) -> Reporter:
    return Reporter(
        url=endpoint(url, "42"),
        token_file=token_file,
        timeout_s=timeout_s,
        attempts=attempts,
        retry_pause_s=retry_pause_s,
    )


def test_a_report_posts_the_checkpoint_as_json_with_the_job_credential(server: Recorder, token_file: Path) -> None:
    path = f"/checkpoints/nlp/job-42/{ENTRY.name}"
    assert reporter(server.url, token_file).report(ENTRY, path=path, replica=0)
    [request] = server.received
    assert (request.method, request.path) == ("POST", "/api/v1/jobs/42/checkpoints/")
    assert request.headers["Authorization"] == "Bearer mcj.42.secret"
    assert request.headers["Content-Type"] == "application/json"
    assert request.body == {
        "step": 1200,
        "saved_at": "2026-01-01T00:00:00.250000+00:00",
        "size_bytes": 4096,
        "duration_s": 1.5,
        "path": path,
        "replica": 0,
    }
    assert datetime.fromisoformat(request.body["saved_at"]) == datetime.fromtimestamp(ENTRY.saved_at, tz=UTC)


def test_a_busy_server_is_tried_again_and_a_refusal_is_not(server: Recorder, token_file: Path) -> None:
    server.statuses = [503]
    assert reporter(server.url, token_file, retry_pause_s=0.01).report(ENTRY, path="p", replica=0)
    assert len(server.received) == 2
    server.received.clear()
    server.statuses = [403]  # a revoked credential stays revoked
    assert not reporter(server.url, token_file, retry_pause_s=0.01).report(ENTRY, path="p", replica=0)
    assert len(server.received) == 1
    server.received.clear()
    server.statuses = [500, 500, 500]
    assert not reporter(server.url, token_file, attempts=2, retry_pause_s=0.01).report(ENTRY, path="p", replica=0)
    assert len(server.received) == 2


def test_a_dead_server_costs_a_failed_report_and_nothing_else(token_file: Path) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dead = reporter(f"http://127.0.0.1:{port}", token_file, retry_pause_s=0.01)
    assert dead.report(ENTRY, path="p", replica=0) is False
    assert reporter("http://no such host", token_file).report(ENTRY, path="p", replica=0) is False


def test_a_server_that_does_not_answer_is_given_up_on_after_the_timeout(server: Recorder, token_file: Path) -> None:
    server.delay_s = 5
    started = time.monotonic()
    assert not reporter(server.url, token_file, timeout_s=0.2, attempts=2, retry_pause_s=0.01).report(
        ENTRY, path="p", replica=0
    )
    assert time.monotonic() - started < 2


def test_a_missing_or_empty_credential_skips_the_report(server: Recorder, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_text("\n")
    assert not reporter(server.url, empty).report(ENTRY, path="p", replica=0)
    assert not reporter(server.url, tmp_path / "gone").report(ENTRY, path="p", replica=0)
    assert server.received == []


def test_reporting_is_on_only_with_a_url_a_job_and_a_credential(token_file: Path) -> None:
    env = {
        "MICROCOSM_URL": "https://microcosm.example/",
        "MICROCOSM_JOB": "42",
        "MICROCOSM_TOKEN_FILE": str(token_file),
    }
    assert Reporter.from_env(env) == Reporter(
        url="https://microcosm.example/api/v1/jobs/42/checkpoints/", token_file=token_file
    )
    assert Reporter.from_env({**env, "MICROCOSM_URL": ""}) is None
    assert Reporter.from_env({k: v for k, v in env.items() if k != "MICROCOSM_JOB"}) is None
    assert Reporter.from_env({**env, "MICROCOSM_TOKEN_FILE": str(token_file.parent / "gone")}) is None
    without_file = {k: v for k, v in env.items() if k != "MICROCOSM_TOKEN_FILE"}
    if not Path(DEFAULT_TOKEN_FILE).exists():
        assert Reporter.from_env(without_file) is None
