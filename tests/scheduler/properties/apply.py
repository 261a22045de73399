"""Apply a :class:`Plan` to a :class:`Snapshot`, as the services and the gateway would: a pure helper for the
properties ("a plan applied twice changes nothing").

- Evictions stop the job and requeue it (pending again) and record a :class:`Preemption` when ``by`` is set.
- Reconfigurations replace the GPU's layout and mark the node reconfiguring until ``ready_at``.
- Binds start the job at ``now`` on its slots.
- Moves begin: the job runs on its new slots and holds the old ones (``moving_from``) until the move completes.
- Rejections drop the job.
"""

from __future__ import annotations

from dataclasses import replace

from scheduler.core.model.plan import Plan
from scheduler.core.model.snapshot import Job, MigLayout, Preemption, Running, Snapshot


def apply_plan(snapshot: Snapshot, plan: Plan, now: float) -> Snapshot:
    """The snapshot after ``plan`` has been applied at ``now``."""
    running: dict[str, Running] = {r.job.id: r for r in snapshot.running}
    pending: dict[str, Job] = {}
    for job in sorted(snapshot.pending, key=lambda j: (j.id, j.submitted_at, j.rank)):
        pending.setdefault(job.id, job)
    preemptions = list(snapshot.preemptions)
    for evict in plan.evictions:
        stopped = running.pop(evict.job)
        pending[evict.job] = stopped.job
        if evict.by is not None:
            preemptions.append(Preemption(victim=evict.job, by=evict.by, at=now))
    nodes = {node.name: node for node in snapshot.nodes}
    for change in plan.reconfigurations:
        node = nodes[change.node]
        layouts: list[MigLayout] = [node.layout(i) for i in range(node.gpu_count)]
        layouts[change.gpu] = change.new
        until = max(node.reconfiguring_until or change.ready_at, change.ready_at)
        nodes[change.node] = replace(node, mig=tuple(layouts), reconfiguring_until=until)
    for bind in plan.binds:
        job = pending.pop(bind.job)
        running[bind.job] = Running(job=job, slots=bind.slots, started_at=now)
    for move in plan.moves:
        moved = running[move.job]
        running[move.job] = replace(moved, slots=move.slots, moving_from=move.released, moved_at=(*moved.moved_at, now))
    for reject in plan.rejections:
        pending.pop(reject.job, None)
    return Snapshot(
        nodes=tuple(nodes[name] for name in sorted(nodes)),
        teams=snapshot.teams,
        running=tuple(running[job_id] for job_id in sorted(running)),
        pending=tuple(pending[job_id] for job_id in sorted(pending)),
        preemptions=tuple(preemptions),
    )
