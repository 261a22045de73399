"""One job's failure stays its own: an exception raised while the engine evaluates a job rejects that job,
not the cycle.

The engine's steps that work job by job (its turn in fair order, the demand mix, the reconfiguration pass, the
explanations) run each job inside :class:`Evaluating`, which turns any exception into :class:`JobFailed`
naming the job. :func:`scheduler.core.planning.cycle.plan_cycle` then plans the cycle again without that job and adds
its rejection ("internal error evaluating this job: …"), logged with the traceback — so the other jobs get
exactly the plan they would have had had the job never been submitted. Each failure removes one pending
job, so the planning ends after at most one extra pass per failing job.

This is defence in depth behind :mod:`scheduler.core.sizing.bounds` (a job outside the bounds is rejected before
any step evaluates it): it catches what no bound foresaw — a bug, a corner of the arithmetic.
"""

from __future__ import annotations

import logging
from types import TracebackType
from typing import Literal

log = logging.getLogger(__name__)

_REASON_CHARS = 300  # a reason is shown in the queue and stored on the job: one line, not a traceback


class JobFailed(Exception):
    """Evaluating ``job_id`` raised ``cause``."""

    def __init__(self, job_id: str, cause: BaseException) -> None:
        super().__init__(f"job {job_id}: {cause!r}")
        self.job_id = job_id
        self.cause = cause

    @property
    def reason(self) -> str:
        text = f"internal error evaluating this job: {type(self.cause).__name__}: {self.cause}"
        return text if len(text) <= _REASON_CHARS else text[: _REASON_CHARS - 3] + "..."


class Evaluating:
    """``with Evaluating(job.id): ...`` — an exception in the body becomes :class:`JobFailed` for that job; one
    already naming a job (from a job evaluated inside this one's turn) passes through unchanged.

    A class, not a generator-based context manager: it wraps every pending job's turn, and this costs a
    fraction as much."""

    __slots__ = ("job_id",)

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> Literal[False]:
        if error is None or isinstance(error, JobFailed) or not isinstance(error, Exception):
            return False  # nothing raised, already attributed, or KeyboardInterrupt/SystemExit: let it go
        raise JobFailed(self.job_id, error) from error
