"""Make the database and the cluster agree before planning (DESIGN.md §1: "a crash between any two steps
leaves the database and the cluster reconcilable by the next cycle").

Decisions are recorded before they are applied, so the database is the intent and the observation the fact.
For each job, comparing the two gives one of:

========================================  ======================================================
database says / cluster shows             repair
========================================  ======================================================
running / reports a checkpoint later than record a ``checkpointed`` event at the checkpoint's time
the last one recorded                     (first, so a loss recorded below starts from it)
running / one of its nodes under a spot   record ``draining`` once for the run (:mod:`scheduler.loop.notice`)
notice, or drained by an admin            and evict it (``spot-reclaim``; ``node-drain``) with a grace inside
                                          the notice
running / every replica succeeded         record ``completed``; clean up its pods
running, drained / a replica still runs   evict it again (the eviction was not applied)
running, drained / replicas stopping      wait: the job may be checkpointing within its grace
running, drained / no replica left, or    requeue whole (``spot-reclaim``; ``node-drain``); clean
the notice's deadline + grace has passed  up what is left
running / a replica failed                an application failure: restart the whole job while its
                                          restart budget lasts, else record ``failed`` with the
                                          pod's message (jobs.services.restarts); clean up
running / a replica gone, or a node       requeue (``node-lost``): its work since the last
of its allocations no longer reported     checkpoint is lost; clean up what is left
running / no pods, or fewer than its      the bind was recorded but never (fully) applied:
replicas, its nodes all present           apply it again (idempotent)
running, moving / every new replica       the move is complete: end the old allocations (``moved``),
running and ready                         release the old replicas, record ``moved`` (completed)
running, moving / a new replica failed    give the move up: end the new allocations, stop the new
or gone, or not all ready within          replicas, record ``moved`` (abandoned, why); the job keeps
``move_ready_s`` of the move's start      its old placement
running, moving / fewer new replicas      the move was recorded but never (fully) applied: apply it
                                          again (idempotent)
running / replicas of a generation it     a release or an abandon was recorded but not applied:
holds no open allocation of               apply it again
pending, ended, or unknown / pods         an eviction, cancel or clean-up was recorded but not
                                          applied: evict the pods (not those already stopping)
a node an admin holds / open; a node no   cordon it; lift Microcosm's cordon
admin holds / Microcosm's cordon on it    (:mod:`scheduler.loop.cordons`)
========================================  ======================================================

"Moving" is a job with open allocations of two generations (:mod:`jobs.services.loop`, ``job_move_start``): the
older still serve while the newer start. Every other row of the table reads the generation the job serves from —
the old one until the move completes — so a failure of the old replicas mid-move is handled as it always is (and
its eviction stops the new replicas with them).

"Drained" is a ``draining`` event since the job's last bind: that is what tells a drained job whose pods are gone
(requeue it) from a bind recorded but not applied (apply it again).

The ``checkpointed`` events feed the ledger's lost-work rule (docs/billing.md: the work lost to a preemption is
counted from the job's last checkpoint) and the resume point of the job's next run. They are recorded only when
the cluster reports a checkpoint strictly later than the job's last recorded one and no later than the
observation, so re-running a cycle on the same view records nothing twice; those with a step go through
:func:`jobs.services.checkpoints_many.checkpoints_record`, the rules of ``checkpoint_record`` for every job at once
(idempotent per step, so a checkpoint the job also reported itself is kept once), one without (a backend that
knows only the time) is an event without a step.

Nothing here binds twice: a re-applied bind uses the job's own live allocations, which the database's
constraints keep exclusive.

The reads and writes are batched, so a cycle's queries do not grow with the running jobs: each kind of row is
read once for all of them (running jobs, live allocations, last checkpoints, drains, requeued jobs) and each
kind of record written in one insert. Only a job whose state changes (it completed, failed, was lost or moved)
costs its own writes, through the services that record that change.

The work is proportional to change, too: every running job is read as a value tuple (its id, replicas and
submission time) with the generations and nodes of its live allocations, which tell most jobs apart as *quiet* —
one generation, every replica of it reported and none failed, gone or all succeeded, every node present, no drain:
the table above has nothing to do for them (:func:`_quiet`). Only the others, few in a steady cycle, are loaded as
model instances with their allocations (two queries for all of them), which the services and the operations take.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import NamedTuple

from django.db import transaction
from django.db.models import Max

from jobs.models import Allocation, Job, JobEvent
from jobs.services import (
    CheckpointReport,
    job_fail_or_restart,
    job_finish,
    job_move_abandon,
    job_move_complete,
    job_requeue,
)
from jobs.services.checkpoints_many import checkpoints_record
from scheduler.core.model.vocabulary import EventType, EvictionReason, JobState
from scheduler.gateways.protocol import JobObservation, Observation, ReplicaObservation, ReplicaPhase
from scheduler.kept_rows import KeptRows
from scheduler.loop.apply import AbandonOp, EvictOp, Op, ReleaseOp, start_op
from scheduler.loop.cordons import cordons_wanted
from scheduler.loop.notice import Drain, drains_record, drains_running, notice_grace_s

log = logging.getLogger(__name__)

# Replicas not yet asked to stop: a drained job with one of these has not received its eviction.
_UNSTOPPED = frozenset({ReplicaPhase.PENDING, ReplicaPhase.BOUND, ReplicaPhase.RUNNING})


@dataclass
class Repairs:
    ops: list[Op] = field(default_factory=list)
    completed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    rebound: list[str] = field(default_factory=list)
    cleaned: list[str] = field(default_factory=list)
    checkpointed: list[str] = field(default_factory=list)
    restarted: list[str] = field(default_factory=list)  # application failures within the restart budget
    drained: list[str] = field(default_factory=list)  # asked to stop on a spot notice this cycle
    stopping: list[str] = field(default_factory=list)  # drained, pods within their grace: waited for
    requeued: list[str] = field(
        default_factory=list
    )  # drained, then requeued whole (an interruption, an admin's drain)
    moving: list[str] = field(default_factory=list)  # a move under way: its new replicas not all ready yet
    moved: list[str] = field(default_factory=list)  # a move completed: the old replicas released
    move_abandoned: list[str] = field(default_factory=list)  # a move given up: the job keeps its old placement

    def as_json(self) -> dict[str, list[str]]:
        return {
            "checkpointed": self.checkpointed,
            "completed": self.completed,
            "failed": self.failed,
            "lost": self.lost,
            "rebound": self.rebound,
            "cleaned": self.cleaned,
            "restarted": self.restarted,
            "drained": self.drained,
            "stopping": self.stopping,
            "requeued": self.requeued,
            "moving": self.moving,
            "moved": self.moved,
            "move_abandoned": self.move_abandoned,
        }


class _Requeued:
    """Which running jobs were requeued before, so a bind applied again resumes from their checkpoint. Read once
    for every running job, the first time a cycle applies a bind again (most cycles apply none)."""

    def __init__(self, running: Iterable[int]) -> None:
        self._running = list(running)
        self._requeued: frozenset[int] | None = None

    def __contains__(self, job_id: int) -> bool:
        if self._requeued is None:
            events = JobEvent.objects.filter(job_id__in=self._running, type=EventType.REQUEUED)
            self._requeued = frozenset(events.values_list("job_id", flat=True).distinct())
        return job_id in self._requeued


class _RunningRow(NamedTuple):
    """A running job as every cycle reads it: what tells a quiet job, and what its checkpoints are checked against."""

    pk: int
    replicas: int
    submitted_at: datetime


class _Held(NamedTuple):
    """A live allocation as every cycle reads it: its generation and its node."""

    generation: int
    node: str


# Every cycle reads every running row, most unchanged since the last: those are not converted again.
_kept_running_rows = KeptRows(_RunningRow._make)


@dataclass(frozen=True, slots=True)
class _Context:
    """What every job's repair reads: the observation, the nodes present, the cycle's instant, the usual grace,
    how long a move may wait, which jobs were requeued before."""

    observation: Observation
    present: frozenset[str]
    at: datetime
    evict_grace_s: float
    move_ready_s: float
    requeued: _Requeued


def reconcile(
    observation: Observation,
    *,
    at: datetime,
    checkpoint_source: str = "manifest",
    evict_grace_s: float = 30.0,
    move_ready_s: float = 600.0,
) -> Repairs:
    """Record what the cluster did since the last cycle and list the operations that bring it in line.

    One transaction; the returned ``ops`` are applied by the caller after it commits. ``checkpoint_source`` names
    where the observation's checkpoints come from (``manifest``: the job directory's manifest on a cluster;
    ``simulated``: the simulated fleet); ``evict_grace_s`` is the loop's usual eviction grace, which a spot
    notice's eviction may shorten (:func:`scheduler.loop.notice.notice_grace_s`); ``move_ready_s`` how long a move's
    new replicas have to be running and ready before the move is given up.
    """
    repairs = Repairs()
    with transaction.atomic():
        rows = (
            Job.objects.select_for_update().filter(state=JobState.RUNNING).order_by().values_list(*_RunningRow._fields)
        )
        running = {str(row.pk): row for row in _kept_running_rows.read(rows)}
        present = frozenset(node.name for node in observation.nodes)
        requeued = _Requeued(row.pk for row in running.values())
        context = _Context(observation, present, at, evict_grace_s, move_ready_s, requeued)
        held: dict[int, list[_Held]] = {}
        live = Allocation.objects.filter(job__state=JobState.RUNNING, ended_at__isnull=True).order_by()
        for job_pk, generation, node in live.values_list("job_id", "generation", "node__name"):
            held.setdefault(job_pk, []).append(_Held(generation, node))
        _checkpoints_record(running, observation, at, repairs, checkpoint_source)
        drains_record(observation=observation, at=at, evict_grace_s=evict_grace_s)
        repairs.ops.extend(cordons_wanted(observation))
        drains = drains_running() if running else {}  # the jobs read above, locked until this transaction ends
        restless = sorted(
            row.pk
            for job_id, row in running.items()
            if not _quiet(row, held.get(row.pk, []), observation.jobs.get(job_id), drains.get(row.pk), present)
        )
        if restless:
            jobs = Job.objects.select_related("team").in_bulk(restless)
            allocations: dict[int, list[Allocation]] = {}
            for allocation in Allocation.objects.filter(job_id__in=restless, ended_at__isnull=True).select_related(
                "node"
            ):
                allocations.setdefault(allocation.job_id, []).append(allocation)
            for pk in restless:
                _running_job(jobs[pk], allocations.get(pk, []), drains.get(pk), context, repairs)
        others = [job_id for job_id in observation.jobs if job_id not in running]
        states = dict(Job.objects.filter(pk__in=[int(j) for j in others if j.isdigit()]).values_list("pk", "state"))
        for job_id in sorted(others):
            observed = observation.jobs[job_id]
            if observed.replicas and observed.phases() <= {ReplicaPhase.STOPPING}:
                continue  # already asked to stop: they leave by themselves within their grace
            state = states.get(int(job_id)) if job_id.isdigit() else None
            reason = (
                "completed"
                if state == JobState.COMPLETED
                else "cancelled"
                if state == JobState.CANCELLED
                else (
                    "failed"
                    if state in (JobState.FAILED, JobState.REJECTED)
                    else "requeued"
                    if state
                    else "unknown-job"
                )
            )
            repairs.ops.append(EvictOp(job=job_id, namespace=observed.namespace, reason=reason))
            repairs.cleaned.append(job_id)
    return repairs


def _quiet(
    row: _RunningRow, held: list[_Held], observed: JobObservation | None, drain: Drain | None, present: frozenset[str]
) -> bool:
    """Whether :func:`_running_job` has nothing to record nor apply for the job (module doc): no drain, live
    allocations of one generation on nodes all present, at least its replicas reported, all of that generation,
    none failed or gone, not all succeeded. Errs only towards "not quiet", which loads the job and decides as
    always."""
    if drain is not None or not held or observed is None:
        return False
    generation = held[0].generation
    if any(h.generation != generation or h.node not in present for h in held):
        return False
    if any(replica.generation != generation for replica in observed.replicas):
        return False
    phases = observed.phases()
    if not phases or phases <= {ReplicaPhase.SUCCEEDED} or phases & {ReplicaPhase.FAILED, ReplicaPhase.GONE}:
        return False
    return len(observed.replicas) >= row.replicas


def _checkpoints_record(
    running: dict[str, _RunningRow], observation: Observation, at: datetime, repairs: Repairs, source: str
) -> None:
    """A ``checkpointed`` event for every running job whose reported checkpoint advanced (module doc)."""
    reported: dict[int, tuple[datetime, JobObservation]] = {}
    for job_id, job in running.items():
        observed = observation.jobs.get(job_id)
        if observed is None or observed.last_checkpoint_at is None:
            continue
        checkpoint_at = datetime.fromtimestamp(observed.last_checkpoint_at, tz=UTC)
        if checkpoint_at <= at:  # a checkpoint "from the future" is a clock problem, not a checkpoint
            reported[job.pk] = (checkpoint_at, observed)
    if not reported:
        return
    recorded = dict(
        JobEvent.objects.filter(job_id__in=reported, type=EventType.CHECKPOINTED)
        .values("job_id")
        .annotate(last=Max("at"))
        .values_list("job_id", "last")
    )
    advanced = [
        (job_pk, checkpoint_at, observed)
        for job_pk, (checkpoint_at, observed) in sorted(reported.items())
        if job_pk not in recorded or checkpoint_at > recorded[job_pk]
    ]
    new = []
    stepped: list[tuple[_RunningRow, CheckpointReport]] = []
    for job_pk, checkpoint_at, observed in advanced:
        if observed.last_checkpoint_step is None:
            new.append(JobEvent(job_id=job_pk, type=EventType.CHECKPOINTED, at=checkpoint_at, details={}))
        else:
            report = CheckpointReport(
                step=observed.last_checkpoint_step,
                saved_at=checkpoint_at,
                path=observed.last_checkpoint_path,
                source=source,
            )
            stepped.append((running[str(job_pk)], report))
    # One batch for every job's step (the rules of checkpoint_record, a constant number of queries), written
    # before the events without a step, as one call per job used to write them.
    outcome = checkpoints_record(reports=stepped, now=at)
    for job_pk, _checkpoint_at, observed in advanced:
        error = outcome.refused.get(job_pk)
        if error is not None:  # the cluster's word against the job's row
            log.warning("job %s: the checkpoint the cluster reports is not recorded: %s", job_pk, error)
        elif observed.last_checkpoint_step is None or job_pk in outcome.created:
            repairs.checkpointed.append(str(job_pk))
    JobEvent.objects.bulk_create(new)


def _running_job(
    job: Job, allocations: list[Allocation], drain: Drain | None, context: _Context, repairs: Repairs
) -> None:
    job_id = str(job.pk)
    at = context.at
    observed = context.observation.jobs.get(job_id)
    moves: list[Op] = []  # what the job's move needs: applied only if it runs on (below)
    moving = False
    if allocations:
        allocations, observed, moving = _generations(job, allocations, observed, context, repairs, moves)
    phases = observed.phases() if observed is not None else frozenset()
    lost_nodes = sorted({a.node.name for a in allocations} - context.present)
    if (
        observed is not None
        and phases
        and phases <= {ReplicaPhase.SUCCEEDED}
        and len(observed.replicas) >= job.replicas
    ):
        job_finish(job=job, state=JobState.COMPLETED, at=at)
        repairs.completed.append(job_id)
        repairs.ops.append(EvictOp(job=job_id, namespace=observed.namespace, reason="completed"))
        return
    if drain is not None:
        # Before the failure branch: a replica that exits with an error on its SIGTERM was stopped by the notice.
        _drained_job(job, drain, observed, context, repairs)
        return
    if ReplicaPhase.FAILED in phases:
        # An application failure (a non-zero exit, an OOM kill): the restart budget decides between a restart
        # of the whole job and failing it. Either way its pods go; a restart binds new ones from the queue.
        assert observed is not None
        message = next((r.message for r in observed.replicas if r.phase == ReplicaPhase.FAILED and r.message), "")
        outcome = job_fail_or_restart(job=job, exit_reason=message, at=at)
        (repairs.restarted if outcome.restarted else repairs.failed).append(job_id)
        reason = EvictionReason.APP_FAILURE if outcome.restarted else EvictionReason.FAILED
        repairs.ops.append(EvictOp(job=job_id, namespace=observed.namespace, reason=reason))
        return
    if ReplicaPhase.GONE in phases or lost_nodes or not allocations:
        message = f"node {', '.join(lost_nodes)} is gone" if lost_nodes else ""
        if observed is not None:
            gone = [r for r in observed.replicas if r.phase == ReplicaPhase.GONE]
            message = message or (gone[0].message if gone else "")
            repairs.ops.append(EvictOp(job=job_id, namespace=observed.namespace, reason=EvictionReason.NODE_LOST))
        job_requeue(job=job, reason=EvictionReason.NODE_LOST, by=None, at=at, message=message)
        repairs.lost.append(job_id)
        return
    # The job runs on: what its move (or the clean-up of an earlier one) needs is applied. Had it stopped above,
    # its eviction would stop every generation's replicas, and a move's would only start new ones.
    repairs.ops.extend(moves)
    if moving:
        repairs.moving.append(job_id)
    if observed is None or len(observed.replicas) < job.replicas:
        # Recorded, not (fully) applied: the crash-between-record-and-apply case. Apply the same bind again.
        repairs.ops.append(start_op(job, allocations, resume=job.pk in context.requeued))
        repairs.rebound.append(job_id)


def _generations(
    job: Job,
    allocations: list[Allocation],
    observed: JobObservation | None,
    context: _Context,
    repairs: Repairs,
    ops: list[Op],
) -> tuple[list[Allocation], JobObservation | None, bool]:
    """Carry a move under way one step (complete it, give it up, apply it again, or wait) and clean up the
    replicas of generations the job no longer holds; return the allocations and the replicas of the generation
    the job serves from now, which the rest of the repairs read (module doc, Moving), and whether its move still
    waits for the new replicas."""
    job_id = str(job.pk)
    generations = sorted({a.generation for a in allocations})
    serving, held = generations[0], set(generations)  # where it serves from; what it still holds
    waiting = False
    if len(generations) > 1:
        newest = generations[-1]
        new = [a for a in allocations if a.generation == newest]
        fresh = [r for r in observed.replicas if r.generation == newest] if observed is not None else []
        why = _move_trouble(job, new, fresh, context)
        if why:
            job_move_abandon(job=job, generation=newest, at=context.at, reason=why)
            repairs.move_abandoned.append(job_id)
            held.discard(newest)
        elif len({r.replica for r in fresh if r.phase == ReplicaPhase.RUNNING and r.ready}) >= job.replicas:
            job_move_complete(job=job, generation=newest, at=context.at)
            repairs.moved.append(job_id)
            serving, held = newest, {newest}
        else:
            if len(fresh) < job.replicas:  # recorded, not (fully) applied: start the new replicas again
                ops.append(start_op(job, new, resume=False))
            waiting = True
        allocations = [a for a in allocations if a.generation == serving]
    if observed is None:
        return allocations, None, waiting
    seen = {r.generation for r in observed.replicas}
    if any(g < min(held) for g in seen):  # a completed move's old replicas (its release not applied yet)
        ops.append(ReleaseOp(job=job_id, namespace=observed.namespace, generation=min(held)))
    if any(g > max(held) for g in seen):  # a move given up: its replicas (the abandon not applied yet)
        ops.append(AbandonOp(job=job_id, namespace=observed.namespace, generation=max(held) + 1))
    replicas = tuple(r for r in observed.replicas if r.generation == serving)
    serving_only = JobObservation(
        job=observed.job,
        namespace=observed.namespace,
        replicas=replicas,
        last_checkpoint_at=observed.last_checkpoint_at,
        last_checkpoint_step=observed.last_checkpoint_step,
        last_checkpoint_path=observed.last_checkpoint_path,
    )
    return allocations, serving_only, waiting


def _move_trouble(job: Job, new: list[Allocation], fresh: list[ReplicaObservation], context: _Context) -> str:
    """Why a move under way must be given up ("" when it may go on): a new replica failed or was lost, a node of
    the new placement is gone, or the new replicas are not all ready ``move_ready_s`` after they were started."""
    for replica in fresh:
        if replica.phase in (ReplicaPhase.FAILED, ReplicaPhase.GONE, ReplicaPhase.SUCCEEDED, ReplicaPhase.STOPPING):
            detail = f": {replica.message}" if replica.message else ""
            return f"new replica {replica.replica} {replica.phase}{detail}"
    lost = sorted({a.node.name for a in new} - context.present)
    if lost:
        return f"node {', '.join(lost)} of the new placement is gone"
    started = min(a.started_at for a in new)
    waited = (context.at - started).total_seconds()
    if waited >= context.move_ready_s:
        return f"the new replicas were not all ready within {context.move_ready_s:g} s"
    return ""


def _drained_job(job: Job, drain: Drain, observed: JobObservation | None, context: _Context, repairs: Repairs) -> None:
    """A job asked to stop by a spot notice (:mod:`scheduler.loop.notice`): evict it until its replicas stop,
    wait while they stop, then requeue it whole."""
    job_id = str(job.pk)
    now = context.at.timestamp()
    phases = observed.phases() if observed is not None else frozenset()
    waiting = now < drain.give_up_at
    reason = EvictionReason.NODE_DRAIN if drain.by_admin else EvictionReason.SPOT_INTERRUPTION
    if observed is not None and waiting and phases & _UNSTOPPED:
        grace = notice_grace_s(deadline_at=drain.deadline_at, now=now, evict_grace_s=context.evict_grace_s)
        repairs.ops.append(EvictOp(job=job_id, namespace=observed.namespace, reason=reason, grace_s=grace))
        repairs.drained.append(job_id)
        return
    if waiting and ReplicaPhase.STOPPING in phases:
        repairs.stopping.append(job_id)
        return
    if observed is not None:  # replicas lost with the node, or past their grace: clean up what is left
        repairs.ops.append(EvictOp(job=job_id, namespace=observed.namespace, reason=reason))
    if drain.by_admin:
        message = f"node {drain.node} drained by an admin"
    else:
        message = f"spot notice on node {drain.node}" + (f" ({drain.source})" if drain.source else "")
    job_requeue(job=job, reason=reason, by=None, at=context.at, message=message)
    repairs.requeued.append(job_id)
