"""The state a cycle leaves: its snapshot with its plan applied, as the next cycle would find it if nothing else
happened in between — what a question asked between cycles (:mod:`scheduler.core.planning.preview`) may start
from instead of reading the whole state again.

How each part of a plan is carried, as the loop records it (``scheduler.loop.record``):

- a bind: the job runs on its slots from the cycle's instant;
- an eviction: the job leaves the running work and is pending again, and the eviction
  is a past preemption (the victim's ping-pong protection) when it made room for a job;
- a rejection: the job leaves the queue;
- a reconfiguration: its GPU has the new layout, and its node takes nothing new until the change is ready (as a
  node whose change is in flight is observed);
- a move: the job runs on its new slots and still holds the old ones until its new replicas are ready, and the
  move's start counts toward its budget;
- a provision: a node request in flight (its id the job's, as the cycle's own requests have no other yet), its
  GPU-hours taken from the budgets; a withdrawal: the request is gone; a release: the node is gone.

What the carried state cannot know is what the cluster and the people did since: jobs finished or submitted,
nodes lost, a reconfiguration done early. Its user adds what it can read cheaply (the submissions since).
"""

from __future__ import annotations

from dataclasses import replace

from scheduler.core.model.plan import Plan
from scheduler.core.model.provisioning import NodeRequest, Provisioning
from scheduler.core.model.snapshot import MigLayout, Node, Preemption, Running, Snapshot


def carried(snapshot: Snapshot, plan: Plan, at: float) -> Snapshot:
    """``snapshot`` after ``plan``, planned at ``at``, is applied (module doc)."""
    evicted = {evict.job for evict in plan.evictions}
    bound = {b.job: b.slots for b in plan.binds}
    rejected = {r.job for r in plan.rejections}
    moved = {m.job: m for m in plan.moves}
    pending = {job.id: job for job in snapshot.pending}
    running: list[Running] = []
    for entry in snapshot.running:
        if entry.job.id in evicted:
            continue
        move = moved.get(entry.job.id)
        if move is not None:
            entry = replace(entry, slots=move.slots, moving_from=move.released, moved_at=(*entry.moved_at, at))
        running.append(entry)
    running += [Running(job=pending[job_id], slots=slots, started_at=at) for job_id, slots in bound.items()]
    requeued = tuple(r.job for r in snapshot.running if r.job.id in evicted)
    waiting = tuple(job for job in snapshot.pending if job.id not in bound and job.id not in rejected)
    preempted = tuple(Preemption(victim=e.job, by=e.by, at=at) for e in plan.evictions if e.by is not None)
    released = {release.node for release in plan.releases}
    return replace(
        snapshot,
        nodes=tuple(node for node in _nodes(snapshot.nodes, plan) if node.name not in released),
        running=tuple(running),
        pending=(*requeued, *waiting),
        preemptions=(*snapshot.preemptions, *preempted),
        provisioning=_provisioning(snapshot.provisioning, plan, at),
    )


def _provisioning(provisioning: Provisioning, plan: Plan, at: float) -> Provisioning:
    """The pools' part after the plan's provisions, withdrawals and releases (module doc)."""
    if not (plan.provisions or plan.withdrawals or plan.releases):
        return provisioning
    withdrawn = {withdraw.request for withdraw in plan.withdrawals}
    released = {release.node for release in plan.releases}
    asked = tuple(
        NodeRequest(id=p.job, job=p.job, pool=p.pool, nodes=p.nodes, requested_at=at, arrives_at=p.arrives_at)
        for p in plan.provisions
    )
    budget = dict(provisioning.budget_gpu_hours)
    for provision in plan.provisions:
        for key in (provision.team, ""):
            if key in budget:
                budget[key] -= provision.gpu_hours
    return replace(
        provisioning,
        requests=(*(r for r in provisioning.requests if r.id not in withdrawn), *asked),
        idle_since=tuple(entry for entry in provisioning.idle_since if entry[0] not in released),
        budget_gpu_hours=tuple(sorted(budget.items())),
    )


def _nodes(nodes: tuple[Node, ...], plan: Plan) -> tuple[Node, ...]:
    """The nodes with the plan's new layouts, closed until their changes are ready."""
    layouts: dict[str, dict[int, MigLayout]] = {}
    ready: dict[str, float] = {}
    for change in plan.reconfigurations:
        layouts.setdefault(change.node, {})[change.gpu] = change.new
        ready[change.node] = max(ready.get(change.node, change.ready_at), change.ready_at)
    if not layouts:
        return nodes
    result = []
    for node in nodes:
        changed = layouts.get(node.name)
        if changed is None:
            result.append(node)
            continue
        mig = list(node.mig) + [()] * (node.gpu_count - len(node.mig))
        for gpu, layout in changed.items():
            mig[gpu] = layout
        until = max(ready[node.name], node.reconfiguring_until or ready[node.name])
        result.append(replace(node, mig=tuple(mig), reconfiguring_until=until))
    return tuple(result)
