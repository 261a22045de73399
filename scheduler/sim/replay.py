"""Deterministic virtual-time replay of a :class:`~scheduler.sim.scenario.Scenario` through a planner.

Time advances from one happening to the next: a scenario event, a job completion, an automatic checkpoint,
a MIG layout becoming ready, a node disappearing after its spot notice, or a cycle tick (every ``cycle_s``
from t = 0). At one instant they apply in this order:

1. the replay's own happenings due now: completions, then checkpoints, then MIG layouts becoming ready,
   then nodes going away (each group in the order it was scheduled);
2. the scenario's events at this t, in file order (an ``observe`` sees the state as it is at that point);
3. the cycle tick, if one falls now: a :class:`Snapshot` goes to the planner and the plan is applied —
   evictions, then reconfigurations, then binds, then moves, then rejections, then the waiting list, then the
   node requests (withdrawals, releases, provisions); then the moves begun a cycle ago or more complete.

On-demand capacity for peaks (with an ``autoscaler``, :mod:`scheduler.sim.autoscaler`): the snapshot's
``provisioning`` offers its pools, lists the requests in flight, the failures still within
``Policy.provision_retry_s`` and the autoscaled nodes that hold no work (idle since the first cycle that saw them
empty, or their arrival). A provision's nodes join as on-demand nodes (``Node.pool`` set) when its drawn delay is
up, or it is known to have failed ``fail_after_s`` on (a stockout); the replay's own happenings at that instant
include it, after nodes going away. A release takes an empty autoscaled node away at once; one holding work, or a
node of no pool, is a violation.

Moves (``Plan.moves``, make-before-break): the new slots are held at once and the job runs on them from then on,
losing no work; its old slots (``Running.moving_from`` in the next snapshot) are released once the new replicas
are ready. The replay takes them ready one cycle after the move (a serving replica with its image cached loads its
model in seconds to a minute; the cycle is the finest grain the planner sees) and, as the loop does, releases the
old slots when it acts on that: after the next cycle's plan, which still sees the job moving. The events are
``moving`` (the new placements and the old, ``from``) and ``moved`` (the old released); the run log splits the run
at the move (outcome ``moved``, then the new placement), the ledger charges both placements while both are held,
and the metrics count ``moves``. A job evicted or ended while moving gives back both placements.

A plan that breaks an invariant (binding a busy slot, evicting a job that is not running, reconfiguring a
busy GPU, binding on a node that takes no new work) stops the replay with :class:`PlanViolation`.

Interruption (``interrupt``): from the notice on, the node takes no new work (``schedulable`` false in the
snapshot) while its running jobs keep working; when the notice ends the node is gone, its jobs are evicted
with reason ``node-lost`` (work since the last checkpoint is lost, no checkpoint is taken on notice) and
requeued at the head of their priority (``Job.resumes``, as the loop marks a job requeued by an infrastructure
loss). ``remove_node`` is the same with no notice. ``finish`` ends a job now as completed, running or
not; ``cancel``, ``finish``, ``checkpoint`` and ``set_priority`` on a job that has already ended change
nothing, and ``checkpoint`` on a pending job has nothing to save. MIG reconfiguration: the snapshot shows the new layout
at once, with ``reconfiguring_until`` set, so nothing new binds on that node until the layout is ready.

The run ends at ``until``; without ``until``, once nothing is left to happen (no events ahead, nothing
running or changing, and the planner idle for a few cycles), at the time of the last change. With ``until``
the replay skips straight to it once nothing is left to happen. Work and metrics: see ``records``.

Speed hook: ``replay(scenario, planner, speed=...)`` sets each run's progress rate from its placement when it
binds (e.g. :func:`scheduler.sim.topology_model.topology_speed`); without it every run does one second of work
per second, so scenarios keep their outcomes. The result also keeps, outside its JSON, every run
(:class:`~scheduler.sim.records.RunLog`) and the capacity present over time, for ``scheduler.sim.metrics``.
"""

from __future__ import annotations

import heapq
from dataclasses import replace
from typing import Any

from scheduler.core.gpus.catalog import LayoutError, validate_layout
from scheduler.core.model.cluster_state import ClusterState
from scheduler.core.model.plan import Move, Plan, Reconfigure
from scheduler.core.model.snapshot import Node, Preemption, Running, Snapshot, Team
from scheduler.core.model.vocabulary import (
    INFRASTRUCTURE_LOSSES,
    EventType,
    EvictionReason,
    JobState,
    NodeState,
    Priority,
)
from scheduler.gcpause import gc_paused
from scheduler.sim import events as ev
from scheduler.sim.autoscaler import WITHDRAWN as REQUEST_WITHDRAWN
from scheduler.sim.autoscaler import Autoscaler, AutoscalerError
from scheduler.sim.avoidable import judge_pending
from scheduler.sim.planners import Planner, microcosm
from scheduler.sim.records import (
    EPSILON_S,
    CycleLog,
    JobRecord,
    Ledger,
    NodeRecord,
    RunLog,
    Slots,
    gpu_equivalents,
    sample,
)
from scheduler.sim.report import Json, ReplayResult, layout_json, num, placements, state_view
from scheduler.sim.scenario import Scenario
from scheduler.sim.topology_model import Speed

DAY_S = 86400.0  # a running job's moves of the last day are in its snapshot (the per-job budget's window)
MAX_CYCLES = 2_000_000  # without until, a planner that never settles must not hang the caller
# Order of the replay's own happenings at one instant; _DUE: a node request arrives or is known to have failed.
_COMPLETE, _CHECKPOINT, _READY, _GONE, _DUE = range(5)
MOVING, MOVED = "moving", "moved"  # the events of a move: begun (new slots held), completed (old ones released)
# The events of on-demand capacity for peaks (scheduler.sim.autoscaler): a node request made, its nodes joined, it
# failed (stockout), it was withdrawn; an autoscaled node given back.
PROVISIONED, NODES_ARRIVED, PROVISION_FAILED, WITHDRAWN, RELEASED = (
    "provisioned",
    "nodes_arrived",
    "provision_failed",
    "withdrawn",
    "released",
)


class PlanViolation(RuntimeError):
    """The planner returned an operation that cannot be applied; the message names the cycle and the op."""


def replay(
    scenario: Scenario,
    planner: Planner | None = None,
    *,
    speed: Speed | None = None,
    cycles: CycleLog | None = None,
    autoscaler: Autoscaler | None = None,
) -> ReplayResult:
    """Replay ``scenario`` with ``planner`` (default: the engine's ``plan_cycle``); same input, same output.

    ``speed``: a run's progress rate from its job, slots and the nodes present (module docstring); it must be
    in (0, 1]. None: every run progresses at 1. ``cycles``: filled with what each cycle's plan left pending
    and free, and every pending job's predicted start (:class:`~scheduler.sim.records.CycleLog`); it only
    observes, the replay is the same with or without it. ``autoscaler``: the pools the cluster can grow
    (:mod:`scheduler.sim.autoscaler`); the snapshot offers them, the plan's provisions, withdrawals and releases
    are carried out through it, and it keeps what it billed. None: nothing can be asked for (an empty
    ``Snapshot.provisioning``), and a plan that asks is a violation.
    """
    return _Replay(scenario, planner or microcosm, speed, cycles, autoscaler).run()


class _Replay:
    def __init__(
        self,
        scenario: Scenario,
        planner: Planner,
        speed: Speed | None = None,
        cycles: CycleLog | None = None,
        autoscaler: Autoscaler | None = None,
    ) -> None:
        self.scenario = scenario
        self.autoscaler = autoscaler
        self.planner = planner
        self.speed = speed
        self.cycles = cycles
        self.runs: list[RunLog] = []
        self.capacity: list[tuple[float, int]] = []  # (t, GPUs present from t on)
        self.policy = scenario.policy
        self.now = 0.0
        self.jobs: dict[str, JobRecord] = {}
        self.running: dict[str, JobRecord] = {}
        self.pending: dict[str, JobRecord] = {}  # kept apart so a cycle never scans finished work
        self.nodes: dict[str, NodeRecord] = {}
        self.teams: dict[str, Team] = {team.name: team for team in scenario.teams}
        self.preemptions: list[Preemption] = []
        self.timers: list[tuple[float, int, int, str, Any]] = []  # (t, kind, seq, job/node, token)
        self.seq = 0
        self.events: list[Json] = []
        self.observations: list[Json] = []
        self.ledger = Ledger()
        self.last_change = 0.0
        # Moves under way: job → (the old slots, when the move began, their GPU-equivalents and price per hour).
        self.moving: dict[str, tuple[Slots, float, float, float]] = {}
        self.moved_at: dict[str, list[float]] = {}  # job → when each of its moves began
        self.segment_start: dict[str, float] = {}  # job → when its current placement began, if since a move
        self.moves = 0
        for node in scenario.nodes:
            self._add_node(node)
        self._log_capacity()

    # -- the loop -------------------------------------------------------------------------------------------

    def run(self) -> ReplayResult:
        events = self.scenario.events
        until = self.scenario.until
        end = until if until is not None else float("inf")
        cycle_s = self.policy.cycle_s
        idle_needed = self.policy.reconfiguration_hysteresis_cycles + 2
        next_event = tick = idle_cycles = 0
        while True:
            t_tick = tick * cycle_s
            t_event = events[next_event].t if next_event < len(events) else float("inf")
            t_timer = self.timers[0][0] if self.timers else float("inf")
            now = min(t_tick, t_event, t_timer)
            if now > end:
                break
            self._advance(now)
            while self.timers and self.timers[0][0] <= now:
                self._fire(heapq.heappop(self.timers))
            while next_event < len(events) and events[next_event].t <= now:
                self._apply_event(events[next_event])
                self.last_change = now
                next_event += 1
            if t_tick <= now:
                tick += 1
                idle_cycles = 0 if self._cycle() else idle_cycles + 1
                settled = next_event == len(events) and not self.running and not self._changing()
                if settled and idle_cycles >= idle_needed:
                    break
                if until is None and tick > MAX_CYCLES:
                    raise PlanViolation(f"no end after {MAX_CYCLES} cycles; give the scenario an until")
        final_t = until if until is not None else self.last_change
        # Without until the loop stopped a few idle cycles after the last change; nothing changed the
        # capacity since, so advancing "back" to the last change integrates exactly up to it.
        self._advance(final_t)
        for record in sorted(self.running.values(), key=lambda r: r.order):
            self._log_run(record, final_t, "running")
        return ReplayResult(
            name=self.scenario.name,
            observations=tuple(self.observations),
            final=self._view(None),
            events=tuple(self.events),
            metrics={**self.ledger.metrics(list(self.running.values()), final_t), "moves": self.moves},
            runs=tuple(self.runs),
            capacity=tuple(self.capacity),
            end=final_t,
        )

    def _log_capacity(self) -> None:
        if self.capacity and self.capacity[-1][0] == self.now:
            self.capacity.pop()
        self.capacity.append((self.now, self.ledger.capacity_gpus))

    def _log_run(
        self, record: JobRecord, end: float, outcome: str, lost_s: float = 0.0, reason: str | None = None
    ) -> None:
        assert record.run_started is not None
        start, rate = self.segment_start.pop(record.job.id, record.run_started), record.rate
        self._release_moving(record)
        self.runs.append(RunLog(record.job, record.slots, start, end, rate, outcome, lost_s=lost_s, reason=reason))

    def _advance(self, now: float) -> None:
        self.ledger.advance(now)
        self.now = now

    def _changing(self) -> bool:
        """A node still leaving, a layout still being applied or a node request in flight: the cluster will change
        by itself."""
        if self.autoscaler is not None and self.autoscaler.in_flight():
            return True
        return any(
            record.present and (record.gone_at is not None or record.reconfiguring) for record in self.nodes.values()
        )

    def _record(self, kind: str, **details: Any) -> None:
        self.events.append({"t": num(self.now), "type": kind, **details})

    def _view(self, label: str | None) -> Json:
        return state_view(self.now, self.jobs.values(), self.nodes, self.teams, label)

    def _timer(self, at: float, kind: int, subject: str, token: Any) -> None:
        self.seq += 1
        heapq.heappush(self.timers, (at, kind, self.seq, subject, token))

    def _fire(self, timer: tuple[float, int, int, str, Any]) -> None:
        _, kind, _, subject, token = timer
        if kind in (_COMPLETE, _CHECKPOINT):
            record = self.jobs[subject]
            if record.state != JobState.RUNNING or record.run_id != token:
                return  # the run this timer belonged to has ended or been checkpointed since
            self.last_change = self.now
            if kind == _COMPLETE:
                self._end_run(record, JobState.COMPLETED)
            else:
                self._checkpoint(record)
        elif kind == _READY:
            node = self.nodes[subject]
            gpu, old, new = token
            if node.present and node.reconfiguring.get(gpu) == self.now:
                del node.reconfiguring[gpu]
                self.last_change = self.now
                self._record(EventType.RECONFIGURED, node=subject, gpu=gpu, old=layout_json(old), new=layout_json(new))
        elif kind == _GONE:
            node = self.nodes[subject]
            if node.present and node.gone_at == self.now:
                self.last_change = self.now
                self._node_gone(node)
        else:
            self._request_due(subject)

    # -- scenario events ------------------------------------------------------------------------------------

    def _apply_event(self, event: ev.TimedEvent) -> None:
        action = event.action
        if isinstance(action, ev.Submit):
            record = JobRecord(
                job=action.job, order=len(self.jobs), reason="submitted; waits for the next scheduling cycle"
            )
            self.jobs[action.job.id] = self.pending[action.job.id] = record
        elif isinstance(action, ev.Observe):
            self.observations.append(self._view(action.label))
        elif isinstance(action, ev.SetQuota):
            self.teams[action.team.name] = action.team
        elif isinstance(action, ev.AddNode):
            self._add_node(action.node)
        elif isinstance(action, ev.RemoveNode):
            self._node_gone(self.nodes[action.node])
        elif isinstance(action, ev.Interrupt):
            self._interrupt(self.nodes[action.node], action.notice_s)
        else:
            self._apply_job_event(action, self.jobs[action.job])

    def _apply_job_event(self, action: ev.Action, record: JobRecord) -> None:
        """cancel / finish / checkpoint / set_priority; on a job that has already ended they change nothing."""
        if record.state not in (JobState.PENDING, JobState.RUNNING):
            return
        if isinstance(action, ev.SetPriority):
            record.job = replace(
                record.job,
                priority=record.job.priority if action.priority is None else action.priority,
                rank=record.job.rank if action.rank is None else action.rank,
            )
        elif isinstance(action, ev.Checkpoint):
            if record.state == JobState.RUNNING:
                self._checkpoint(record)
        elif isinstance(action, ev.Cancel):
            self._end_run(record, JobState.CANCELLED)
        else:  # Finish: the job ends now as done, running or not
            self._end_run(record, JobState.COMPLETED)

    def _add_node(self, node: Node) -> None:
        self.nodes[node.name] = NodeRecord(node=node)
        self.ledger.capacity_gpus += node.gpu_count
        if self.capacity:
            self._log_capacity()

    def _interrupt(self, node: NodeRecord, notice_s: float) -> None:
        if notice_s <= 0:
            self._node_gone(node)
            return
        node.state = NodeState.DRAINING
        node.gone_at = self.now + notice_s
        self._record(EventType.DRAINING, node=node.node.name, reason="interrupt", gone_at=num(node.gone_at))
        self._timer(node.gone_at, _GONE, node.node.name, None)

    def _node_gone(self, node: NodeRecord) -> None:
        name = node.node.name
        for record in [r for r in self.running.values() if any(s.node == name for rep in r.slots for s in rep)]:
            self._evict(record, reason=EvictionReason.NODE_LOST, by=None)
        for job_id, (old, *_) in sorted(self.moving.items()):
            if any(s.node == name for rep in old for s in rep):  # the old replicas went with the node; the new serve
                self._move_complete(job_id, released=False)
        node.state = NodeState.GONE
        node.gone_at = self.now
        node.reconfiguring.clear()
        self.ledger.capacity_gpus -= node.node.gpu_count
        self._log_capacity()
        if self.autoscaler is not None and node.node.pool:
            self.autoscaler.node_lost(name, self.now)

    # -- runs -----------------------------------------------------------------------------------------------

    def _start(self, record: JobRecord, slots: Slots) -> None:
        record.state = JobState.RUNNING
        record.slots = slots
        record.run_started = self.now
        record.checkpoint_at = None
        record.queue_position = record.eta_at = record.reason = None
        record.gpu_equivalents, record.price_per_hour = gpu_equivalents(slots, self.nodes)
        record.rate = 1.0 if self.speed is None else self._rate(record, slots)
        self.running[record.job.id] = self.pending.pop(record.job.id)
        self._record(EventType.BOUND, job=record.job.id, placements=placements(slots))
        self._arm(record)

    def _rate(self, record: JobRecord, slots: Slots) -> float:
        nodes = {name: node.node for name, node in self.nodes.items() if node.present}
        assert self.speed is not None
        rate = self.speed(record.job, slots, nodes)
        if not 0 < rate <= 1:
            raise ValueError(f"the speed hook gave {record.job.id!r} a rate of {rate!r}; it must be in (0, 1]")
        return rate

    def _arm(self, record: JobRecord) -> None:
        record.run_id += 1
        done_at = record.completes_at()
        if done_at is not None:
            self._timer(done_at, _COMPLETE, record.job.id, record.run_id)
        checkpoint_at = record.next_checkpoint_at()
        if checkpoint_at is not None and (done_at is None or checkpoint_at < done_at - EPSILON_S):
            self._timer(checkpoint_at, _CHECKPOINT, record.job.id, record.run_id)

    def _checkpoint(self, record: JobRecord) -> None:
        record.saved_s = record.work_done(self.now)
        record.checkpoint_at = self.now
        self._record(EventType.CHECKPOINTED, job=record.job.id, work_done_s=num(record.saved_s))
        self._arm(record)

    def _end_run(self, record: JobRecord, state: JobState) -> None:
        """Complete, finish or cancel: the job leaves for good; its work so far counts as useful."""
        if record.state == JobState.RUNNING:
            record.saved_s = record.work_done(self.now)
            self.ledger.close_run(record, self.now, lost=False)
            self._log_run(record, self.now, state.value)
            del self.running[record.job.id]
        self.pending.pop(record.job.id, None)
        if state == JobState.COMPLETED:
            if record.job.duration_s is not None and record.saved_s >= record.job.duration_s - EPSILON_S:
                record.saved_s = record.job.duration_s
            self.ledger.completed += 1
        record.state = state
        record.slots = ()
        record.run_started = record.checkpoint_at = None
        record.queue_position = record.eta_at = record.reason = None
        self._record(state.value, job=record.job.id)

    def _evict(self, record: JobRecord, *, reason: str, by: str | None) -> None:
        resumes = reason in INFRASTRUCTURE_LOSSES  # as the loop's snapshot marks it (state.Job.resumes)
        if record.job.resumes != resumes:
            record.job = replace(record.job, resumes=resumes)
        self.ledger.close_run(record, self.now, lost=True)
        self._log_run(record, self.now, "evicted", lost_s=self.now - record.anchor, reason=reason)
        self.pending[record.job.id] = self.running.pop(record.job.id)
        record.state = JobState.PENDING
        record.slots = ()
        record.run_started = record.checkpoint_at = None
        record.preemptions += 1
        cause = f"preempted by {by} ({reason})" if by else f"evicted ({reason})"
        record.reason = f"{cause}; waits for the next scheduling cycle"
        self._record(EventType.PREEMPTED, job=record.job.id, by=by, reason=reason)
        self._record(EventType.REQUEUED, job=record.job.id)
        if by is not None:
            self.preemptions.append(Preemption(victim=record.job.id, by=by, at=self.now))

    # -- the cycle ------------------------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        window = self.policy.ping_pong_window_s
        self.preemptions = [p for p in self.preemptions if self.now - p.at < window]
        nodes = []
        for record in self.nodes.values():
            if not record.present:
                continue
            busy_until = max((t for t in record.reconfiguring.values() if t > self.now), default=None)
            nodes.append(
                replace(record.node, schedulable=record.state == NodeState.READY, reconfiguring_until=busy_until)
            )
        pending = [r.job for r in sorted(self.pending.values(), key=lambda r: r.order)]
        running = [self._running(r) for r in sorted(self.running.values(), key=lambda r: r.order)]
        snapshot = Snapshot(
            nodes=tuple(nodes),
            teams=tuple(self.teams.values()),
            running=tuple(running),
            pending=tuple(pending),
            preemptions=tuple(self.preemptions),
        )
        if self.autoscaler is None:
            return snapshot
        self.autoscaler.note_idle(self.now, self._busy_nodes())
        return replace(snapshot, provisioning=self.autoscaler.provisioning(self.now, self.policy.provision_retry_s))

    def _busy_nodes(self) -> set[str]:
        """Nodes on which a running job or a move under way holds any slot."""
        busy = {slot.node for record in self.running.values() for replica in record.slots for slot in replica}
        busy.update(slot.node for old, *_ in self.moving.values() for replica in old for slot in replica)
        return busy

    def _running(self, record: JobRecord) -> Running:
        """The snapshot's view of a running job: its move under way and its moves of the last day included."""
        running = record.running()
        job_id = record.job.id
        moving = self.moving.get(job_id)
        moved_at = tuple(t for t in self.moved_at.get(job_id, ()) if self.now - t < DAY_S)
        if moving is None and not moved_at:
            return running
        return replace(running, moving_from=moving[0] if moving else (), moved_at=moved_at)

    def _cycle(self) -> bool:
        """Plan and apply one cycle; True when the plan changed anything."""
        snapshot = self.snapshot()
        with gc_paused():  # the cycle's garbage is freed by reference counting (scheduler.gcpause)
            plan = self.planner(snapshot, self.policy, self.now)
        state = ClusterState(snapshot)
        self._apply_plan(plan, state)
        moved = self._complete_moves(state)
        if self.cycles is not None:
            self._sample(state, self.cycles)
        if plan.is_empty and not moved:
            return False
        self.last_change = self.now
        return True

    def _sample(self, state: ClusterState, cycles: CycleLog) -> None:
        """Record what this cycle's plan left free and pending (``CycleLog``); changes nothing."""
        pending = sorted(self.pending.values(), key=lambda r: r.order)
        for record in pending:
            cycles.eta(record.job.id, self.now, record.eta_at)
        if cycles.wants(self.now):
            cycles.samples.append(sample(self.now, self.nodes, state, [r.job for r in pending]))
        if cycles.judges(self.now) and any(r.job.priority == Priority.PRODUCTION for r in pending):
            cycles.verdicts.append((self.now, judge_pending(self._left(), self.policy)))

    def _left(self) -> Snapshot:
        """The cluster as this cycle's plan left it, as a snapshot (the preemption history left out)."""
        nodes = []
        for record in self.nodes.values():
            if record.present:
                busy_until = max((t for t in record.reconfiguring.values() if t > self.now), default=None)
                ready = record.state == NodeState.READY
                nodes.append(replace(record.node, schedulable=ready, reconfiguring_until=busy_until))
        return Snapshot(
            nodes=tuple(nodes),
            teams=tuple(self.teams.values()),
            running=tuple(self._running(r) for r in sorted(self.running.values(), key=lambda r: r.order)),
            pending=tuple(r.job for r in sorted(self.pending.values(), key=lambda r: r.order)),
        )

    def _violation(self, what: str) -> PlanViolation:
        return PlanViolation(f"{self.scenario.source}: cycle at t={self.now:g}: {what}")

    def _apply_plan(self, plan: Plan, state: ClusterState) -> None:
        for evict in plan.evictions:
            record = self.running.get(evict.job)
            if record is None:
                raise self._violation(f"evicts {evict.job!r}, which is not running")
            state.remove(evict.job)
            self._evict(record, reason=evict.reason, by=evict.by)
        for change in plan.reconfigurations:
            self._reconfigure(change, state)
        for bind in plan.binds:
            record = self.pending.get(bind.job)
            if record is None:
                raise self._violation(f"binds {bind.job!r}, which is not pending")
            if len(bind.slots) != record.job.replicas or not all(bind.slots):
                raise self._violation(f"binds {bind.job!r} with {len(bind.slots)} replicas, not {record.job.replicas}")
            for node in sorted({slot.node for replica in bind.slots for slot in replica}):
                self._check_open(node, f"binds {bind.job!r} on {node}")
            try:
                state.place(record.job, bind.slots)
            except (ValueError, KeyError) as exc:
                raise self._violation(f"binds {bind.job!r} on a slot that is not free: {exc}") from exc
            self._start(record, bind.slots)
        for move in plan.moves:
            self._move(move, state)
        for reject in plan.rejections:
            record = self.pending.pop(reject.job, None)
            if record is None:
                raise self._violation(f"rejects {reject.job!r}, which is not pending")
            record.state = JobState.REJECTED
            record.reason = reject.reason
            record.queue_position = record.eta_at = None
            self._record(EventType.REJECTED, job=reject.job, reason=reject.reason)
        for waiting in plan.waiting:
            record = self.pending.get(waiting.job)
            if record is not None:
                record.queue_position, record.reason = waiting.position, waiting.reason
                record.eta_at = self.now + waiting.eta_s if waiting.eta_s is not None else None
        if plan.provisions or plan.withdrawals or plan.releases:
            self._apply_provisioning(plan)

    # -- on-demand capacity for peaks (scheduler.sim.autoscaler) -------------------------------------------

    def _apply_provisioning(self, plan: Plan) -> None:
        """Withdrawals, then releases, then provisions (a withdrawn request or a released node frees room under the
        pool's ceiling for this cycle's asks)."""
        autoscaler = self.autoscaler
        if autoscaler is None:
            raise self._violation("provisions, withdraws or releases on-demand capacity, but no pool can grow")
        try:
            for withdraw in plan.withdrawals:
                request = autoscaler.withdraw(withdraw.request, self.now)
                self._record(WITHDRAWN, job=request.job, request=request.id, pool=request.pool, reason=withdraw.reason)
            for release in plan.releases:
                node = self.nodes.get(release.node)
                if node is None or not node.present or node.node.pool != release.pool:
                    raise AutoscalerError(f"releases {release.node!r}, which is not a node of pool {release.pool!r}")
                if release.node in self._busy_nodes():
                    raise AutoscalerError(f"releases {release.node!r}, which holds work")
                autoscaler.release(release.node, self.now)
                self._record(RELEASED, node=release.node, pool=release.pool, idle_since=num(release.idle_since))
                self._node_gone(node)
            for ask in plan.provisions:
                if ask.job not in self.pending:
                    raise AutoscalerError(f"provisions for {ask.job!r}, which is not pending")
                request = autoscaler.provision(ask, self.now)
                self._record(
                    PROVISIONED,
                    job=ask.job,
                    request=request.id,
                    pool=ask.pool,
                    nodes=ask.nodes,
                    arrives_at=num(ask.arrives_at),
                )
                self._timer(request.due_at, _DUE, request.id, None)
        except AutoscalerError as exc:
            raise self._violation(str(exc)) from exc

    def _request_due(self, request_id: str) -> None:
        """A node request's time has come: its nodes join the cluster, or it is known to have failed."""
        assert self.autoscaler is not None
        request = self.autoscaler.requests[request_id]
        if request.outcome == REQUEST_WITHDRAWN or request.due_at != self.now:
            return
        self.last_change = self.now
        for node in self.autoscaler.due(request_id, self.now):
            self._add_node(node)
        if request.node_names:
            self._record(NODES_ARRIVED, job=request.job, request=request_id, nodes=list(request.node_names))
        else:
            self._record(PROVISION_FAILED, job=request.job, request=request_id, pool=request.pool)

    def _move(self, move: Move, state: ClusterState) -> None:
        """Begin ``move`` make-before-break (module doc): the new slots are held now, the old ones a cycle more."""
        record = self.running.get(move.job)
        if record is None:
            raise self._violation(f"moves {move.job!r}, which is not running")
        if move.job in self.moving:
            raise self._violation(f"moves {move.job!r}, whose previous move is still under way")
        if move.released != record.slots:
            raise self._violation(f"moves {move.job!r} from {move.released}, which is not where it runs")
        if len(move.slots) != record.job.replicas or not all(move.slots):
            raise self._violation(f"moves {move.job!r} with {len(move.slots)} replicas, not {record.job.replicas}")
        for node in sorted({slot.node for replica in move.slots for slot in replica}):
            self._check_open(node, f"moves {move.job!r} to {node}")
        try:
            state.move(move.job, move.slots)
        except (ValueError, KeyError) as exc:
            raise self._violation(f"moves {move.job!r} to a slot that is not free: {exc}") from exc
        assert record.run_started is not None
        start = self.segment_start.get(move.job, record.run_started)
        self.runs.append(RunLog(record.job, record.slots, start, self.now, record.rate, "moved"))
        # The ledger charges a run at its final size from its start: charge the old size up to now instead, and
        # the old slots for as long as they stay held (when the move completes).
        old_gpus, old_price = record.gpu_equivalents, record.price_per_hour
        record.gpu_equivalents, record.price_per_hour = gpu_equivalents(move.slots, self.nodes)
        ran = self.now - record.run_started
        self.ledger.allocated_gpu_s += (old_gpus - record.gpu_equivalents) * ran
        self.ledger.cost += (old_price - record.price_per_hour) * ran / 3600.0
        self.moving[move.job] = (record.slots, self.now, old_gpus, old_price)
        self.moved_at.setdefault(move.job, []).append(self.now)
        self.segment_start[move.job] = self.now
        record.slots = move.slots
        self.moves += 1
        self._record(MOVING, job=move.job, placements=placements(move.slots), **{"from": placements(move.released)})

    def _complete_moves(self, state: ClusterState) -> bool:
        """Release the old slots of every move begun a cycle ago or more (module doc); True when one completed."""
        due = [job for job, (_, began, _, _) in self.moving.items() if self.now - began >= self.policy.cycle_s - 1e-9]
        for job_id in sorted(due):
            self._move_complete(job_id, released=True)
            record = self.jobs[job_id]
            state.remove(job_id)  # the state now holds the job on its new placement alone
            state.place(record.job, record.slots)
        return bool(due)

    def _move_complete(self, job_id: str, *, released: bool) -> None:
        """End ``job_id``'s move under way: its old slots are given back (:meth:`_release_moving`) and ``moved``
        is recorded, naming the slots ``released`` when they return to the cluster (not when they went with their
        node). The one way a move completes, whichever way its old placement goes."""
        old = self.moving[job_id][0]
        self._release_moving(self.jobs[job_id])
        self._record(MOVED, job=job_id, **({"released": placements(old)} if released else {}))

    def _release_moving(self, record: JobRecord) -> None:
        """Give back the old slots of ``record``'s move under way, if any, charging them for the time held."""
        moving = self.moving.pop(record.job.id, None)
        if moving is not None:
            _, began, gpus, price = moving
            self.ledger.allocated_gpu_s += gpus * (self.now - began)
            self.ledger.cost += price * (self.now - began) / 3600.0

    def _check_open(self, name: str, what: str) -> NodeRecord:
        node = self.nodes.get(name)
        if node is None or not node.present:
            raise self._violation(f"{what}: no such node in the cluster")
        if node.state != NodeState.READY:
            raise self._violation(f"{what}: the node takes no new work ({node.state})")
        if any(t > self.now for t in node.reconfiguring.values()):
            raise self._violation(f"{what}: the node is being reconfigured")
        return node

    def _reconfigure(self, change: Reconfigure, state: ClusterState) -> None:
        what = f"reconfigures {change.node}/{change.gpu}"
        node = self.nodes.get(change.node)
        if node is None or not node.present or not 0 <= change.gpu < node.node.gpu_count:
            raise self._violation(f"{what}: no such GPU")
        current = node.node.layout(change.gpu)
        if tuple(change.old) != tuple(current):
            raise self._violation(f"{what}: old layout {change.old} is not the current {current}")
        try:
            validate_layout(node.node.gpu_model, change.new)
            state.set_layout(change.node, change.gpu, change.new)
        except (LayoutError, ValueError) as exc:
            raise self._violation(f"{what}: {exc}") from exc
        layouts = list(node.node.mig) + [()] * (node.node.gpu_count - len(node.node.mig))
        layouts[change.gpu] = tuple(change.new)
        node.node = replace(node.node, mig=tuple(layouts))
        if change.ready_at > self.now:
            node.reconfiguring[change.gpu] = change.ready_at
            self._record(
                EventType.DRAINING,
                node=change.node,
                gpu=change.gpu,
                reason="reconfigure",
                ready_at=num(change.ready_at),
            )
            self._timer(change.ready_at, _READY, change.node, (change.gpu, current, tuple(change.new)))
        else:
            self._record(
                EventType.RECONFIGURED,
                node=change.node,
                gpu=change.gpu,
                old=layout_json(current),
                new=layout_json(change.new),
            )
