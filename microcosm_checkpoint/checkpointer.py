"""The training loop's side of checkpointing: when to save, what to resume from, and who to tell.

A loop asks :meth:`Checkpointer.due` after every step; it says yes when ``CHECKPOINT_INTERVAL_S`` has passed since
the last save or a stop was requested (SIGTERM: the pod is being evicted, or its spot node interrupted). The loop
then saves and, after a stop, exits with :attr:`Checkpointer.exit_status`. A restarted run calls
:meth:`Checkpointer.restore` first. Standard library only: this module runs inside the job's container.
"""

from __future__ import annotations

import logging
import os
import pickle
import posixpath
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from microcosm_checkpoint.manifest import Entry
from microcosm_checkpoint.report import Reporter
from microcosm_checkpoint.signals import StopFlag
from microcosm_checkpoint.store import DEFAULT_KEEP, CheckpointStore, restore

logger = logging.getLogger("microcosm_checkpoint")

# Used when CHECKPOINT_INTERVAL_S is unset, i.e. outside Microcosm, which sets it for every checkpointed job.
DEFAULT_INTERVAL_S = 1800.0

Dumps = Callable[[Any], bytes | Iterable[bytes]]
Loads = Callable[[bytes], Any]


class Checkpointer:
    """Saves a job's state every ``interval_s`` seconds and when asked to stop, and restores it on restart.

    Only the writer saves (by default replica 0: data-parallel replicas hold the same weights, and one directory
    has one writer); every replica restores from the same checkpoint, so a gang resumes from one step. The others'
    :meth:`save` only resets their timer, so every replica's loop takes the same branches.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        resume_from: str = "",
        keep: int = DEFAULT_KEEP,
        replica: int = 0,
        writer: bool | None = None,
        reporter: Reporter | None = None,
        dumps: Dumps = pickle.dumps,
        loads: Loads = pickle.loads,
        install_signals: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 0 < interval_s < float("inf"):
            raise ValueError(f"interval_s={interval_s}: give a number of seconds above 0.")
        self.directory = Path(directory)
        self.interval_s = float(interval_s)
        self.resume_from = resume_from
        self.replica = replica
        self.writer = replica == 0 if writer is None else writer
        self.reporter = reporter
        self.stop = StopFlag()
        self._dumps = dumps
        self._loads = loads
        self._clock = clock
        self._last_save = clock()
        self._last_step: int | None = None
        self.store = CheckpointStore(self.directory, keep=keep) if self.writer else None
        if install_signals:
            self.stop.install()

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        writer: bool | None = None,
        dumps: Dumps = pickle.dumps,
        loads: Loads = pickle.loads,
        install_signals: bool = True,
    ) -> Checkpointer:
        """The checkpointer Microcosm's environment describes (``os.environ`` unless ``environ`` is given).

        Reads ``CHECKPOINT_DIR`` (required), ``CHECKPOINT_INTERVAL_S``, ``RESUME_FROM``, ``CHECKPOINT_KEEP``,
        ``MICROCOSM_REPLICA`` and, for the reports, ``MICROCOSM_URL``, ``MICROCOSM_JOB`` and
        ``MICROCOSM_TOKEN_FILE``. Raises ``ValueError`` saying which variable is wrong and what it takes.
        """
        env = os.environ if environ is None else environ
        directory = env.get("CHECKPOINT_DIR", "").strip()
        if not directory:
            raise ValueError(
                "CHECKPOINT_DIR is not set: Microcosm sets it for jobs with a checkpoint interval; to run elsewhere, "
                "set it to a writable directory."
            )
        return cls(
            directory,
            interval_s=_seconds(env, "CHECKPOINT_INTERVAL_S", DEFAULT_INTERVAL_S),
            resume_from=env.get("RESUME_FROM", "").strip(),
            keep=_whole(env, "CHECKPOINT_KEEP", DEFAULT_KEEP, 1, "how many checkpoints to keep"),
            replica=_whole(env, "MICROCOSM_REPLICA", 0, 0, "the replica's index"),
            writer=writer,
            reporter=Reporter.from_env(env),
            dumps=dumps,
            loads=loads,
            install_signals=install_signals,
        )

    @property
    def stop_requested(self) -> bool:
        """Whether the job was asked to stop (SIGTERM or SIGINT): save, then exit with :attr:`exit_status`."""
        return self.stop.requested

    @property
    def exit_status(self) -> int:
        """The status to exit with after a stop (143 after SIGTERM): a stopped run, not a finished one."""
        return self.stop.exit_status

    def restore(self) -> tuple[int, Any] | None:
        """``(step, state)`` of the checkpoint to resume from, or None to start from the beginning.

        From ``RESUME_FROM`` when set (a directory or a checkpoint file), else from this job's own directory, so
        a run restarted in place resumes too. Raises :class:`~microcosm_checkpoint.store.CheckpointError` when
        checkpoints are there but none verifies.
        """
        restored = restore(self.resume_from or self.directory)
        if restored is None:
            if self.resume_from:  # a job stopped before its first save: nothing is lost, but say so
                logger.warning("RESUME_FROM=%s holds no checkpoint: starting from the beginning", self.resume_from)
            return None
        state = self._loads(restored.payload)
        self._last_step = restored.step
        self._last_save = self._clock()
        logger.info("resuming from step %d (%s)", restored.step, restored.path)
        return restored.step, state

    def due(self, step: int) -> bool:
        """Whether to save at ``step``: the interval has passed since the last save, or a stop was requested (and
        ``step`` is not saved already)."""
        if step == self._last_step:
            return False
        return self.stop.requested or self._clock() - self._last_save >= self.interval_s

    def save(self, step: int, state: Any) -> Entry | None:
        """Save ``state`` as the checkpoint at ``step`` and report it; its manifest entry, or None on a replica
        that does not write. A failed save raises (a full volume must not go unnoticed); a failed report does
        not."""
        entry = None
        if self.store is not None:
            entry = self.store.save(step, self._dumps(state))
            logger.info("checkpoint at step %d: %d bytes in %.3f s", step, entry.size_bytes, entry.duration_s)
            if self.reporter is not None:
                path = posixpath.join(str(self.directory), entry.name)
                self.reporter.report(entry, path=path, replica=self.replica)
        self._last_step = step
        self._last_save = self._clock()
        return entry


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    """The duration in variable ``name`` (``default`` when unset or empty); ValueError naming it when it is not a
    number of seconds above 0."""
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise ValueError(f"{name}={text!r}: give a number of seconds above 0, such as 1800.")
    return value


def _whole(env: Mapping[str, str], name: str, default: int, minimum: int, what: str) -> int:
    """The whole number in variable ``name`` (``default`` when unset or empty), at least ``minimum``."""
    text = env.get(name, "").strip()
    if not text:
        return default
    if not (text.isascii() and text.isdigit()) or int(text) < minimum:
        raise ValueError(f"{name}={text!r}: give {what}, a whole number from {minimum}.")
    return int(text)
