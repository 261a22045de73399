"""The checkpointer: its environment, when a save is due, who writes, where a run resumes from, and the stop
request that SIGTERM raises."""

from __future__ import annotations

import json
import logging
import os
import pickle
import signal
from pathlib import Path
from typing import Any

import pytest

from microcosm_checkpoint import DEFAULT_INTERVAL_S, DEFAULT_KEEP, Checkpointer, StopFlag, manifest
from microcosm_checkpoint.report import Reporter

from .conftest import Recorder


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def checkpointer(directory: Path, clock: Clock | None = None, **options: Any) -> Checkpointer:
    return Checkpointer(directory, interval_s=60, install_signals=False, clock=clock or Clock(), **options)


def test_from_env_reads_what_microcosm_sets(tmp_path: Path, server: Recorder) -> None:
    token = tmp_path / "token"
    token.write_text("mcj.7.x")
    env = {
        "CHECKPOINT_DIR": str(tmp_path / "job-7"),
        "CHECKPOINT_INTERVAL_S": "90.5",
        "RESUME_FROM": "/checkpoints/nlp/job-7",
        "CHECKPOINT_KEEP": "5",
        "MICROCOSM_REPLICA": "1",
        "MICROCOSM_URL": server.url,
        "MICROCOSM_JOB": "7",
        "MICROCOSM_TOKEN_FILE": str(token),
    }
    ck = Checkpointer.from_env(env, install_signals=False)
    assert (ck.directory, ck.interval_s, ck.resume_from, ck.replica) == (
        tmp_path / "job-7",
        90.5,
        env["RESUME_FROM"],
        1,
    )
    assert not ck.writer and ck.store is None  # replica 1 of a data-parallel gang holds replica 0's weights
    assert ck.reporter == Reporter(url=f"{server.url}/api/v1/jobs/7/checkpoints/", token_file=token)
    writer = Checkpointer.from_env({**env, "MICROCOSM_REPLICA": "0"}, install_signals=False)
    assert writer.writer and writer.store is not None and writer.store.keep == 5


def test_from_env_defaults(tmp_path: Path) -> None:
    ck = Checkpointer.from_env({"CHECKPOINT_DIR": str(tmp_path), "CHECKPOINT_INTERVAL_S": ""}, install_signals=False)
    assert (ck.interval_s, ck.resume_from, ck.replica, ck.writer, ck.reporter) == (
        DEFAULT_INTERVAL_S,
        "",
        0,
        True,
        None,
    )
    assert ck.store is not None and ck.store.keep == DEFAULT_KEEP


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("CHECKPOINT_DIR", " ", "CHECKPOINT_DIR is not set"),
        ("CHECKPOINT_INTERVAL_S", "soon", "CHECKPOINT_INTERVAL_S='soon': give a number of seconds above 0"),
        ("CHECKPOINT_INTERVAL_S", "0", "CHECKPOINT_INTERVAL_S='0'"),
        ("CHECKPOINT_INTERVAL_S", "-5", "CHECKPOINT_INTERVAL_S='-5'"),
        ("CHECKPOINT_INTERVAL_S", "inf", "CHECKPOINT_INTERVAL_S='inf'"),
        ("CHECKPOINT_KEEP", "0", "CHECKPOINT_KEEP='0': give how many checkpoints to keep, a whole number from 1"),
        ("CHECKPOINT_KEEP", "2.5", "CHECKPOINT_KEEP='2.5'"),
        ("MICROCOSM_REPLICA", "-1", "MICROCOSM_REPLICA='-1': give the replica's index, a whole number from 0"),
    ],
)
def test_from_env_names_the_variable_that_is_wrong(tmp_path: Path, name: str, value: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace(".", r"\.")):
        Checkpointer.from_env({"CHECKPOINT_DIR": str(tmp_path), name: value}, install_signals=False)


def test_a_save_is_due_when_the_interval_has_passed_or_a_stop_was_requested(tmp_path: Path) -> None:
    clock = Clock()
    ck = checkpointer(tmp_path, clock)
    clock.now += 59
    assert not ck.due(10)
    clock.now += 1
    assert ck.due(10)
    ck.save(10, {"w": 1})
    assert not ck.due(11)
    ck.stop.request()
    assert ck.stop_requested and ck.due(11)
    ck.save(11, {"w": 2})
    assert not ck.due(11)  # saved already: the loop may exit
    assert ck.exit_status == 128 + signal.SIGTERM


def test_the_state_is_pickled_by_default_or_coded_as_asked(tmp_path: Path) -> None:
    ck = checkpointer(tmp_path)
    entry = ck.save(3, {"w": [1.0, 2.0]})
    assert entry is not None
    assert pickle.loads((tmp_path / entry.name).read_bytes()) == {"w": [1.0, 2.0]}
    coded = checkpointer(tmp_path / "json", dumps=lambda s: json.dumps(s).encode(), loads=json.loads)
    coded.save(4, {"w": 3})
    assert (tmp_path / "json" / manifest.file_name(4)).read_text() == '{"w": 3}'
    assert coded.restore() == (4, {"w": 3})


def test_a_replica_that_does_not_write_saves_nothing_but_keeps_the_same_cadence(tmp_path: Path) -> None:
    clock = Clock()
    ck = checkpointer(tmp_path / "shared", clock, replica=2)
    clock.now += 60
    assert ck.due(5)
    assert ck.save(5, {"w": 1}) is None
    assert not (tmp_path / "shared").exists()
    assert not ck.due(6)
    assert checkpointer(tmp_path / "sharded", replica=2, writer=True).save(5, {"w": 1}) is not None


def test_every_replica_resumes_from_the_same_checkpoint(tmp_path: Path) -> None:
    directory = tmp_path / "job-1"
    checkpointer(directory).save(40, {"w": 40})
    for replica in (0, 1, 2):
        assert checkpointer(directory, replica=replica, resume_from=str(directory)).restore() == (40, {"w": 40})


def test_without_resume_from_a_run_resumes_from_its_own_directory(tmp_path: Path) -> None:
    first = checkpointer(tmp_path)
    assert first.restore() is None
    first.save(8, "state at 8")
    second = checkpointer(tmp_path)
    assert second.restore() == (8, "state at 8")
    assert not second.due(8)


def test_resume_from_wins_over_the_own_directory(tmp_path: Path) -> None:
    checkpointer(tmp_path / "old").save(5, "old job")
    checkpointer(tmp_path / "new").save(9, "new job")
    resumed = checkpointer(tmp_path / "new", resume_from=str(tmp_path / "old" / manifest.file_name(5)))
    assert resumed.restore() == (5, "old job")


def test_resume_from_a_place_with_no_checkpoint_starts_over_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="microcosm_checkpoint"):
        assert checkpointer(tmp_path, resume_from=str(tmp_path / "job-9")).restore() is None
    assert "holds no checkpoint: starting from the beginning" in caplog.text


def test_a_save_is_reported_with_the_path_the_pod_sees(tmp_path: Path, server: Recorder) -> None:
    token = tmp_path / "token"
    token.write_text("mcj.3.x")
    reporter = Reporter(url=f"{server.url}/api/v1/jobs/3/checkpoints/", token_file=token)
    entry = checkpointer(tmp_path / "job-3", reporter=reporter).save(12, "state")
    assert entry is not None
    [request] = server.received
    assert request.body["path"] == f"{tmp_path}/job-3/{entry.name}"
    assert (request.body["step"], request.body["size_bytes"], request.body["replica"]) == (12, entry.size_bytes, 0)


def test_a_failed_report_does_not_fail_the_save(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("mcj.3.x")
    dead = Reporter(url="http://127.0.0.1:9/api/v1/jobs/3/checkpoints/", token_file=token, retry_pause_s=0.01)
    assert checkpointer(tmp_path / "job-3", reporter=dead).save(12, "state") is not None
    assert [e.step for e in manifest.read(tmp_path / "job-3")] == [12]


def test_sigterm_only_raises_the_flag_and_a_second_ctrl_c_interrupts() -> None:
    flag = StopFlag()
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    assert flag.install()
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        assert flag.requested and flag.signal == signal.SIGTERM and flag.exit_status == 143
        os.kill(os.getpid(), signal.SIGTERM)  # Kubernetes sends one; a second is no worse
        assert flag.signal == signal.SIGTERM
    finally:
        flag.uninstall()
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
    ctrl_c = StopFlag()
    ctrl_c.install([signal.SIGINT])
    try:
        os.kill(os.getpid(), signal.SIGINT)
        assert ctrl_c.exit_status == 130
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    finally:
        ctrl_c.uninstall()


def test_the_checkpointer_catches_sigterm_when_asked(tmp_path: Path) -> None:
    ck = Checkpointer(tmp_path, interval_s=3600)
    try:
        assert not ck.due(1)
        os.kill(os.getpid(), signal.SIGTERM)
        assert ck.stop_requested and ck.due(1)
    finally:
        ck.stop.uninstall()
