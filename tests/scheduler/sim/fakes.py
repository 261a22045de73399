"""Planners for testing the replay without the engine: a FIFO first-fit and a scripted one."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from scheduler.core.model.cluster_state import ClusterState
from scheduler.core.model.plan import Bind, Plan, Reject, Waiting
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Slot, Snapshot


def _replica(state: ClusterState, job: Job) -> tuple[Slot, ...] | None:
    request = job.request
    for name, node in state.nodes.items():
        if not node.schedulable or node.reconfiguring_until is not None:
            continue
        gpus = list(state.node_gpus(name))
        if request.gpus is not None:
            free = [g.index for g in gpus if g.idle and not g.mig_on]
            if len(free) >= request.gpus:
                return tuple(Slot(name, i) for i in free[: request.gpus])
        elif request.mig_profile is not None:
            for gpu in gpus:
                starts = gpu.free_instances(request.mig_profile)
                if starts:
                    return (Slot(name, gpu.index, request.mig_profile, starts[0]),)
        elif request.gpu_milli is not None and node.sharing:
            for gpu in gpus:
                if not gpu.mig_on and gpu.whole is None and gpu.milli_used + request.gpu_milli <= 1000:
                    return (Slot(name, gpu.index, milli=request.gpu_milli),)
    return None


def first_fit(snapshot: Snapshot, policy: Policy, now: float) -> Plan:
    """FIFO first-fit, no preemption; whole GPUs, exact MIG profiles and shares; rejects what no node holds."""
    state = ClusterState(snapshot)
    binds, rejects, waiting = [], [], []
    biggest = max((n.gpu_count for n in snapshot.nodes), default=0)
    for job in sorted(snapshot.pending, key=lambda j: j.submitted_at):  # stable: submission order
        if biggest and job.request.gpus is not None and job.request.gpus > biggest:
            rejects.append(Reject(job.id, f"needs {job.request.gpus} GPUs on one node; the largest has {biggest}"))
            continue
        statement = state.begin()
        slots: list[tuple[Slot, ...]] = []
        for _ in range(job.replicas):
            replica = _replica(state, job)
            if replica is None:
                break
            state.place(job, (replica,)) if not slots else None
            slots.append(replica)
            if len(slots) > 1:
                state.place(Job(id=f"{job.id}#{len(slots)}", team=job.team, request=job.request), (replica,))
        if len(slots) == job.replicas:
            statement.commit()
            binds.append(Bind(job.id, tuple(slots)))
        else:
            statement.rollback()
            waiting.append(Waiting(job.id, len(waiting) + 1, 0, "waiting for capacity"))
    return Plan(binds=tuple(binds), rejections=tuple(rejects), waiting=tuple(waiting))


def scripted(script: Mapping[float, Plan], fallback: Callable[[Snapshot, Policy, float], Plan] | None = None):
    """Returns the scripted plan at the given cycle times, otherwise the fallback's plan (or nothing)."""

    def planner(snapshot: Snapshot, policy: Policy, now: float) -> Plan:
        if now in script:
            return script[now]
        return fallback(snapshot, policy, now) if fallback else Plan()

    return planner


def recording(planner, seen: Sequence | None = None):
    """Wraps a planner and keeps every (now, snapshot) it was given."""
    calls: list[tuple[float, Snapshot]] = [] if seen is None else seen  # type: ignore[assignment]

    def wrapped(snapshot: Snapshot, policy: Policy, now: float) -> Plan:
        calls.append((now, snapshot))
        return planner(snapshot, policy, now)

    wrapped.calls = calls  # type: ignore[attr-defined]
    return wrapped
