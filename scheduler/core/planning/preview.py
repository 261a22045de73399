"""What the engine would do with a job submitted now: the placement it gets, or why it waits, or why it never
runs — the answer the submit page and the ``rightsize`` API give before anything is written.

The job is added to the snapshot's pending work (behind the jobs already there, as a new submission is) and the
cycle is planned exactly as the loop plans it (:func:`scheduler.core.planning.cycle.plan_cycle`), through
:func:`~scheduler.core.planning.cycle.plan_for`: with the speed-ups on, the cycle stops once the job is bound and
explains no job taken after it (:mod:`scheduler.core.speedups.focus`: nothing there changes its answer). When
the plan binds the job, that placement is the answer (``starts``). A MIG job often cannot bind at once: once its
demand has been unmet for ``policy.reconfiguration_hysteresis_cycles`` cycles, the engine changes an idle GPU's
layout to cut the slice, and binds on a later cycle. So while the job waits for a MIG instance — its demand still
younger than the hysteresis, or a reconfiguration planned, under way or held for the next cycle — the preview
applies the plan (the layouts as planned, the binds as running work, the evictions requeued), moves the clock to
the next cycle or to when the changes are done, and plans again, up to ``hysteresis + 3`` cycles
(``after-mig-change``). Any other
wait is the answer (``waits``, with the engine's reason and start estimate), as is a rejection (``never``).

Other pending jobs are planned too, so a job behind a queue is told it waits. What the preview cannot know is
what happens between now and the next real cycle: a job submitted meanwhile, a node lost.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from scheduler.core.model.demand import DemandKind
from scheduler.core.model.plan import Plan, Waiting
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, MigLayout, Node, Running, Slots, Snapshot
from scheduler.core.model.vocabulary import BlockerKind
from scheduler.core.placement.offers import offers
from scheduler.core.planning.cycle import plan_for

# Cycles planned beyond the hysteresis: one that changes a layout, one that binds, and one more for a change
# that follows when the first one's slice went to a job ahead. A job still waiting then waits for something else.
EXTRA_ROUNDS = 3
PREVIEW_JOB = "\x00preview"  # an id no stored job has (those are primary keys)


class PreviewOutcome(StrEnum):
    STARTS = "starts"  # the next cycle binds it
    AFTER_RECONFIGURATION = "after-mig-change"  # it binds once the MIG reconfigurations planned for it are done
    WAITS = "waits"
    NEVER = "never"  # the engine rejects it: it could never run on this cluster


@dataclass(frozen=True, slots=True)
class Preview:
    outcome: PreviewOutcome
    slots: Slots = ()  # per replica, when it starts
    after_s: float = 0.0  # seconds until it starts (the reconfigurations' duration for after-mig-change)
    evictions: int = 0  # running jobs the engine stops to make room for it
    reason: str = ""  # why it waits or never runs, in the engine's words
    eta_s: float | None = None  # when it waits: the engine's start estimate, seconds from now, if it has one


def preview(snapshot: Snapshot, job: Job, policy: Policy, now: float, *, speedups: bool = True) -> Preview:
    """The engine's answer for ``job`` submitted at ``now`` on ``snapshot`` (module doc). ``speedups=False``:
    every cycle planned whole by the plain rules — the same answer, found slower."""
    candidate = replace(job, id=PREVIEW_JOB, submitted_at=now)
    state = replace(snapshot, pending=(*snapshot.pending, candidate))
    at = planned_at = now
    evictions = 0
    wants_mig = any(offer.demand.kind == DemandKind.MIG for offer in offers(candidate, snapshot.nodes, policy))
    for _ in range(policy.reconfiguration_hysteresis_cycles + EXTRA_ROUNDS):
        plan = plan_for(state, policy, at, PREVIEW_JOB, speedups=speedups)
        evictions += sum(1 for evict in plan.evictions if evict.by == PREVIEW_JOB)
        bind = next((b for b in plan.binds if b.job == PREVIEW_JOB), None)
        if bind is not None:
            outcome = PreviewOutcome.STARTS if at == now else PreviewOutcome.AFTER_RECONFIGURATION
            return Preview(outcome, slots=bind.slots, after_s=at - now, evictions=evictions)
        reject = next((r for r in plan.rejections if r.job == PREVIEW_JOB), None)
        if reject is not None:
            return Preview(PreviewOutcome.NEVER, reason=reject.reason)
        waiting = next(w for w in plan.waiting if w.job == PREVIEW_JOB)
        step = _next_cycle(state, plan, waiting, at, policy) if wants_mig else None
        if step is None:
            return _waits(waiting, at - now)
        planned_at, state, at = at, _applied(state, plan, step), step
    return _waits(waiting, planned_at - now)


def _waits(waiting: Waiting, elapsed_s: float) -> Preview:
    eta = waiting.eta_s + elapsed_s if waiting.eta_s is not None else None
    return Preview(PreviewOutcome.WAITS, reason=waiting.reason, eta_s=eta)


def _next_cycle(state: Snapshot, plan: Plan, waiting: Waiting, at: float, policy: Policy) -> float | None:
    """When to plan again for a job waiting for a MIG instance: the next cycle, or when the reconfigurations under
    way are done; None when it waits for something a later cycle would not change (module doc)."""
    changing = bool(plan.reconfigurations) or waiting.blocker in (BlockerKind.RECONFIGURING, BlockerKind.HELD)
    if not changing and waiting.blocker != BlockerKind.CAPACITY:
        return None
    ends = [r.ready_at for r in plan.reconfigurations]
    ends += [n.reconfiguring_until for n in state.nodes if n.reconfiguring_until is not None]
    return max([at + policy.cycle_s, *ends])


def _applied(state: Snapshot, plan: Plan, at: float) -> Snapshot:
    """``state`` after ``plan`` is applied and its reconfigurations are done at ``at``."""
    layouts = {(r.node, r.gpu): r.new for r in plan.reconfigurations}
    nodes = tuple(_node_at(node, layouts, at) for node in state.nodes)
    evicted = {evict.job for evict in plan.evictions}
    bound = {b.job: b.slots for b in plan.binds}
    rejected = {r.job for r in plan.rejections}
    pending = {job.id: job for job in state.pending}
    running = tuple(r for r in state.running if r.job.id not in evicted)
    running += tuple(Running(job=pending[job_id], slots=slots, started_at=at) for job_id, slots in bound.items())
    requeued = tuple(r.job for r in state.running if r.job.id in evicted)
    waiting = tuple(job for job in state.pending if job.id not in bound and job.id not in rejected)
    return replace(state, nodes=nodes, running=running, pending=(*requeued, *waiting))


def _node_at(node: Node, layouts: dict[tuple[str, int], MigLayout], at: float) -> Node:
    changed = [gpu for (name, gpu) in layouts if name == node.name]
    if changed:
        mig = list(node.mig) + [()] * (node.gpu_count - len(node.mig))
        for gpu in changed:
            mig[gpu] = layouts[(node.name, gpu)]
        return replace(node, mig=tuple(mig), reconfiguring_until=None)
    if node.reconfiguring_until is not None and node.reconfiguring_until <= at:
        return replace(node, reconfiguring_until=None)
    return node
