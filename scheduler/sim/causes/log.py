"""What each cycle's plan said about the jobs it left pending, recorded by observing the planner.

:meth:`CauseLog.observing` wraps a planner: each cycle whose time falls in the window, it keeps every
``Waiting``'s blocker kind, the jobs the plan evicted, the last reason text of each production inference job,
and — for production inference blocked by ``capacity`` — the :class:`~scheduler.sim.causes.room.Room` of the
cluster as the plan leaves it. It returns the plan untouched: the replay is the same with or without it.

Wrap the planner *outermost* (around the bench's plan repair, :func:`scheduler.sim.bench.mixed_run.guarded`),
so the plan observed is the plan applied; binds the repair dropped are named with :meth:`CauseLog.dropped`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from scheduler.core.model.plan import Plan
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Snapshot
from scheduler.core.model.vocabulary import BlockerKind, JobKind, Priority
from scheduler.sim.causes.kinds import BIND_DROPPED, EVICTED, NO_KIND, UNEXPLAINED
from scheduler.sim.causes.room import Room, after_plan, room_for
from scheduler.sim.planners import Planner


def production_inference(job: Job) -> bool:
    """The jobs the production wait target is about (as ``production_inference_wait_s`` counts them)."""
    return job.priority == Priority.PRODUCTION and job.kind == JobKind.INFERENCE


@dataclass
class CauseLog:
    """Per-cycle record of the plans (module doc); ``window``: only cycles with ``window[0] ≤ t < window[1]``.

    - ``blockers``: cycle time → job → the ``Waiting.blocker`` the plan gave it;
    - ``evicted``: cycle time → the jobs its plan evicted;
    - ``reasons``: production inference job → (cycle time, ``Waiting.reason``) of the last cycle it waited in;
    - ``rooms``: (cycle time, job) → :class:`Room`, for production inference blocked by capacity;
    - ``partitioned``: cycle time → the GPUs, as (node, index), with a MIG layout once the plan is applied;
    - ``dropped_binds``: (cycle time, job) of binds the bench's repair dropped (:meth:`dropped`).
    """

    window: tuple[float, float]
    blockers: dict[float, dict[str, BlockerKind | None]] = field(default_factory=dict)
    evicted: dict[float, frozenset[str]] = field(default_factory=dict)
    reasons: dict[str, tuple[float, str]] = field(default_factory=dict)
    rooms: dict[tuple[float, str], Room] = field(default_factory=dict)
    partitioned: dict[float, frozenset[tuple[str, int]]] = field(default_factory=dict)
    dropped_binds: set[tuple[float, str]] = field(default_factory=set)

    def wants(self, t: float) -> bool:
        return self.window[0] <= t < self.window[1]

    def observing(self, planner: Planner) -> Planner:
        """``planner`` with every plan recorded here (module doc)."""

        def plan(snapshot: Snapshot, policy: Policy, now: float) -> Plan:
            result = planner(snapshot, policy, now)
            if self.wants(now):
                self.record(snapshot, policy, now, result)
            return result

        return plan

    def record(self, snapshot: Snapshot, policy: Policy, now: float, plan: Plan) -> None:
        self.blockers[now] = {waiting.job: waiting.blocker for waiting in plan.waiting}
        if plan.evictions:
            self.evicted[now] = frozenset(evict.job for evict in plan.evictions)
        self.partitioned[now] = _partitioned(snapshot, plan)
        pending = {job.id: job for job in snapshot.pending}
        blocked: list[Job] = []
        for waiting in plan.waiting:
            job = pending.get(waiting.job)
            if job is None or not production_inference(job):
                continue
            self.reasons[job.id] = (now, waiting.reason)
            if waiting.blocker == BlockerKind.CAPACITY:
                blocked.append(job)
        if not blocked:
            return
        applied = after_plan(snapshot, plan, now)
        if applied is None:
            return  # the replay stops on this plan's violation; its cycle will not be measured
        state, ready = applied
        started_at = {running.job.id: running.started_at for running in snapshot.running}
        for job in blocked:
            self.rooms[(now, job.id)] = room_for(job, state, ready, started_at, policy)

    def dropped(self, binds: Iterable[tuple[float, str]]) -> None:
        """Name binds the bench's plan repair dropped (its ``Repairs.dropped_binds``, as (time, job))."""
        self.dropped_binds.update(binds)

    def kind(self, t: float, job_id: str) -> str:
        """The kind of block of ``job_id``, pending after the cycle at ``t`` (:mod:`scheduler.sim.causes.kinds`)."""
        blockers = self.blockers.get(t)
        if blockers is not None and job_id in blockers:
            return blockers[job_id] or NO_KIND
        if job_id in self.evicted.get(t, ()):
            return EVICTED
        if (t, job_id) in self.dropped_binds:
            return BIND_DROPPED
        return UNEXPLAINED


def _partitioned(snapshot: Snapshot, plan: Plan) -> frozenset[tuple[str, int]]:
    """The GPUs with a MIG layout once ``plan``'s MIG reconfigurations are made."""
    layouts = {(node.name, gpu): bool(node.layout(gpu)) for node in snapshot.nodes for gpu in range(node.gpu_count)}
    for change in plan.reconfigurations:
        layouts[(change.node, change.gpu)] = bool(change.new)
    return frozenset(key for key, split in layouts.items() if split)
