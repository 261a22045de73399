"""One scheduling cycle against a cluster (DESIGN.md §1): observe → reconcile → snapshot → plan → record →
apply.

``cycle_run`` is not re-entrant across processes by itself: callers hold the single-flight lock
(:mod:`scheduler.loop.locks`) and pass its fencing token, as :func:`scheduler.tasks.cycle_run_task` and the
``schedule`` / ``scheduler run`` commands do. Every step is safe to interrupt: decisions are recorded before
they are applied, and the next cycle's reconciliation repairs whatever was recorded but not applied.

A cycle that runs through ends by adding its phases' durations, its decisions and what it saw of reconfigurations and
interruption notices to the loop's totals (:mod:`scheduler.loop.stats`), which ``/metrics`` reads.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db import transaction

from jobs.models import Job
from jobs.services import job_move_abandon, job_requeue
from scheduler.bridge.policy import policy_at_speed
from scheduler.bridge.preview_state import publish
from scheduler.bridge.provisioning import pools_read, provisioning_read
from scheduler.bridge.snapshot import build
from scheduler.core import Reject, plan_cycle
from scheduler.core.model.vocabulary import JobState
from scheduler.gateways import gateway_get
from scheduler.gateways.protocol import ClusterGateway, ProvisioningGateway
from scheduler.gcpause import gc_paused
from scheduler.loop.apply import ApplyResult, Retry, apply_ops, waiting_record
from scheduler.loop.cycle_log import cycle_log
from scheduler.loop.locks import Lease
from scheduler.loop.provisioning import DEFAULT_TIMEOUT_S, RequestRepairs, provisions_refused, requests_reconcile
from scheduler.loop.reconcile import reconcile
from scheduler.loop.record import fence_check, record_plan
from scheduler.loop.stats import cycle_stats_record


@dataclass
class CycleReport:
    """What one cycle saw, decided and applied; ``as_json()`` is what ``schedule --once --json`` prints."""

    at: str
    nodes: int = 0
    pending: int = 0
    running: int = 0
    repairs: dict[str, list[str]] = field(default_factory=dict)
    decisions: dict[str, Any] = field(default_factory=dict)
    applied: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    requeued_after_refusal: list[str] = field(default_factory=list)
    moves_refused: list[str] = field(default_factory=list)  # moves the cluster refused: given up at once
    requests_refused: list[str] = field(default_factory=list)  # node requests the autoscaler refused: failed
    plan_ms: float = 0.0
    total_ms: float = 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "nodes": self.nodes,
            "pending": self.pending,
            "running": self.running,
            "repairs": self.repairs,
            "decisions": self.decisions,
            "applied": self.applied,
            "failed": self.failed,
            "requeued_after_refusal": self.requeued_after_refusal,
            "moves_refused": self.moves_refused,
            "requests_refused": self.requests_refused,
            "plan_ms": round(self.plan_ms, 1),
            "total_ms": round(self.total_ms, 1),
        }


def cycle_run(
    *,
    gateway: ClusterGateway | None = None,
    fence_token: int | None = None,
    lease: Lease | None = None,
    retry: Retry | None = None,
) -> CycleReport:
    """Run one cycle (module doc) and report it. ``lease``: the single-flight lock ``fence_token`` came from,
    confirmed before each write (reconcile, record).

    Raises :class:`~scheduler.errors.GatewayError` when the cluster cannot be observed (nothing was written)
    and :class:`~scheduler.errors.FencingError` when a newer cycle has recorded since this one took its lock, or
    the lease was lost.
    """
    # The cyclic collector is paused for the whole cycle, not only its plan: a cycle reads thousands of rows into
    # short-lived tuples that reference counting frees, and a collection on the way walks the worker's whole heap
    # whichever phase triggers it (scheduler.gcpause).
    with gc_paused():
        return _cycle_run(gateway=gateway, fence_token=fence_token, lease=lease, retry=retry)


def _cycle_run(
    *, gateway: ClusterGateway | None, fence_token: int | None, lease: Lease | None, retry: Retry | None
) -> CycleReport:
    started = time.perf_counter()
    phases_s: dict[str, float] = {}
    gateway = gateway or gateway_get()
    observation = gateway.observe()
    phases_s["observe"] = time.perf_counter() - started
    # The cluster's clock is the cycle's clock: decisions are stamped with the instant they were based on.
    at = datetime.fromtimestamp(observation.observed_at, tz=UTC)
    report = CycleReport(at=at.isoformat(), nodes=len(observation.nodes))

    loop = settings.SCHEDULER
    grace_s = float(loop.get("evict_grace_s", 30.0))
    phase_started = time.perf_counter()
    # On-demand capacity for peaks, only with a cluster that can grow (scheduler.loop.provisioning): the pools are
    # the one read a cluster without any pays.
    pools = pools_read() if isinstance(gateway, ProvisioningGateway) else []
    if lease is not None:
        lease.confirm()
    with transaction.atomic():
        fence_check(fence_token)
        # The simulated fleet reports its simulated jobs' checkpoints; a cluster, its job directories' manifests.
        source = "simulated" if gateway.name == "simulated" else "manifest"
        repairs = reconcile(
            observation,
            at=at,
            checkpoint_source=source,
            evict_grace_s=grace_s,
            move_ready_s=float(loop.get("move_ready_s", 600.0)),
        )
        requests = RequestRepairs()
        if pools or observation.node_requests:
            timeout_s = float(loop.get("node_request_timeout_s", DEFAULT_TIMEOUT_S))
            requests = requests_reconcile(observation, at=at, timeout_s=timeout_s)
    report.repairs = repairs.as_json()
    report.repairs.update({kind: done for kind, done in requests.as_json().items() if done})
    phases_s["reconcile"] = time.perf_counter() - phase_started

    phase_started = time.perf_counter()
    policy = policy_at_speed(observation.clock_speed)
    now = at.timestamp()
    offered = provisioning_read(pools=pools, now=now, speed=observation.clock_speed, retry_s=policy.provision_retry_s)
    built = build(observation, policy, now, offered.provisioning)
    report.pending, report.running = len(built.snapshot.pending), len(built.snapshot.running)
    plan_started = time.perf_counter()
    plan = plan_cycle(built.snapshot, policy, now)
    if built.unreadable:  # rows the snapshot could not read are rejected like jobs the engine refuses
        unreadable = tuple(Reject(job=job_id, reason=reason) for job_id, reason in sorted(built.unreadable.items()))
        plan = replace(plan, rejections=plan.rejections + unreadable)
    report.plan_ms = (time.perf_counter() - plan_started) * 1000
    phases_s["plan"] = time.perf_counter() - phase_started  # the snapshot built from the rows, then the plan

    phase_started = time.perf_counter()
    ordered = {job.id: (job.priority.value, job.rank) for job in built.snapshot.pending}
    if lease is not None:
        lease.confirm()
    recorded = record_plan(
        plan, observation, at=at, fence_token=fence_token, ordered=ordered, notes=offered.failure_notes
    )
    report.decisions = recorded.decisions
    phases_s["record"] = time.perf_counter() - phase_started

    phase_started = time.perf_counter()
    retry = retry or Retry(
        attempts=int(loop.get("apply_attempts", 3)), backoff_s=float(loop.get("apply_backoff_s", 0.2))
    )
    ops = [*repairs.ops, *requests.ops, *recorded.ops]
    # Nothing to apply (most steady cycles): no batch, so no empty transaction on the gateway's side either.
    result = apply_ops(gateway, ops, grace_s=grace_s, retry=retry) if ops else ApplyResult()
    waiting_record(gateway, recorded.waiting)
    report.applied, report.failed = result.applied, result.failed
    report.requeued_after_refusal = _requeue_refused(result, at)
    report.moves_refused, requeued = _moves_refused(result, at)
    report.requeued_after_refusal += requeued
    report.requests_refused = provisions_refused(result.provisions_refused, at=at)
    phases_s["apply"] = time.perf_counter() - phase_started
    # Applied and recorded: the state it leaves is what the submit previews start from until the next cycle (with
    # a shared cache only; 0.15-0.2 s at 12,000 pending, in the cycle's total but no phase's).
    publish(built.snapshot, plan, now, observation.clock_speed if observation.clock_speed > 0 else 1.0)
    report.total_ms = (time.perf_counter() - started) * 1000
    ended = datetime.fromtimestamp(observation.observed_at + report.total_ms / 1000, tz=UTC)
    cycle_stats_record(observation=observation, phases_s=phases_s, decisions=report.decisions, at=ended)
    cycle_log(
        cycle=fence_token,
        decisions=report.decisions,
        repairs=sum(len(v) for v in report.repairs.values()),
        failed=len(report.failed),
        duration_ms=report.total_ms,
    )
    return report


def _requeue_refused(result: ApplyResult, at: datetime) -> list[str]:
    """Binds the cluster refused (a node went, a device was taken) go back to the queue at once."""
    requeued: list[str] = []
    if not result.refused:
        return requeued
    with transaction.atomic():
        for op, message in result.refused:
            job = Job.objects.select_for_update().filter(pk=int(op.request.job), state=JobState.RUNNING).first()
            if job is not None:
                job_requeue(job=job, reason="bind-refused", by=None, at=at, message=message)
                requeued.append(op.request.job)
    return requeued


def _moves_refused(result: ApplyResult, at: datetime) -> tuple[list[str], list[str]]:
    """Moves the cluster refused (a node went, a device was taken) are given up at once: the job keeps serving
    from its old placement. A refused move that re-applies the generation the job serves from (it holds nothing
    older) is a refused bind: the job goes back to the queue."""
    given_up: list[str] = []
    requeued: list[str] = []
    if not result.moves_refused:
        return given_up, requeued
    with transaction.atomic():
        for op, message in result.moves_refused:
            job = Job.objects.select_for_update().filter(pk=int(op.request.job), state=JobState.RUNNING).first()
            if job is None:
                continue
            if job.allocations.filter(ended_at__isnull=True, generation__lt=op.generation).exists():
                job_move_abandon(job=job, generation=op.generation, at=at, reason=f"refused by the cluster: {message}")
                given_up.append(op.request.job)
            else:
                job_requeue(job=job, reason="bind-refused", by=None, at=at, message=message)
                requeued.append(op.request.job)
    return given_up, requeued
