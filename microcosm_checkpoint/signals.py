"""The stop request: SIGTERM (and SIGINT) only raise a flag, and the training loop saves and exits at its next step.

Kubernetes stops a pod by sending SIGTERM, waiting the pod's ``terminationGracePeriodSeconds``, then sending
SIGKILL; Microcosm evicts a job's pods this way when a spot notice arrives, with a grace that fits inside the
notice. Saving inside the handler would run the save in the middle of whatever the step was doing (half-updated
weights, a collective operation in flight), so the handler does nothing but record the signal; the loop finishes
its step, saves, and exits well within the grace when a step and a save take less than it.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Sequence
from types import FrameType
from typing import Any

logger = logging.getLogger("microcosm_checkpoint")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopFlag:
    """Set by a stop signal (or by :meth:`request`), read by the training loop between steps."""

    def __init__(self) -> None:
        self.signal: int | None = None  # the first stop signal received, or 0 when requested in code
        self._previous: dict[int, Any] = {}

    @property
    def requested(self) -> bool:
        return self.signal is not None

    @property
    def exit_status(self) -> int:
        """The status to exit with after the stop: 128 + the signal's number (143 for SIGTERM), the status a
        process killed by it would report, so Kubernetes and Microcosm see a stopped run, never a finished one."""
        return 128 + (self.signal or signal.SIGTERM)

    def request(self, signum: int = 0) -> None:
        """Ask the loop to save and stop, from code (your own signal handler, a watchdog)."""
        if self.signal is None:
            self.signal = signum

    def install(self, signals: Sequence[int] = STOP_SIGNALS) -> bool:
        """Catch ``signals`` from now on; False (and a warning) outside the main thread, where Python cannot."""
        if threading.current_thread() is not threading.main_thread():
            logger.warning("not in the main thread: SIGTERM will kill the job without a last checkpoint")
            return False
        for signum in signals:
            self._previous.setdefault(signum, signal.signal(signum, self._handle))
        return True

    def uninstall(self) -> None:
        """Give the signals back to the handlers they had before :meth:`install`."""
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        # Nothing but the flag (no I/O, no locks): the handler runs between two bytecodes of whatever the loop
        # was doing, logging included.
        if signum == signal.SIGINT and self.signal == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C from a person at a terminal: stop now, without the save
        self.request(signum)
