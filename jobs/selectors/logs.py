"""A job's replica logs for the job page, its download and the API: read through the cluster gateway, bounded.

The caller has already fetched the job through a scoped selector (``jobs.selectors.jobs.job_get_for_user``): these
functions never decide who may read a log, they only read it. A Kubernetes cluster gives the job container's
own output (the pod log API); the simulated fleet runs no container and gives the replica's lifecycle lines
(:mod:`scheduler.gateways.simulated.lifecycle`), which the page labels as such. A pod's log goes with the pod,
so an ended job's log is usually empty on Kubernetes; the job's timeline keeps what the scheduler did.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from jobs.errors import LogRequestInvalid
from jobs.models import Job
from scheduler.errors import GatewayError
from scheduler.gateways import gateway_get
from scheduler.gateways.protocol import LOG_LIMIT_BYTES, LogSource, ReplicaLog

PAGE_TAIL_LINES = 200  # what the job page shows of each replica
MAX_TAIL_LINES = 10_000  # the most lines one read asks for (the download's tail)
PAGE_LIMIT_BYTES = 256 * 1024  # a page stays light even when lines are long
DOWNLOAD_LIMIT_BYTES = LOG_LIMIT_BYTES


@dataclass(frozen=True, slots=True)
class LogPanel:
    """What the job page shows of one replica's log: the log, or why it could not be read (``error``)."""

    replica: int
    replicas: int
    tail_lines: int
    log: ReplicaLog | None
    error: str
    lifecycle_only: bool  # the simulated fleet: the replica's lifecycle, no container output

    @property
    def download_limit_bytes(self) -> int:
        return DOWNLOAD_LIMIT_BYTES


def log_params(query: Mapping[str, str], *, job: Job, default_tail: int = PAGE_TAIL_LINES) -> tuple[int, int]:
    """``(replica, tail)`` from a request's ``replica`` and ``tail`` (both optional: replica 0, ``default_tail``
    lines); :class:`LogRequestInvalid` naming what is wrong with either."""
    errors: dict[str, list[str]] = {}
    replica = _whole(query.get("replica"), 0)
    if replica is None or not 0 <= replica < job.replicas:
        last = job.replicas - 1
        errors["replica"] = [f"must be a whole number from 0 to {last}: this job has {job.replicas} replica(s)"]
    tail = _whole(query.get("tail"), default_tail)
    if tail is None or not 1 <= tail <= MAX_TAIL_LINES:
        errors["tail"] = [f"must be a whole number of lines from 1 to {MAX_TAIL_LINES}"]
    if errors:
        raise LogRequestInvalid(errors)
    assert replica is not None and tail is not None
    return replica, tail


def _whole(raw: str | None, default: int) -> int | None:
    if raw is None or raw == "":
        return default
    # ASCII digits only ("²" is a digit to str.isdigit and not to int), short enough to be a number we can use.
    return int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 9 else None


def job_log_read(*, job: Job, replica: int, tail_lines: int, limit_bytes: int) -> ReplicaLog:
    """The last ``tail_lines`` lines of replica ``replica`` of ``job`` (at most ``limit_bytes``). Raises
    :class:`~scheduler.errors.GatewayError` when the cluster cannot be read."""
    gateway = gateway_get()
    return gateway.job_logs(
        job=str(job.pk), namespace=job.team.namespace, replica=replica, tail_lines=tail_lines, limit_bytes=limit_bytes
    )


def job_log_panel(*, job: Job, replica: int, tail_lines: int = PAGE_TAIL_LINES) -> LogPanel:
    """The job page's view of one replica's log; a cluster that cannot be read is a short message, not an error."""
    try:
        log: ReplicaLog | None = job_log_read(
            job=job, replica=replica, tail_lines=tail_lines, limit_bytes=PAGE_LIMIT_BYTES
        )
        error = ""
    except GatewayError as exc:
        log, error = None, f"The log cannot be read right now: {_first_line(exc)}"
    lifecycle = log.source == LogSource.SIMULATED if log is not None else _simulated()
    return LogPanel(
        replica=replica, replicas=job.replicas, tail_lines=tail_lines, log=log, error=error, lifecycle_only=lifecycle
    )


def _simulated() -> bool:
    try:
        return gateway_get().name == "simulated"
    except GatewayError:
        return False


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:200]


def download_name(job: Job, replica: int) -> str:
    """The download's file name: the job and the replica, so several downloads do not overwrite each other."""
    return f"job-{job.pk}-replica-{replica}.log"
