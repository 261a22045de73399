"""Applying recorded decisions through the gateway (DESIGN.md §1, step 4): one operation at a time, each
idempotent, retried with exponential backoff on :class:`~scheduler.errors.GatewayRetryable`; a gateway that batches
(:class:`~scheduler.gateways.protocol.BatchingGateway`) gets a cycle's operations inside one batch.

Order: cordons (an admin's cordon or drain carried to the cluster), evictions and abandoned moves (they free the
devices), reconfigurations (on GPUs the evictions emptied), binds and moves (a move's new replicas beside its old),
then releases (a completed move's old replicas). A failure is
never fatal to the rest: what could not be applied is left for the next cycle's reconciliation, which sees
the database and the cluster disagree and repairs it. A bind the cluster refuses
(:class:`~scheduler.errors.GatewayConflict`) is returned to the caller, which requeues the job; a move it refuses is
returned too, and the caller gives the move up (the job keeps its old placement).
"""

from __future__ import annotations

import logging
import posixpath
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field

from jobs.credentials import job_token
from jobs.models import Allocation, Job, JobEvent
from jobs.services import checkpoint_latest
from scheduler.core.model.snapshot import MigLayout
from scheduler.errors import GatewayConflict, GatewayError, GatewayRetryable
from scheduler.gateways.protocol import (
    BatchingGateway,
    BindingManyGateway,
    BindRequest,
    ClusterGateway,
    Device,
    JobWaiting,
    NodeRequestSpec,
    ProvisioningGateway,
    RecordingGateway,
    ReplicaPlacement,
    job_checkpoint_dir,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class EvictOp:
    job: str
    namespace: str
    reason: str
    grace_s: float | None = None  # None: the loop's usual grace; a spot notice's eviction fits inside the notice
    by: str = ""  # the job this eviction makes room for, when the plan names one (recorded on the cluster)


@dataclass(frozen=True, slots=True)
class ReconfigureOp:
    node: str
    layouts: tuple[MigLayout, ...]


@dataclass(frozen=True, slots=True)
class CordonOp:
    node: str
    cordoned: bool  # True: carry an admin's cordon or drain to the cluster; False: lift Microcosm's cordon


@dataclass(frozen=True, slots=True)
class BindOp:
    request: BindRequest
    team: str  # slug, for namespace_ensure


@dataclass(frozen=True, slots=True)
class MoveOp:
    """Start the job's replicas of ``generation`` on ``request``'s placement beside the running ones
    (``ClusterGateway.job_move``); also how a bind whose generation is above 0 is applied again."""

    request: BindRequest
    team: str  # slug, for namespace_ensure
    generation: int


@dataclass(frozen=True, slots=True)
class ReleaseOp:
    """A move completed: stop the job's replicas older than ``generation`` (``ClusterGateway.job_release``)."""

    job: str
    namespace: str
    generation: int


@dataclass(frozen=True, slots=True)
class AbandonOp:
    """A move given up: stop the job's replicas of ``generation`` and newer (``ClusterGateway.job_move_abandon``)."""

    job: str
    namespace: str
    generation: int


@dataclass(frozen=True, slots=True)
class ProvisionOp:
    """Ask the autoscaler for a recorded node request's nodes (``ProvisioningGateway.nodes_request``, idempotent)."""

    spec: NodeRequestSpec


@dataclass(frozen=True, slots=True)
class WithdrawOp:
    """Give a node request up at the autoscaler (``ProvisioningGateway.nodes_request_withdraw``)."""

    request: str
    namespace: str


@dataclass(frozen=True, slots=True)
class NodeReleaseOp:
    """Give an autoscaled node back to its pool (``ProvisioningGateway.node_release``)."""

    node: str


Op = (
    EvictOp
    | ReconfigureOp
    | CordonOp
    | BindOp
    | MoveOp
    | ReleaseOp
    | AbandonOp
    | ProvisionOp
    | WithdrawOp
    | NodeReleaseOp
)


@dataclass
class ApplyResult:
    applied: list[str] = field(default_factory=list)  # "bind 42", "evict 7 (priority)", "mig dgx-1"
    failed: list[str] = field(default_factory=list)  # gave up after retries: left to the next cycle
    refused: list[tuple[BindOp, str]] = field(default_factory=list)  # binds the cluster refused: requeue
    moves_refused: list[tuple[MoveOp, str]] = field(default_factory=list)  # moves the cluster refused
    # node requests the autoscaler refused outright: recorded as failed (scheduler.loop.provisioning)
    provisions_refused: list[tuple[ProvisionOp, str]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Retry:
    attempts: int = 3
    backoff_s: float = 0.2  # doubled after each failed attempt
    sleep: Callable[[float], None] = time.sleep


def apply_ops(gateway: ClusterGateway, ops: Iterable[Op], *, grace_s: float, retry: Retry | None = None) -> ApplyResult:
    """Apply ``ops`` (evictions, then MIG reconfigurations, then binds, whatever order they come in). A gateway that
    binds many at once (:class:`~scheduler.gateways.protocol.BindingManyGateway`) gets each run of consecutive
    binds in one call, with the same results as one by one."""
    retry = retry or Retry()
    ordered = sorted(ops, key=_order)
    result = ApplyResult()
    together = _binds_together(gateway)
    with _batch(gateway):  # same effects, in the same order; a batching gateway saves once for them all
        start = 0
        while start < len(ordered):
            op = ordered[start]
            if together is not None and isinstance(op, BindOp):
                end = start
                while end < len(ordered) and isinstance(ordered[end], BindOp):
                    end += 1
                binds = [o for o in ordered[start:end] if isinstance(o, BindOp)]
                _binds_apply(gateway, together, binds, retry, result)
                start = end
                continue
            start += 1
            label, call = _call(gateway, op, grace_s)
            try:
                _with_retries(call, retry, label)
            except GatewayConflict as exc:
                if isinstance(op, BindOp):
                    result.refused.append((op, str(exc)))
                elif isinstance(op, MoveOp):
                    result.moves_refused.append((op, str(exc)))
                elif isinstance(op, ProvisionOp):
                    result.provisions_refused.append((op, str(exc)))
                else:
                    log.warning("%s refused by the cluster: %s", label, exc)
                    result.failed.append(f"{label}: {exc}")
            except GatewayError as exc:
                log.warning("%s not applied, left to the next cycle: %s", label, exc)
                result.failed.append(f"{label}: {exc}")
            else:
                result.applied.append(label)
    return result


def _binds_together(gateway: ClusterGateway) -> BindingManyGateway | None:
    """The gateway, when it binds many jobs in one call."""
    return gateway if isinstance(gateway, BindingManyGateway) else None


def _binds_apply(
    gateway: ClusterGateway, together: BindingManyGateway, ops: list[BindOp], retry: Retry, result: ApplyResult
) -> None:
    """Consecutive binds in one call, each with the outcome it would have one by one: applied, refused (the caller
    requeues the job) or, when the call as a whole fails after its retries, left to the next cycle. Each namespace
    is ensured once, before the binds."""
    label = f"{len(ops)} binds"
    refused: Mapping[str, str] = {}
    namespaces = dict.fromkeys((op.request.namespace, op.team, op.request.checkpoint_claim) for op in ops)

    def call() -> None:
        nonlocal refused
        for namespace, team, claim in namespaces:
            gateway.namespace_ensure(namespace=namespace, team=team, checkpoint_claim=claim)
        refused = together.jobs_bind(requests=[op.request for op in ops])

    try:
        _with_retries(call, retry, label)
    except GatewayError as exc:
        log.warning("%s not applied, left to the next cycle: %s", label, exc)
        result.failed.extend(f"bind {op.request.job}: {exc}" for op in ops)
        return
    for op in ops:
        message = refused.get(op.request.job)
        if message is None:
            result.applied.append(f"bind {op.request.job}")
        else:
            result.refused.append((op, message))


def _batch(gateway: ClusterGateway) -> AbstractContextManager[None]:
    return gateway.batch() if isinstance(gateway, BatchingGateway) else nullcontext()


def waiting_record(gateway: ClusterGateway, waiting: Sequence[JobWaiting]) -> None:
    """Tell a :class:`~scheduler.gateways.protocol.RecordingGateway` why jobs still wait, after the cycle's
    operations; best effort (a failure is logged: the portal shows the same reasons)."""
    if not isinstance(gateway, RecordingGateway):
        return
    try:
        gateway.jobs_waiting(waiting=waiting)
    except GatewayError as exc:
        log.warning("could not record why %d jobs wait: %s", len(waiting), exc)


def _order(op: Op) -> int:
    # A cordon first: nothing else should land on a node whose jobs are about to be asked to leave. A release
    # last: a completed move's old replicas go once everything else this cycle has been started.
    if isinstance(op, CordonOp):
        return 0
    if isinstance(op, EvictOp | AbandonOp):
        return 1
    if isinstance(op, ReconfigureOp):
        return 2
    # Node requests after the binds (a bind needs none); an autoscaled node given back after everything, as a move's
    # old replicas are.
    if isinstance(op, ProvisionOp | WithdrawOp):
        return 4
    return 5 if isinstance(op, ReleaseOp | NodeReleaseOp) else 3


def _call(gateway: ClusterGateway, op: Op, grace_s: float) -> tuple[str, Callable[[], None]]:
    if isinstance(op, ProvisionOp | WithdrawOp | NodeReleaseOp):
        return _provisioning_call(gateway, op)
    if isinstance(op, EvictOp):
        grace = op.grace_s if op.grace_s is not None else grace_s
        if op.by and isinstance(gateway, RecordingGateway):
            return f"evict {op.job} ({op.reason})", lambda: gateway.job_preempt(
                job=op.job, namespace=op.namespace, grace_s=grace, reason=op.reason, by=op.by
            )
        return f"evict {op.job} ({op.reason})", lambda: gateway.job_evict(
            job=op.job, namespace=op.namespace, grace_s=grace, reason=op.reason
        )
    if isinstance(op, ReconfigureOp):
        return f"mig {op.node}", lambda: gateway.node_reconfigure(node=op.node, layouts=op.layouts)
    if isinstance(op, CordonOp):
        label = f"{'cordon' if op.cordoned else 'uncordon'} {op.node}"
        return label, lambda: gateway.node_cordon(node=op.node, cordoned=op.cordoned)
    if isinstance(op, ReleaseOp):
        return f"release {op.job} (older than generation {op.generation})", lambda: gateway.job_release(
            job=op.job, namespace=op.namespace, generation=op.generation, grace_s=grace_s
        )
    if isinstance(op, AbandonOp):
        return f"abandon move {op.job} (generation {op.generation})", lambda: gateway.job_move_abandon(
            job=op.job, namespace=op.namespace, generation=op.generation, grace_s=grace_s
        )
    if isinstance(op, MoveOp):
        move = op

        def start() -> None:
            gateway.namespace_ensure(
                namespace=move.request.namespace, team=move.team, checkpoint_claim=move.request.checkpoint_claim
            )
            gateway.job_move(request=move.request, generation=move.generation)

        return f"move {op.request.job} (generation {op.generation})", start

    def bind() -> None:
        gateway.namespace_ensure(
            namespace=op.request.namespace, team=op.team, checkpoint_claim=op.request.checkpoint_claim
        )
        gateway.job_bind(request=op.request)

    return f"bind {op.request.job}", bind


def _provisioning_call(
    gateway: ClusterGateway, op: ProvisionOp | WithdrawOp | NodeReleaseOp
) -> tuple[str, Callable[[], None]]:
    """A node request's or an autoscaled node's operation; a gateway that cannot grow refuses it (the loop asks only
    a :class:`~scheduler.gateways.protocol.ProvisioningGateway`, so this is a configuration's mistake)."""
    if isinstance(op, ProvisionOp):
        label = f"node request {op.spec.id} ({op.spec.nodes} × {op.spec.pool} for job {op.spec.job})"
    elif isinstance(op, WithdrawOp):
        label = f"withdraw node request {op.request}"
    else:
        label = f"release node {op.node}"
    if not isinstance(gateway, ProvisioningGateway):

        def refuse() -> None:
            raise GatewayConflict(f"the {gateway.name} cluster has no autoscaler to ask")

        return label, refuse
    if isinstance(op, ProvisionOp):
        return label, lambda: gateway.nodes_request(request=op.spec)
    if isinstance(op, WithdrawOp):
        return label, lambda: gateway.nodes_request_withdraw(request=op.request, namespace=op.namespace)
    return label, lambda: gateway.node_release(node=op.node)


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


def start_op(job: Job, allocations: Sequence[Allocation], *, resume: bool) -> BindOp | MoveOp:
    """The operation that starts ``job``'s replicas on ``allocations`` (one generation): a bind for generation
    0, else a move to that generation (the job was moved before: its pods are of that generation)."""
    request = bind_request(job, allocations, resume=resume)
    generation = max((a.generation for a in allocations), default=0)
    if generation:
        return MoveOp(request=request, team=job.team.slug, generation=generation)
    return BindOp(request=request, team=job.team.slug)


class _Unread:
    """The job's newest checkpoint was not read by the caller: :func:`bind_request` reads it when it needs it."""


UNREAD = _Unread()


def bind_request(
    job: Job, allocations: Sequence[Allocation], *, resume: bool, checkpoint: JobEvent | _Unread | None = UNREAD
) -> BindRequest:
    """The gateway's view of a recorded bind: the job and its live allocations, grouped by replica.

    A checkpointed job (one with an interval) keeps its checkpoints in ``/checkpoints/job-<id>`` on its team's
    checkpoint volume (``Team.checkpoint_claim``, "": the backend's own) and reports them with its credential
    (:mod:`jobs.credentials`). ``resume`` (the job was requeued) sets ``RESUME_FROM``: :func:`resume_point`, from
    ``checkpoint``, the job's newest recorded checkpoint when the caller has read it already (the record step's
    binds, :mod:`jobs.services.binds`), else read here.
    """
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
    checkpointed = bool(job.checkpoint_interval_s)
    checkpoint_dir = job_checkpoint_dir(str(job.pk)) if checkpointed else ""
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
        resume_from=resume_point(job, checkpoint_dir, checkpoint) if resume and checkpointed else "",
        credential=job_token(job.pk) if checkpointed else "",
        checkpoint_claim=job.team.checkpoint_claim,
        cpu=float(job.cpu) if job.cpu is not None else None,
        host_memory_gib=float(job.host_memory_gib) if job.host_memory_gib is not None else None,
    )


def resume_point(job: Job, checkpoint_dir: str, checkpoint: JobEvent | _Unread | None = UNREAD) -> str:
    """Where a requeued job resumes: its newest recorded checkpoint when that lies in ``checkpoint_dir``, else
    the directory itself (the job-side library then takes the newest complete checkpoint it finds there).

    A recorded path is the job's own word; one outside its directory (another job's, ``..`` tricks) or unknown
    (a checkpoint seen only by time) is not trusted to point the resume."""
    latest = checkpoint_latest(job) if isinstance(checkpoint, _Unread) else checkpoint
    path = str((latest.details or {}).get("path") or "") if latest is not None else ""
    normal = posixpath.normpath(path) if path.startswith("/") else ""
    return normal if normal.startswith(checkpoint_dir + "/") else checkpoint_dir
