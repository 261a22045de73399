"""Record one cycle's :class:`~scheduler.core.Plan` in one transaction (DESIGN.md §1, step 3).

Allocations, job states, job events and every pending job's queue position, ETA and reason are written
together, or not at all. A move (``plan.moves``) is recorded as the next generation's allocations beside the job's
open ones and a ``moved`` event; the old rows stay open until reconciliation sees the new replicas ready
(:mod:`scheduler.loop.reconcile`). Operations on jobs whose state changed since the snapshot (cancelled meanwhile) are
skipped. Positions, ETAs and reasons are written only when every waiting job still has the priority and rank
the plan ordered it by (``ordered``): a lead who reordered or re-prioritised meanwhile has had fresh positions
written at once (:mod:`jobs.services.positions`), which a plan of the order before would make stale again; the
next cycle writes them. With a fencing token, the transaction first checks that no newer cycle has recorded (else
:class:`~scheduler.errors.FencingError` and nothing is written), then raises the fence to its token.

What it costs at scale (thousands of waiting jobs; a few binds in a steady cycle, thousands in the first on an
empty cluster): the jobs whose state the plan changes are locked in one query; the binds are written all at once,
in a fixed number of statements (:mod:`jobs.services.binds`: one insert of every allocation, one update of every
state, one insert of every event), and the evictions, moves and rejections (few) one by one through
:mod:`jobs.services`; the waiting jobs are read as value tuples, not locked, and only those whose queue fields
changed are written, in one statement for all (:mod:`jobs.services.queue_fields`). So the record's queries grow
neither with the queue nor with the binds.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from django.db import transaction

from billing.services.production_waits import production_wait_record
from jobs.models import Allocation, Job
from jobs.services import job_bind_record_many, job_finish, job_move_start, job_requeue
from jobs.services.queue_fields import QUEUE_FIELDS, QueueFields, job_queue_fields_write_bulk
from scheduler.bridge.vocabulary import FENCE_NAME
from scheduler.core import Plan
from scheduler.core.model.snapshot import MigLayout, Slots
from scheduler.core.model.vocabulary import JobState, Priority
from scheduler.errors import FencingError
from scheduler.gateways.protocol import JobWaiting, MigConfigState, Observation
from scheduler.kept_rows import values_read
from scheduler.loop.apply import BindOp, EvictOp, MoveOp, Op, ReconfigureOp, bind_request
from scheduler.loop.production_wait import production_wait_rows, production_wait_seconds
from scheduler.loop.provisioning import provisioning_record
from scheduler.models import Node, SchedulerFence

log = logging.getLogger(__name__)


@dataclass
class Recorded:
    ops: list[Op] = field(default_factory=list)
    decisions: dict[str, Any] = field(default_factory=dict)
    waiting: list[JobWaiting] = field(default_factory=list)  # why each job still waits, for the cluster's record


def fence_check(token: int | None) -> None:
    """Inside a transaction: lock the fence row, whatever the token (it serialises the record with a lead's order
    change, :func:`jobs.services.positions.positions_lock`); then refuse a token older than the last one that
    recorded, and store this one."""
    fence, _ = SchedulerFence.objects.select_for_update().get_or_create(name=FENCE_NAME)
    if token is None:
        return
    if token < fence.token:
        raise FencingError(f"fencing token {token} is older than {fence.token}: a newer cycle has recorded")
    if token != fence.token:
        fence.token = token
        fence.save(update_fields=["token", "updated_at"])


def fence_floor() -> int:
    """The last token that recorded (0 before the first): the floor of the lock's next token
    (:mod:`scheduler.loop.locks`), so that a fencing counter lost with Redis restarts above it."""
    return SchedulerFence.objects.filter(name=FENCE_NAME).values_list("token", flat=True).first() or 0


def record_plan(
    plan: Plan,
    observation: Observation,
    *,
    at: datetime,
    fence_token: int | None,
    ordered: Mapping[str, tuple[str, int]] | None = None,
    notes: Mapping[str, str] | None = None,
) -> Recorded:
    """Write ``plan``'s decisions at ``at``; return the operations to apply and a summary of the decisions.
    ``ordered``: the (priority, rank) of each pending job as the plan's snapshot read them (module doc); None
    writes the waiting jobs' positions whatever their rows hold now. ``notes``: a waiting job's reason the loop
    knows better than the engine (a node request of its failed: :mod:`scheduler.bridge.provisioning`)."""
    ids = (
        {int(e.job) for e in plan.evictions}
        | {int(b.job) for b in plan.binds}
        | {int(r.job) for r in plan.rejections}
        | {int(m.job) for m in plan.moves}
    )
    result = Recorded()
    with transaction.atomic():
        # The fence row first, always: it is what keeps a lead's order change (jobs.services.positions, which
        # takes the same row before any job row) from interleaving with this record, so the waiting jobs' rows
        # need no lock of their own (_waiting_read).
        fence_check(fence_token)
        # The jobs whose state the plan changes are locked: a cancel waits for this record, or this record
        # reads the job cancelled and skips it.
        jobs: dict[str, Job] = {
            str(job.pk): job for job in Job.objects.select_for_update().filter(pk__in=ids).select_related("team")
        }
        result.decisions["evictions"] = _evictions(plan, jobs, at, result.ops)
        result.decisions["reconfigurations"] = _reconfigurations(plan, observation, result.ops)
        result.decisions["binds"] = _binds(plan, jobs, at, result.ops)
        result.decisions["moves"] = _moves(plan, jobs, at, result.ops)
        result.decisions["rejections"] = _rejections(plan, jobs, at)
        # Node requests and autoscaled nodes (scheduler.loop.provisioning): keys only when the plan has any.
        result.decisions.update(
            {kind: done for kind, done in provisioning_record(plan, at=at, ops=result.ops).items() if done}
        )
        # Read after the writes above, in this transaction: a job evicted this cycle is pending again.
        waiting = _waiting_read(plan)
        result.decisions["waiting"] = _waiting(plan, waiting, at, ordered, notes or {})
        # What production waited for, for the advisor: decided by the loop, written by billing.
        production_wait_record(
            rows=production_wait_rows(plan, _production_waiting(waiting), observation),
            at=at,
            seconds=production_wait_seconds(),
        )
    result.waiting = [
        JobWaiting(job=w.job, namespace=row.namespace, reason=(notes or {}).get(w.job) or w.reason, kind=w.blocker)
        for w in plan.waiting
        if (row := waiting.get(w.job)) is not None and row.state == JobState.PENDING
    ]
    return result


def _evictions(plan: Plan, jobs: Mapping[str, Job], at: datetime, ops: list[Op]) -> list[dict[str, Any]]:
    done = []
    for evict in plan.evictions:
        job = jobs.get(evict.job)
        if job is None or job.state != JobState.RUNNING:
            continue
        job_requeue(job=job, reason=evict.reason, by=evict.by, at=at)
        ops.append(EvictOp(job=evict.job, namespace=job.team.namespace, reason=evict.reason, by=evict.by or ""))
        done.append({"job": evict.job, "reason": evict.reason, "by": evict.by})
    return done


def _reconfigurations(plan: Plan, observation: Observation, ops: list[Op]) -> list[dict[str, Any]]:
    """One MIG operation per node: its whole desired layout, the plan's changes over what it has now."""
    current: dict[str, list[MigLayout]] = {}
    for node in observation.nodes:
        layouts = node.mig
        if node.mig_status.state != MigConfigState.SUCCESS and node.mig_status.desired is not None:
            layouts = node.mig_status.desired
        current[node.name] = [tuple(layouts[i]) if i < len(layouts) else () for i in range(node.gpu_count)]
    changed: dict[str, list[MigLayout]] = {}
    done = []
    for change in plan.reconfigurations:
        wanted = changed.setdefault(change.node, list(current.get(change.node, [])))
        if change.gpu < len(wanted):
            wanted[change.gpu] = tuple(change.new)
        done.append(
            {
                "node": change.node,
                "gpu": change.gpu,
                "old": [list(i) for i in change.old],
                "new": [list(i) for i in change.new],
                "ready_at": datetime.fromtimestamp(change.ready_at, tz=UTC).isoformat(),
            }
        )
    for name, wanted in sorted(changed.items()):
        ops.append(ReconfigureOp(node=name, layouts=tuple(wanted)))
    return done


def _nodes_of(placements: Iterable[Slots]) -> dict[str, Node]:
    """The inventory rows of every node the placements use, read in one query."""
    names = {slot.node for slots in placements for replica in slots for slot in replica}
    return {node.name: node for node in Node.objects.filter(name__in=names)}


def _binds(plan: Plan, jobs: Mapping[str, Job], at: datetime, ops: list[Op]) -> list[dict[str, Any]]:
    """Record every bind whose job is still pending, all at once (:mod:`jobs.services.binds`: a fixed number of
    statements whatever the number of binds); the operations and decisions in the plan's order."""
    nodes = _nodes_of(bind.slots for bind in plan.binds)
    kept = [
        (job, bind) for bind in plan.binds if (job := jobs.get(bind.job)) is not None and job.state == JobState.PENDING
    ]
    bounds = job_bind_record_many(binds=[(job, bind.slots) for job, bind in kept], nodes=nodes, at=at)
    done = []
    for (job, bind), bound in zip(kept, bounds, strict=True):
        request = bind_request(job, bound.allocations, resume=bound.resumed, checkpoint=bound.checkpoint)
        ops.append(BindOp(request=request, team=job.team.slug))
        done.append(
            {
                "job": bind.job,
                "placements": [
                    [{"node": s.node, "gpu": s.gpu, "mig_profile": s.mig_profile, "mig_start": s.mig_start} for s in r]
                    for r in bind.slots
                ],
            }
        )
    return done


def _moves(plan: Plan, jobs: Mapping[str, Job], at: datetime, ops: list[Op]) -> list[dict[str, Any]]:
    """Record each move whose job is as the plan saw it: running, not opted out, no move already under way, and
    holding exactly the placement the move releases. Anything else changed since the snapshot: skipped, the next
    cycle plans again."""
    nodes = _nodes_of(move.slots for move in plan.moves)
    done = []
    for move in plan.moves:
        job = jobs.get(move.job)
        if job is None or job.state != JobState.RUNNING:
            continue
        if not job.consolidate:  # the engine reads the same flag; the live side keeps the job's word regardless
            log.warning(
                "cycle: job %s opted out of moves (consolidate false); its planned move is not recorded", job.pk
            )
            continue
        held = list(job.allocations.filter(ended_at__isnull=True).select_related("node"))
        if len({a.generation for a in held}) != 1 or _slots_of(held) != _slots_key(move.released):
            log.info("cycle: job %s no longer holds what its move releases; the move waits for the next plan", job.pk)
            continue
        taken = _taken(move.slots)
        if len(move.slots) != job.replicas or taken:
            # A device held meanwhile would make the allocation constraints fail the cycle's whole record.
            log.warning("cycle: job %s's move is not recorded: %s", job.pk, taken or "its replica count changed")
            continue
        created = job_move_start(job=job, slots=move.slots, nodes=nodes, at=at)
        generation = created[0].generation
        request = bind_request(job, created, resume=False)
        ops.append(MoveOp(request=request, team=job.team.slug, generation=generation))
        done.append({"job": move.job, "generation": generation, "from": _json(move.released), "to": _json(move.slots)})
    return done


_SlotKey = tuple[str, int, str | None, int | None]


def _taken(slots: Slots) -> str:
    """Which of ``slots`` a live allocation holds already ("" when none): a whole GPU with anything on it, a MIG
    instance held, or a GPU held whole under an instance."""
    wanted = [slot for replica in slots for slot in replica]
    live = Allocation.objects.filter(
        ended_at__isnull=True, node__name__in={s.node for s in wanted}, gpu_index__in={s.gpu for s in wanted}
    ).select_related("node")
    held = {(a.node.name, a.gpu_index, a.mig_start) for a in live}
    for slot in wanted:
        on_gpu = {start for node, gpu, start in held if (node, gpu) == (slot.node, slot.gpu)}
        if on_gpu and (slot.mig_start is None or None in on_gpu or slot.mig_start in on_gpu):
            instance = f" {slot.mig_profile}@{slot.mig_start}" if slot.mig_profile else ""
            return f"{slot.node} GPU {slot.gpu}{instance} is held"
    return ""


def _slots_of(allocations: list[Allocation]) -> list[list[_SlotKey]]:
    """Open allocations as comparable slots per replica (to check a move's ``released`` against the rows)."""
    by_replica: dict[int, list[_SlotKey]] = {}
    for a in allocations:
        by_replica.setdefault(a.replica, []).append((a.node.name, a.gpu_index, a.mig_profile or None, a.mig_start))
    return [sorted(slots, key=str) for _, slots in sorted(by_replica.items())]


def _slots_key(slots: Slots) -> list[list[_SlotKey]]:
    return [sorted(((s.node, s.gpu, s.mig_profile, s.mig_start) for s in replica), key=str) for replica in slots]


def _json(slots: Slots) -> list[list[dict[str, Any]]]:
    return [
        [{"node": s.node, "gpu": s.gpu, "mig_profile": s.mig_profile, "mig_start": s.mig_start} for s in replica]
        for replica in slots
    ]


def _rejections(plan: Plan, jobs: Mapping[str, Job], at: datetime) -> list[dict[str, Any]]:
    done = []
    for reject in plan.rejections:
        job = jobs.get(reject.job)
        if job is None or job.state != JobState.PENDING:
            continue
        job_finish(job=job, state=JobState.REJECTED, at=at, reason=reject.reason)
        done.append({"job": reject.job, "reason": reject.reason})
    return done


class _WaitingRow(NamedTuple):
    """A waiting job's row as the record needs it, read as values (no model instance)."""

    state: str
    priority: str
    rank: int
    namespace: str
    fields: QueueFields


def _waiting_read(plan: Plan) -> dict[str, _WaitingRow]:
    """The rows of ``plan``'s waiting jobs, by job id (a job deleted meanwhile is missing): every pending row in one
    query, then, only when some waiting job is no longer pending (cancelled or bound meanwhile: rare), those by id.

    The pending rows are chosen by their state rather than by thousands of ids as parameters (Django prepares each
    one), unordered, and each distinct start estimate converted once (:func:`~scheduler.kept_rows.values_read`).
    Not kept between cycles: any bind or end moves every later place, so the rows seldom repeat.

    Not locked (``select_for_update``), on purpose: the lock it would add protects nothing the fence row does not.
    A waiting row is written here only for its queue fields, and the writers that could race with that are
    (1) an order change, which writes fresh positions and takes the fence row first (serialised with this whole
    record, so either its priorities and ranks are read here and the positions left alone, or it waits and
    writes after), and (2) a state change (a cancel), which the write leaves alone by itself: it writes only
    rows still pending and, on PostgreSQL, skips a row another transaction holds rather than waiting for it
    (:mod:`jobs.services.queue_fields`). Locking thousands of waiting rows up front would only make every cancel
    of a waiting job wait for the record, and could deadlock with a bulk cancel that locks in another order."""
    wanted = {w.job for w in plan.waiting}
    if not wanted:
        return {}
    pending = values_read(
        Job.objects.filter(state=JobState.PENDING).order_by().values_list(*_WAITING_COLUMNS), _waiting_row
    )
    rows = {pk: row for pk, row in pending if pk in wanted}
    others = [int(job) for job in wanted if job not in rows]
    if others:
        rows.update(map(_waiting_row, Job.objects.filter(pk__in=others).order_by().values_list(*_WAITING_COLUMNS)))
    return rows


_WAITING_COLUMNS = ("pk", "state", "priority", "rank", "team__namespace", *QUEUE_FIELDS)


def _waiting_row(values: tuple[Any, ...]) -> tuple[str, _WaitingRow]:
    """A row of :data:`_WAITING_COLUMNS` as (job id, row)."""
    pk, state, priority, rank, namespace, *fields = values
    return str(pk), _WaitingRow(state, priority, rank, namespace, QueueFields(*fields))


def _production_waiting(waiting: Mapping[str, _WaitingRow]) -> dict[str, Job]:
    """The pending production jobs among the waiting ones, as instances (the engine's view of a job needs them):
    few, and read only when there are any."""
    ids = [
        int(pk) for pk, row in waiting.items() if row.state == JobState.PENDING and row.priority == Priority.PRODUCTION
    ]
    if not ids:
        return {}
    return {str(job.pk): job for job in Job.objects.filter(pk__in=ids).select_related("team", "project")}


def _reordered(waiting: Mapping[str, _WaitingRow], ordered: Mapping[str, tuple[str, int]] | None) -> bool:
    """Has a waiting job's priority or rank changed since the snapshot the plan ordered?"""
    if ordered is None:
        return False
    for job, row in waiting.items():
        seen = ordered.get(job)
        if seen is not None and (row.priority, row.rank) != seen:
            return True
    return False


def _waiting(
    plan: Plan,
    waiting: Mapping[str, _WaitingRow],
    at: datetime,
    ordered: Mapping[str, tuple[str, int]] | None,
    notes: Mapping[str, str],
) -> int:
    """Write the queue fields of the waiting jobs still pending whose fields the plan changes (none when the queue
    was reordered since the snapshot); the number of waiting jobs that still exist."""
    count = len([w for w in plan.waiting if w.job in waiting])
    if _reordered(waiting, ordered):
        log.info("cycle: the queue was reordered since the snapshot; its positions stay until the next cycle")
        return count
    changed = []
    for w in plan.waiting:
        row = waiting.get(w.job)
        if row is None or row.state != JobState.PENDING:
            continue
        eta = at + timedelta(seconds=w.eta_s) if w.eta_s is not None else None
        fields = QueueFields(w.position, w.team_position, eta, notes.get(w.job) or w.reason)
        if row.fields != fields:
            changed.append((int(w.job), fields))
    job_queue_fields_write_bulk(changed)
    return count
