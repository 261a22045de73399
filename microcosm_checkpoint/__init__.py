"""Checkpointing for jobs that run under Microcosm (docs/checkpointing.md). Standard library only.

Save every ``CHECKPOINT_INTERVAL_S`` and on SIGTERM, atomically, keep the last few, resume from ``RESUME_FROM``
and report each checkpoint to Microcosm::

    ck = Checkpointer.from_env()
    step, state = ck.restore() or (0, initial_state())
    while step < total_steps:
        state = train_step(state, step)
        step += 1
        if ck.due(step):
            ck.save(step, state)
        if ck.stop_requested:
            raise SystemExit(ck.exit_status)

This folder is the whole library: copy it into a job's image, or install the repository.
"""

from microcosm_checkpoint.checkpointer import DEFAULT_INTERVAL_S, Checkpointer
from microcosm_checkpoint.manifest import Entry
from microcosm_checkpoint.report import Reporter
from microcosm_checkpoint.signals import StopFlag
from microcosm_checkpoint.store import DEFAULT_KEEP, CheckpointError, CheckpointStore, Restored, restore

__all__ = [
    "DEFAULT_INTERVAL_S",
    "DEFAULT_KEEP",
    "CheckpointError",
    "CheckpointStore",
    "Checkpointer",
    "Entry",
    "Reporter",
    "Restored",
    "StopFlag",
    "restore",
]
