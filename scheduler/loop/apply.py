"""Applying recorded decisions through the gateway (DESIGN.md §1, step 4): one operation at a time, each
idempotent, retried with exponential backoff on :class:`~scheduler.errors.GatewayRetryable`.

Order: evictions (they free the devices), MIG changes (on GPUs the evictions emptied), binds. A failure is
never fatal to the rest: what could not be applied is left for the next cycle's reconciliation, which sees
the database and the cluster disagree and repairs it. A bind the cluster refuses
(:class:`~scheduler.errors.GatewayConflict`) is returned to the caller, which requeues the job.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from jobs.models import Allocation, Job
from scheduler.core.state import MigLayout
from scheduler.errors import GatewayConflict, GatewayError, GatewayRetryable
from scheduler.gateways.protocol import BindRequest, ClusterGateway, Device, ReplicaPlacement

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class EvictOp:
    job: str
    namespace: str
    reason: str
    grace_s: float | None = None  # None: the loop's usual grace; a spot notice's eviction fits inside the notice


@dataclass(frozen=True, slots=True)
class MigOp:
    node: str
    layouts: tuple[MigLayout, ...]


@dataclass(frozen=True, slots=True)
class BindOp:
    request: BindRequest
    team: str  # slug, for namespace_ensure


Op = EvictOp | MigOp | BindOp


@dataclass
class ApplyResult:
    applied: list[str] = field(default_factory=list)  # "bind 42", "evict 7 (priority)", "mig dgx-1"
    failed: list[str] = field(default_factory=list)  # gave up after retries: left to the next cycle
    refused: list[tuple[BindOp, str]] = field(default_factory=list)  # binds the cluster refused: requeue


@dataclass(frozen=True, slots=True)
class Retry:
    attempts: int = 3
    backoff_s: float = 0.2  # doubled after each failed attempt
    sleep: Callable[[float], None] = time.sleep


def apply_ops(gateway: ClusterGateway, ops: Iterable[Op], *, grace_s: float, retry: Retry | None = None) -> ApplyResult:
    """Apply ``ops`` (evictions, then MIG changes, then binds, whatever order they come in)."""
    retry = retry or Retry()
    ordered = sorted(ops, key=lambda op: 0 if isinstance(op, EvictOp) else 1 if isinstance(op, MigOp) else 2)
    result = ApplyResult()
    for op in ordered:
        label, call = _call(gateway, op, grace_s)
        try:
            _with_retries(call, retry, label)
        except GatewayConflict as exc:
            if isinstance(op, BindOp):
                result.refused.append((op, str(exc)))
            else:
                log.warning("%s refused by the cluster: %s", label, exc)
                result.failed.append(f"{label}: {exc}")
        except GatewayError as exc:
            log.warning("%s not applied, left to the next cycle: %s", label, exc)
            result.failed.append(f"{label}: {exc}")
        else:
            result.applied.append(label)
    return result


def _call(gateway: ClusterGateway, op: Op, grace_s: float) -> tuple[str, Callable[[], None]]:
    if isinstance(op, EvictOp):
        grace = op.grace_s if op.grace_s is not None else grace_s
        return f"evict {op.job} ({op.reason})", lambda: gateway.job_evict(
            job=op.job, namespace=op.namespace, grace_s=grace, reason=op.reason
        )
    if isinstance(op, MigOp):
        return f"mig {op.node}", lambda: gateway.node_mig_apply(node=op.node, layouts=op.layouts)

    def bind() -> None:
        gateway.namespace_ensure(namespace=op.request.namespace, team=op.team)
        gateway.job_bind(request=op.request)

    return f"bind {op.request.job}", bind


def _with_retries(call: Callable[[], None], retry: Retry, label: str) -> None:
    delay = retry.backoff_s
    for attempt in range(1, retry.attempts + 1):
        try:
            call()
            return
        except GatewayRetryable as exc:
            if attempt == retry.attempts:
                raise
            log.info("%s: attempt %d failed (%s); retrying in %.2fs", label, attempt, exc, delay)
            retry.sleep(delay)
            delay *= 2


def bind_request(job: Job, allocations: Sequence[Allocation], *, resume: bool) -> BindRequest:
    """The gateway's view of a recorded bind: the job and its live allocations, grouped by replica."""
    by_replica: dict[int, list[Allocation]] = {}
    for allocation in sorted(allocations, key=lambda a: (a.replica, a.gpu_index, a.mig_start or 0)):
        by_replica.setdefault(allocation.replica, []).append(allocation)
    placements = tuple(
        ReplicaPlacement(
            replica=replica,
            node=rows[0].node.name,
            devices=tuple(
                Device(gpu=a.gpu_index, mig_profile=a.mig_profile or None, mig_start=a.mig_start) for a in rows
            ),
        )
        for replica, rows in sorted(by_replica.items())
    )
    checkpoint_dir = f"/checkpoints/{job.team.slug}/job-{job.pk}" if job.checkpoint_interval_s else ""
    return BindRequest(
        job=str(job.pk),
        namespace=job.team.namespace,
        name=job.name,
        placements=placements,
        image=job.image,
        command=tuple(str(part) for part in job.command or ()),
        env={str(k): str(v) for k, v in (job.env or {}).items()},
        priority=job.priority,
        duration_s=float(job.duration_s) if job.duration_s else None,
        checkpoint_interval_s=float(job.checkpoint_interval_s) if job.checkpoint_interval_s else None,
        checkpoint_dir=checkpoint_dir,
        resume_from=checkpoint_dir if resume and checkpoint_dir else "",
    )
