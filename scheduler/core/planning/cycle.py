"""One scheduling cycle: ``plan_cycle(snapshot, policy, now) -> Plan``, pure and deterministic.

The rules it applies live in :mod:`scheduler.core.rules` (one module per rule); the caches and shortcuts that
make it fast live in :mod:`scheduler.core.speedups`, behind one switch (``speedups``).

Steps:

1. Build an :class:`IndexedClusterState` from the snapshot, a :class:`FairShare` on it, and the cycle's working
   state around them (:class:`~scheduler.core.planning.run.Run`).
2. Reject what can never run, with a reason (:mod:`screening`: outside the bounds every edge enforces, a
   request no GPU model of the cluster can serve, a gang larger than the whole cluster could hold).
3. Take the rest in fair order (:meth:`FairShare.iter_pending`, re-keyed live as jobs bind; production
   first, so production inference never waits behind anything). Each job's turn runs the named steps of its
   order until one binds it or gives it a blocker (:mod:`scheduler.core.planning.steps`, where each step's contract and
   the reasons for the order are written): :data:`~scheduler.core.planning.steps.PRODUCTION_STEPS` for production work,
   :data:`~scheduler.core.planning.steps.OTHER_STEPS` for the rest —

   not_ready → choose → backfill → idle_whole_gpu → (production: fallback → preempt_preemptible →
   preempt_whole_gpu → oversize → reconfigure_idle) → preempt → (production: reconfigure_by_drain → hold) →
   reserve → wait.

   Free capacity is taken at a placement the quota admits (:func:`choose.choose`); a preemption
   (:func:`preemption.find_victims`, whose rules decide who may be evicted) evicts and binds in one Statement;
   production MIG demand that finds no instance gets its reconfiguration right away, before lower work can
   take the GPUs it needs. A turn that evicted gives the production jobs of the victims' teams blocked earlier
   in the cycle another turn at once.
4. After every turn, plan MIG reconfigurations for the MIG (and whole-GPU) demand left unplaced by capacity whose
   quota would admit it (:func:`rules.reconfiguration.plan_reconfiguration`); jobs an instance under way will
   serve wait for it instead. A changed node takes nothing new for the rest of the cycle, and a node that took a
   bind this cycle is not changed in it (a node is bound to or reconfigured in one plan, never both:
   ``docs/gpu-facts.md``, MIG Manager reconfiguration flow); outside production at most
   :func:`rules.reconfiguration.nodes_per_cycle` nodes change per cycle (one per
   :data:`rules.reconfiguration.NODES_PER_CHANGE` ready MIG-capable nodes, at least one and at most
   :data:`rules.reconfiguration.MAX_NODES_PER_CYCLE`), and each instance a change offers is promised to one
   waiting job.
   Running production that holds more than twice its right size (it started oversized: the step ``oversize``) and
   has no free right-sized slice counts as demand too — with the policy's ``consolidation_reconfigures``, any that
   holds more than its right size —, after the pending demand, on idle MIG GPUs only
   (:mod:`scheduler.core.decisions.consolidation`, rule 5).
4a. Then move running production on larger capacity than its right size to a free right-sized slice,
   make-before-break, within the consolidation's bounds (:func:`consolidation.plan_moves`): after every pending
   turn and every reconfiguration, so a move takes only what no pending job could take this cycle. The way back is
   the exception: production on more than twice its right size moves before step 3's turns, its moves counted
   first against the bounds, and the node it moves to takes no reconfiguration this cycle (consolidation, rule 4).
5. Explain every job still pending (:mod:`explain`): 1-based global and team positions in the order the
   cycle took them, a reason and an ETA.
6. Where the snapshot offers autoscaled pools, ask on-demand nodes for jobs that still wait, give up requests no
   job waits for, and give back autoscaled nodes that stood empty (:mod:`scheduler.core.decisions.provisioning`).

Isolation (:mod:`isolation`): a pending job whose evaluation raises in any step is rejected ("internal error
evaluating this job: …", logged with its traceback) and the cycle is planned again without it, so the other
jobs' plans are what they would have been had it never been submitted.

Determinism: nodes, teams and pending jobs are sorted by name/id before anything depends on their order,
no decision iterates a hash-ordered set of strings, and time is the ``now`` argument — the same snapshot,
in any tuple order, gives the same Plan. Duplicate pending ids keep the first (by id, submit time, rank,
then the whole value);
a pending id that is already running is ignored (it was bound by an earlier cycle whose plan was applied).

Speed: a failed placement is remembered per job shape until capacity is freed (see
:mod:`placement.find`), and so is a failed preemption, per (shape, team, priority, preemptible, the kind of
search: of preemptible work only, on MIG-off GPUs only) — except for a job that was itself recently evicted,
whose ping-pong protection depends on its identity. Binding only takes capacity and adds usage, and the
eviction candidates are snapshot-running jobs (whose borrowed status depends only on which of them are still
placed), so a preemption that failed keeps failing until something is freed (an eviction, a committed
Statement). A reconfiguration frees nothing placement is offered — its node leaves the capacity index before
its new layout is set — and closing a node only removes eviction candidates, so it forgets neither. A search
itself runs its trial placements through :class:`~scheduler.core.speedups.trial.TrialPlacement` (on MIG-off GPUs
only, :class:`~scheduler.core.speedups.wholetrial.WholeGpuTrial`), whose exact shortcuts skip trials whose answer
is known, and reads candidates from one :class:`~scheduler.core.speedups.victims.Victims` per cycle (told of each
node a reconfiguration closes, it forgets only what that node's readiness decided; with the speed-ups off, from
the plain rule :func:`~scheduler.core.rules.eviction.team_candidates`). A turn past the search bound whose steps
would end as an earlier turn of its key did, at a state unchanged in what they read, is not taken again: the job
gets that turn's blocker (:mod:`scheduler.core.speedups.repeat`). In a full cluster, where few reservations are
made and every whole-GPU job asks take-back and the reservation search, take-back's candidates are kept per key
(:mod:`scheduler.core.speedups.takeback`) and the search is shared by the jobs of one key
(:mod:`scheduler.core.speedups.sharedsearch`). Every such cache and shortcut goes through
the cycle's memo (:mod:`scheduler.core.speedups`); ``plan_cycle(..., speedups=False)`` switches all of them off.

A caller that plans many cycles in a process holding a large heap may pause the cyclic garbage collector
around each one (the loop and the simulator do, :mod:`scheduler.gcpause`): a cycle allocates hundreds of thousands
of short-lived tuples that reference counting frees, and each collector pass walks the whole heap. The core
leaves the process-wide collector alone, and leaves it no work: the cycle's working objects refer to each other
(the state and its capacity index, the run and the speed-ups holding its bound methods), and
:meth:`~scheduler.core.planning.run.Run.close` breaks those cycles as the plan is returned.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable
from dataclasses import replace

from scheduler.core.decisions import consolidation, provisioning
from scheduler.core.decisions.reservation import expected_runtime
from scheduler.core.decisions.screening import NodeCensus, rejection_reason, screen
from scheduler.core.model.demand import Demand
from scheduler.core.model.explain import (
    Blocker,
    EtaEstimator,
    ahead_text,
    demand_shape,
    demand_units,
    need_text,
    reason_head,
    standing_text,
)
from scheduler.core.model.isolation import Evaluating, JobFailed
from scheduler.core.model.plan import Plan, Reject, Waiting
from scheduler.core.model.policy import Policy
from scheduler.core.model.shape import placement_shape
from scheduler.core.model.snapshot import Job, Snapshot
from scheduler.core.model.vocabulary import BlockerKind, Priority
from scheduler.core.placement.mix import observe
from scheduler.core.placement.options import Option, options_for
from scheduler.core.planning.run import Run, live_index
from scheduler.core.planning.steps import Turn, steps_for, take_turn
from scheduler.core.rules.fairshare import job_class
from scheduler.core.rules.limits import Admission
from scheduler.core.sizing.rightsize import resolve
from scheduler.core.speedups.focus import Focus
from scheduler.core.speedups.memo import Memo, current_memo
from scheduler.core.speedups.switch import eta_estimator, fair_share, indexed_state, turn_repeats

# rejection_reason: the question a submit asks (screening), over a NodeCensus when it asks for many jobs.
__all__ = ["NodeCensus", "plan_cycle", "plan_for", "rejection_reason"]

log = logging.getLogger(__name__)


def plan_cycle(snapshot: Snapshot, policy: Policy, now: float, *, speedups: bool = True) -> Plan:
    """The plan of one cycle for ``snapshot`` at ``now`` (module doc). ``speedups=False`` plans by the plain
    rules, every cache and shortcut off (:mod:`scheduler.core.speedups`): the same plan, found slower."""
    with Memo(speedups).current():
        return _plan_isolated(snapshot, policy, now)


def plan_for(snapshot: Snapshot, policy: Policy, now: float, job_id: str, *, speedups: bool = True) -> Plan:
    """:func:`plan_cycle` when only pending job ``job_id``'s answer is wanted (its bind, rejection or waiting):
    with the speed-ups on, the plan is right about that job only and skips what cannot change its answer
    (:mod:`scheduler.core.speedups.focus`); off, it is the whole plan."""
    with Memo(speedups).current():
        return _plan_isolated(snapshot, policy, now, job_id)


def _plan_isolated(snapshot: Snapshot, policy: Policy, now: float, focus: str | None = None) -> Plan:
    """:func:`_plan`, again without each pending job whose evaluation raised (:mod:`isolation`).

    A job is planned around alone; when a second job of the same placement shape fails too, every pending
    job of that shape is (they are evaluated alike), so a thousand copies of one bad request cost two extra
    passes, not a thousand."""
    failed: dict[str, str] = {}
    failed_shapes: set[Hashable] = set()
    by_id = {job.id: job for job in snapshot.pending}
    while True:
        try:
            plan = _plan(snapshot, policy, now, focus)
        except JobFailed as failure:
            job = by_id.get(failure.job_id)
            if job is None or failure.job_id in failed:
                raise failure.cause from failure  # not a pending job's own: an engine error, not isolable
            log.error(
                "job %s: %s; rejected, the rest of the cycle is planned without it",
                failure.job_id,
                failure.reason,
                exc_info=failure.cause,
            )
            shape = placement_shape(job)
            alike = [j.id for j in snapshot.pending if placement_shape(j) == shape] if shape in failed_shapes else []
            failed_shapes.add(shape)
            for job_id in (failure.job_id, *alike):
                failed.setdefault(job_id, failure.reason)
            snapshot = replace(snapshot, pending=tuple(j for j in snapshot.pending if j.id not in failed))
            continue
        if not failed:
            return plan
        isolated = tuple(Reject(job=job_id, reason=reason) for job_id, reason in sorted(failed.items()))
        return replace(plan, rejections=tuple(sorted(plan.rejections + isolated, key=lambda r: r.job)))


def _plan(snapshot: Snapshot, policy: Policy, now: float, focus_id: str | None = None) -> Plan:
    memo = current_memo()  # the one switch: plain rules, or the rules wrapped by the speed-ups
    # The provisioning rule reads every waiting job before the focus job (budgets, capacity coming), so with it
    # active every one of them is explained.
    focus = Focus(focus_id, memo, every_waiting=provisioning.active(snapshot))
    state = indexed_state(snapshot, now, memo)
    fairness = fair_share(snapshot.teams, state, policy, memo)
    pending, rejections = screen(snapshot, state, policy)
    index = live_index(state)
    index.mix = observe(state, index, pending, policy)
    run = Run(state, fairness, policy, now, snapshot, pending)
    try:
        return _planned(run, snapshot, pending, rejections, focus)
    finally:
        run.close()  # its reference cycles broken: reference counting frees the cycle's working state (Run.close)


def _planned(run: Run, snapshot: Snapshot, pending: list[Job], rejections: list[Reject], focus: Focus) -> Plan:
    """Steps 3-6 of the module doc on ``run``, the cycle's working state after screening ``pending``."""
    state, fairness, index, policy, now = run.state, run.fairness, run.index, run.policy, run.now
    # The way back moves before the pending turns (consolidation, rule 4): the slice made for it is its own.
    early = consolidation.plan_moves(
        state, consolidation.way_back(state, consolidation.candidates(state, policy, now), policy), policy
    )
    for move in early:
        run.reconfigurations.bound(move.slots)  # its node takes no reconfiguration this cycle, as a bind's
        fairness.changed(state.jobs[move.job].team)  # the team holds both placements until the move completes
    turns = _Turns(run)
    for job in fairness.iter_pending(pending, now):
        turns.take(job)
        focus.took(job.id)
        if focus.bound(run.blockers):  # nothing later undoes its bind (speedups.focus)
            evictions = tuple(run.evictions + run.reconfigurations.evictions)
            return Plan(evictions=evictions, binds=tuple(run.binds), rejections=tuple(rejections), moves=tuple(early))
    # Consolidation after every pending turn and after the reconfigurations (module doc, step 4a).
    movable = consolidation.candidates(state, policy, now)
    oversized = consolidation.demand(state, index, consolidation.asking(state, movable, policy), policy)
    reconfigurations = run.reconfigurations.after_placement(run.order, oversized)
    moves = early + consolidation.plan_moves(state, movable, policy, len(early))
    # On-demand capacity for peaks last: it asks nodes only for what still waits (step 6).
    asks = provisioning.decide(snapshot, policy, now, _Explanation(run).waiting(focus), run.binds)
    return Plan(
        evictions=tuple(run.evictions + run.reconfigurations.evictions),
        reconfigurations=tuple(reconfigurations),
        binds=tuple(run.binds),
        rejections=tuple(rejections),
        waiting=asks.waiting,
        moves=tuple(moves),
        provisions=asks.provisions,
        withdrawals=asks.withdrawals,
        releases=asks.releases,
    )


class _Turns:
    """Each job's turn in fair order (module doc, step 3), and the second turn evictions give production."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self._blocked_production: dict[str, Job] = {}  # production jobs still blocked, in the order taken
        self._retrying = False
        self._pending_teams: set[str] = set()
        # A turn a later job of the same key would end alike at an unchanged state (speedups.repeat).
        self._repeats = turn_repeats(
            run.state, run.reservations, run.policy, run.past_bound, run.blockers, current_memo()
        )

    def take(self, job: Job) -> None:
        """Take ``job``'s turn."""
        self.run.enter(job)
        self._try(job)

    def _try(self, job: Job) -> None:
        with Evaluating(job.id):
            self._turn(job)

    def _turn(self, job: Job) -> None:
        """The steps of ``job``'s order (:mod:`scheduler.core.planning.steps`), on a blocker cleared of its last
        turn's."""
        run = self.run
        evicted, drained = len(run.evictions), len(run.reconfigurations.evictions)
        run.blockers.pop(job.id, None)
        # Its steps, unless they would end as an earlier job's did at an unchanged state (speedups.repeat): a
        # repeated turn asks nothing, not even the job's options.
        self._repeats.take(
            job, lambda: take_turn(run, Turn(job, options_for(run.index, job, run.policy)), steps_for(job))
        )
        blocker = run.blockers.get(job.id)  # None: bound
        if job.priority == Priority.PRODUCTION and blocker is not None and blocker.kind != BlockerKind.RECONFIGURING:
            self._blocked_production[job.id] = job
        evictions = run.evictions[evicted:] + run.reconfigurations.evictions[drained:]  # this turn's
        if evictions:
            self._retry_production({run.state.jobs[e.job].team for e in evictions})

    def _retry_production(self, teams: set[str]) -> None:
        """Evictions lowered the usage of ``teams``: their production jobs blocked earlier in the cycle (by
        quota, say) get another turn at once — before lower work can take what they need."""
        if self._retrying:
            self._pending_teams |= teams
            return
        self._retrying = True
        self._pending_teams = set(teams)
        try:
            while self._pending_teams:
                teams, self._pending_teams = self._pending_teams, set()
                for job in [j for j in self._blocked_production.values() if j.team in teams]:
                    del self._blocked_production[job.id]
                    self._try(job)
        finally:
            self._retrying = False


class _Explanation:
    """The position, reason and ETA of every job the cycle left waiting (module doc, step 5)."""

    def __init__(self, run: Run) -> None:
        self.run = run
        # Nothing changes while the cycle explains, and the quota reads of a job only its team, whether it is
        # preemptible or production, and its options' units: its refusal now is remembered per that key.
        self._refusals: dict[Hashable, Admission | None] = current_memo().table()
        # A job whose explanation asks the ETA replay nothing — its blocker needs no time from it, it asks no
        # capacity, or the replay has given every time it gives on its GPU models (monotone: it never gives one
        # again) — is explained from what the cycle's end state, its blocker and its key (team, preemptible and
        # placement shape: its need, its quota refusal, its team's standing) decide, so an earlier such job of
        # the same key and blocker was explained alike but for its position: its reason's head, ETA and blocker
        # are remembered (docs/benchmarks/scale.md, 2026-12-05 late evening).
        self._alike: dict[Hashable, tuple[str, float | None, BlockerKind]] = current_memo().table()

    def waiting(self, focus: Focus) -> list[Waiting]:
        """Every job that took a turn and was not bound, in the order the cycle took them (up to the focus job's
        explanation, when the cycle has one: :mod:`scheduler.core.speedups.focus`)."""
        run = self.run
        bound = {b.job for b in run.binds}
        holders = {reservation.holder.id for reservation in run.reservations.made}
        estimator = eta_estimator(
            run.state,
            run.now,
            self._ready_at(),
            run.expected_end,
            holders.__contains__,
            run.policy.mig_reconfigure_s,
            run.policy.cycle_s,
            current_memo(),
        )
        team_positions: dict[str, int] = {}
        waiting: list[Waiting] = []
        # Nothing changes while the cycle explains: what depends only on a job's shape, or on its team and
        # class, is worked out once.
        needs: dict[Hashable, tuple[Demand | None, tuple[str, ...], int, str, str]] = {}
        standings: dict[tuple[str, str], str] = {}
        replay = self._replay_of(focus, bound, needs)  # the GPU models the focus job's ETA replays on, if any
        position = 0
        for job in run.order:
            if job.id in bound:
                continue
            position += 1
            if focus.passes(job.id, replay, estimator):  # nothing this job's explanation does reaches the focus's
                team_positions[job.team] = team_positions.get(job.team, 0) + 1
                continue
            with Evaluating(job.id):
                waiting.append(self._explain(job, position, team_positions, needs, standings, estimator))
            if focus.last(job.id):
                break
        return waiting

    def _replay_of(
        self,
        focus: Focus,
        bound: set[str],
        needs: dict[Hashable, tuple[Demand | None, tuple[str, ...], int, str, str]],
    ) -> tuple[str, ...] | None:
        """The GPU models on which the focus job's explanation asks the ETA replay (:meth:`_explain`: a job
        blocked by capacity or holding a reservation, with units), None when it asks none or the cycle has no
        focus job waiting."""
        run = self.run
        if focus.job is None or focus.job in bound or focus.job not in run.blockers:
            return None
        if run.blockers[focus.job].kind not in (BlockerKind.CAPACITY, BlockerKind.RESERVED):
            return None
        job = next(j for j in run.order if j.id == focus.job)
        shape = placement_shape(job)
        demand, model, models = self._demand(job)
        units = demand_units(demand, model) * job.replicas if demand is not None else 0
        kind = demand_shape(demand) if demand is not None else ""
        needs[shape] = (demand, models, units, need_text(job, demand, models), kind)
        return models if units else None

    def _explain(
        self,
        job: Job,
        position: int,
        team_positions: dict[str, int],
        needs: dict[Hashable, tuple[Demand | None, tuple[str, ...], int, str, str]],
        standings: dict[tuple[str, str], str],
        estimator: EtaEstimator,
    ) -> Waiting:
        """The position, reason and ETA of pending ``job``, ``position``-th in the cycle's order."""
        run = self.run
        shape = placement_shape(job)
        asked = run.blockers[job.id]
        team_positions[job.team] = team_positions.get(job.team, 0) + 1
        alike = (asked, job.team, job.preemptible, shape)
        shared = self._alike.get(alike)
        if shared is not None:  # explained as an earlier job of its key and blocker was (__init__)
            head, known_eta, waits = shared
            ahead = ahead_text(position - 1)
            return Waiting(job.id, position, team_positions[job.team], f"{head}; {ahead}", known_eta, waits)
        if shape not in needs:
            demand, model, models = self._demand(job)
            units = demand_units(demand, model) * job.replicas if demand is not None else 0
            kind = demand_shape(demand) if demand is not None else ""
            needs[shape] = (demand, models, units, need_text(job, demand, models), kind)
        demand, models, units, need, kind = needs[shape]
        blocker = asked
        # Does its ETA ask the replay (a claim, a time of its own)? Asked before the replay answers it.
        replays = bool(units) and blocker.kind in (BlockerKind.CAPACITY, BlockerKind.RESERVED)
        replays = replays and not estimator.exhausted(models)
        eta: float | None = None
        if blocker.kind in (BlockerKind.CAPACITY, BlockerKind.RESERVED) and units:
            # A reserved job still takes its turn in the replay, so the jobs behind it count its GPUs as taken.
            runtime_s = expected_runtime(job, run.fairness.teams.get(job.team), run.policy)
            start_at = blocker.ready_at if blocker.kind == BlockerKind.RESERVED else None
            refusal = None
            blocked = blocker.kind == BlockerKind.CAPACITY  # this cycle found no room for it now
            if blocked:  # a reservation's job was put to its quota when it was reserved
                refusal = self._refused_at_capacity(job, models, kind, units, runtime_s, estimator)
            if refusal is not None:
                blocker = Blocker(BlockerKind.QUOTA, refusal.reason)
            else:
                eta = estimator.capacity_eta(models, kind, units, runtime_s, start_at, later=blocked)
        # A job blocked by its quota gets no time: the reason says what would unblock it.
        if blocker.kind in (BlockerKind.RECONFIGURING, BlockerKind.HELD) and blocker.ready_at is not None:
            eta = max(0.0, blocker.ready_at - run.now)
        standing_key = (job.team, job_class(job))
        if standing_key not in standings:
            guarantee = run.fairness.guarantee(job.team).overall or 0
            held = sum(run.state.usage.get(job.team, {}).values())
            under = run.fairness.under_guarantee(*standing_key)
            standings[standing_key] = standing_text(guarantee, held, under)
        head = reason_head(need, blocker, standings[standing_key], run.now)
        if not replays:
            self._alike[alike] = (head, eta, blocker.kind)
        return Waiting(
            job.id, position, team_positions[job.team], f"{head}; {ahead_text(position - 1)}", eta, blocker.kind
        )

    def _refused_at_capacity(
        self, job: Job, models: tuple[str, ...], kind: str, units: int, runtime_s: float, estimator: EtaEstimator
    ) -> Admission | None:
        """The quota's refusal of capacity-blocked ``job`` when its quota (guarantee or burst limit) refuses it on
        every option now and still would when the replay finds it room, once its team's work expected to end by
        then has ended (:mod:`explain`, ETA); None when the start the replay gives it can come true. A job whose
        quota admits it now — most — costs one cached admission per option."""
        run = self.run
        options = options_for(run.index, job, run.policy)
        refusal = self._quota_refusal(job, options)
        if refusal is None:
            return None
        eta = estimator.capacity_eta(models, kind, units, runtime_s, claim=False, later=True)
        if eta is not None and run.admits_at(job, options, run.now + eta):
            return None
        return refusal

    def _quota_refusal(self, job: Job, options: tuple[Option, ...]) -> Admission | None:
        """:meth:`Run.quota_refusal` of ``job`` on ``options`` (its options now), remembered per what it reads."""
        key = (job.team, job.preemptible, job.priority == Priority.PRODUCTION, placement_shape(job))
        if key in self._refusals:
            return self._refusals[key]
        refusal = self._refusals[key] = self.run.quota_refusal(job, options)
        return refusal

    def _demand(self, job: Job) -> tuple[Demand | None, str, tuple[str, ...]]:
        """The job's preferred demand, its GPU model, and every model the job may use now; when no ready node
        may take it, the demand on the first model of the cluster that could serve it (for the reason)."""
        run = self.run
        options = options_for(run.index, job, run.policy)
        if options:
            return options[0].demand, options[0].model, tuple(sorted({o.model for o in options}))
        for model in sorted({n.gpu_model for n in run.state.nodes.values()}):
            demand = resolve(job, model, run.policy)
            if demand is not None:
                return demand, model, (model,)
        return None, "", ()  # pragma: no cover - such a job was rejected

    def _ready_at(self) -> dict[str, float]:
        """When each node takes new work: now when it is ready and this cycle changes none of its GPUs, else when
        its reconfiguration (under way, or planned by this cycle) is done; a node that is cordoned, draining or
        gone takes none and is left out."""
        run = self.run
        ready: dict[str, float] = dict.fromkeys(run.index.group_of, run.now)
        for name, node in run.state.nodes.items():
            if node.schedulable and node.reconfiguring_until is not None and node.reconfiguring_until > run.now:
                ready[name] = node.reconfiguring_until
        for change in run.reconfigurations.changes:
            ready[change.node] = max(ready.get(change.node, run.now), change.ready_at)
        return ready
