"""The proof that resume is exact, with real training processes: the example jobs of docs/checkpointing.md run as
subprocesses, are stopped with SIGTERM or killed with SIGKILL in the middle of a save, and resumed with
RESUME_FROM; each ends with the weights, bit for bit, of a run that was never interrupted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np  # a dev dependency: a missing one is a broken setup, not a skip
import pytest
import torch

from microcosm_checkpoint import manifest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"
NUMPY, TORCH = "checkpointed_training.py", "checkpointed_training_torch.py"
STEPS = {NUMPY: 600, TORCH: 150}  # a few seconds each, on a busy machine too
STEP_DELAY_S = "0.01"  # the interrupted run's steps are slowed so the signal lands mid-run
INTERVAL_S = "0.3"
T = TypeVar("T")


def environment(directory: Path, **extra: str) -> dict[str, str]:
    """The child's environment: Microcosm's variables for ``directory``, none inherited from this process."""
    inherited = {
        k: v for k, v in os.environ.items() if not k.startswith(("CHECKPOINT_", "MICROCOSM_")) and k != "RESUME_FROM"
    }
    return {
        **inherited,
        "PYTHONPATH": str(ROOT),
        "CHECKPOINT_DIR": str(directory),
        "CHECKPOINT_INTERVAL_S": INTERVAL_S,
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        **extra,
    }


def start(script: str, directory: Path, out: Path, *args: str, **env: str) -> subprocess.Popen[str]:
    command = [sys.executable, str(EXAMPLES / script), "--steps", str(STEPS[script]), "--out", str(out), *args]
    return subprocess.Popen(
        command,
        env=environment(directory, **env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(process: subprocess.Popen[str]) -> tuple[int, str]:
    output, _ = process.communicate(timeout=60)
    return process.returncode, output


def finished(script: str, process: subprocess.Popen[str]) -> str:
    status, output = finish(process)
    assert status == 0, output
    assert f"finished at step {STEPS[script]}" in output
    return output


def run(script: str, directory: Path, out: Path, *args: str, **env: str) -> str:
    return finished(script, start(script, directory, out, *args, **env))


def wait_for(condition: Callable[[], T | None], process: subprocess.Popen[str], timeout_s: float = 30) -> T:
    """Poll ``condition`` until it returns something, failing if the process ends first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        if process.poll() is not None:
            pytest.fail(f"the run ended first:\n{finish(process)[1]}")
        time.sleep(0.005)
    process.kill()
    pytest.fail(f"timed out:\n{finish(process)[1]}")


def temporaries(directory: Path) -> list[Path]:
    return sorted(directory.glob(f".step-*{manifest.SUFFIX}{manifest.TEMPORARY_SUFFIX}"))


def same_arrays(a: Path, b: Path) -> bool:
    with np.load(a) as first, np.load(b) as second:
        return sorted(first.files) == sorted(second.files) and all(np.array_equal(first[k], second[k]) for k in first)


def stop_with_sigterm(script: str, directory: Path, out: Path) -> int:
    """Start a run, SIGTERM it once it has saved a checkpoint and gone on training; the step it stopped at, which
    it must have saved on the way out."""
    process = start(script, directory, out, "--step-delay-s", STEP_DELAY_S)
    first = wait_for(lambda: manifest.read(directory), process)[-1].step
    time.sleep(0.2)
    process.send_signal(signal.SIGTERM)
    status, output = finish(process)
    assert status == 128 + signal.SIGTERM, output  # it caught the signal, saved, and said it stopped
    stopped = int(output.split("stopped at step ")[1].split()[0])
    assert first < stopped < STEPS[script]  # interrupted mid-run, beyond its first checkpoint
    assert manifest.read(directory)[-1].step == stopped  # the save on SIGTERM
    assert temporaries(directory) == []
    assert not out.exists()
    return stopped


def test_a_run_stopped_by_sigterm_resumes_to_the_weights_of_an_uninterrupted_run(tmp_path: Path) -> None:
    script = NUMPY
    straight = start(script, tmp_path / "straight", tmp_path / "straight.npz")  # alongside: the tests run faster
    directory = tmp_path / "job"
    stopped = stop_with_sigterm(script, directory, tmp_path / "resumed.npz")
    finished(script, straight)
    # Microcosm's RESUME_FROM for a requeued job: its checkpoint directory.
    output = run(script, directory, tmp_path / "resumed.npz", RESUME_FROM=str(directory))
    assert f"resumed from step {stopped}" in output
    assert same_arrays(tmp_path / "straight.npz", tmp_path / "resumed.npz")


def test_a_run_killed_in_the_middle_of_a_save_resumes_from_the_previous_checkpoint(tmp_path: Path) -> None:
    script = NUMPY
    straight = start(script, tmp_path / "straight", tmp_path / "straight.npz")
    directory = tmp_path / "job"
    process = start(script, directory, tmp_path / "resumed.npz", "--step-delay-s", STEP_DELAY_S, "--slow-write-s", "1")
    # Each save takes a second: kill the run while one is being written, after an earlier one completed.
    wait_for(lambda: manifest.read(directory) and temporaries(directory), process)
    process.kill()
    status, output = finish(process)
    assert status == -signal.SIGKILL, output
    complete = manifest.read(directory)[-1]
    [torn] = temporaries(directory)
    torn_step = int(torn.name.split("-")[1].split(".")[0])
    assert torn_step > complete.step
    assert torn.stat().st_size < complete.size_bytes  # written in part: torn
    assert not (directory / manifest.file_name(torn_step)).exists()
    finished(script, straight)

    output = run(script, directory, tmp_path / "resumed.npz", RESUME_FROM=str(directory))
    assert f"resumed from step {complete.step}" in output
    assert temporaries(directory) == []  # the resumed run's writer deleted it, unread
    assert same_arrays(tmp_path / "straight.npz", tmp_path / "resumed.npz")


def test_a_pytorch_run_stopped_by_sigterm_resumes_exactly_from_its_newest_checkpoint_file(tmp_path: Path) -> None:
    script = TORCH
    straight = start(script, tmp_path / "straight", tmp_path / "straight.pt")
    directory = tmp_path / "job"
    stopped = stop_with_sigterm(script, directory, tmp_path / "resumed.pt")
    finished(script, straight)
    newest = directory / manifest.file_name(stopped)
    output = run(script, directory, tmp_path / "resumed.pt", RESUME_FROM=str(newest))
    assert f"resumed from step {stopped}" in output
    expected = torch.load(tmp_path / "straight.pt", weights_only=True)
    resumed = torch.load(tmp_path / "resumed.pt", weights_only=True)
    assert expected.keys() == resumed.keys()
    assert all(torch.equal(expected[k], resumed[k]) for k in expected)
