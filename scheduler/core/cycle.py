"""One scheduling cycle: ``plan_cycle(snapshot, policy, now) -> Plan``, pure and deterministic.

The rules it applies live in :mod:`scheduler.core.rules` (one module per rule); the caches and shortcuts that
make it fast live in :mod:`scheduler.core.speedups`, behind one switch (``speedups``).

Steps:

1. Build an :class:`IndexedClusterState` from the snapshot and a :class:`FairShare` on it.
2. Reject what can never run, with a reason (:mod:`screening`: outside the bounds every edge enforces, a
   request no GPU model of the cluster can serve, a gang larger than the whole cluster could hold).
3. Take the rest in fair order (:meth:`FairShare.iter_pending`, re-keyed live as jobs bind; production
   first, so production inference never waits behind anything). For each job: :func:`find_slots` on free
   capacity; if found, :meth:`FairShare.admit` with the units those slots hold; bind when admitted — and when
   the quota refuses that placement, a one-replica job takes the best one whose holding it admits instead
   (:func:`choose.choose`).
   Otherwise try :func:`preemption.find_victims` (its rules decide who may be evicted) with a ``try_place``
   that only accepts admissible placements; on success the victims are evicted and the job bound, both in
   one Statement. Production MIG demand that still finds no instance gets its reconfiguration right away —
   before lower work can take the GPUs it needs: it waits for an instance a change under way will offer,
   else a change on an idle GPU, else a GPU drained of lower work (:mod:`placement.drain`).
4. Otherwise plan MIG reconfigurations for the MIG (and whole-GPU) demand left unplaced by capacity whose quota would
   admit it (:func:`rules.reconfiguration.plan_reconfiguration`); jobs an instance under way will serve wait for it
   instead. A changed node takes nothing new for the rest of the cycle, and a node that took a bind this cycle is not
   changed in it (a node is bound to or reconfigured in one plan, never both: ``docs/gpu-facts.md``, MIG Manager
   reconfiguration flow); outside production at most :func:`rules.reconfiguration.nodes_per_cycle` nodes change per
   cycle (one per :data:`rules.reconfiguration.NODES_PER_CHANGE` ready MIG-capable nodes, at least one and at most
   :data:`rules.reconfiguration.MAX_NODES_PER_CYCLE`), and each instance a change offers is promised to one waiting job.
5. Explain every job still pending (:mod:`explain`): 1-based global and team positions in the order the
   cycle took them, a reason and an ETA.

Isolation (:mod:`isolation`): a pending job whose evaluation raises in any step is rejected ("internal error
evaluating this job: …", logged with its traceback) and the cycle is planned again without it, so the other
jobs' plans are what they would have been had it never been submitted.

Determinism: nodes, teams and pending jobs are sorted by name/id before anything depends on their order,
no decision iterates a hash-ordered set of strings, and time is the ``now`` argument — the same snapshot,
in any tuple order, gives the same Plan. Duplicate pending ids keep the first (by id, submit time, rank,
then the whole value);
a pending id that is already running is ignored (it was bound by an earlier cycle whose plan was applied).

Speed: a failed placement is remembered per job shape until capacity is freed (see
:mod:`placement.find`), and so is a failed preemption, per (shape, team, priority, preemptible) — except
for a job that was itself recently evicted, whose ping-pong protection depends on its identity. Binding
only takes capacity and adds usage, and the eviction candidates are snapshot-running jobs (whose borrowed
status depends only on which of them are still placed), so a preemption that failed keeps failing until
something is freed (an eviction, a reconfiguration, a committed Statement). A search itself runs its trial
placements through :class:`~scheduler.core.speedups.trial.TrialPlacement`, whose exact shortcuts skip trials whose
answer is known, and reads candidates from one :class:`~scheduler.core.speedups.victims.Victims` per cycle (rebuilt
after a reconfiguration closes a node; with the speed-ups off, from the plain rule
:func:`~scheduler.core.rules.eviction.team_candidates`). Every such cache and shortcut goes through the cycle's memo
(:mod:`scheduler.core.speedups`); ``plan_cycle(..., speedups=False)`` switches all of them off.

A caller that plans many cycles in a process holding a large heap may pause the cyclic garbage collector
around each one (the loop and the simulator do, :mod:`scheduler.gcpause`): a cycle allocates hundreds of thousands
of short-lived tuples that reference counting frees, and each collector pass walks the whole heap. The core
leaves the process-wide collector alone.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Sequence
from dataclasses import replace

from scheduler.core.capacity import gpu_class_of
from scheduler.core.catalog import GPU_MODEL_BY_NAME
from scheduler.core.choose import choose
from scheduler.core.demand import Demand
from scheduler.core.explain import Blocker, EtaEstimator, demand_units, need_text, reason_text, standing_text
from scheduler.core.isolation import Evaluating, JobFailed
from scheduler.core.placement import IndexedClusterState
from scheduler.core.placement.fallback import fallback_slots, whole_gpu_slots
from scheduler.core.placement.index import CapacityIndex
from scheduler.core.placement.mix import observe
from scheduler.core.placement.options import Option, options_for
from scheduler.core.placement.reconfigurations import Reconfigurations
from scheduler.core.plan import Bind, Evict, Plan, Reject, Waiting
from scheduler.core.policy import Policy
from scheduler.core.preemption import find_victims
from scheduler.core.reservation import Reservations, expected_runtime
from scheduler.core.rightsize import resolve
from scheduler.core.rules.eviction import fresh_until, ground
from scheduler.core.rules.fairshare import FairShare, job_class
from scheduler.core.rules.gang import bind
from scheduler.core.rules.limits import Admission, placement_units
from scheduler.core.screening import rejection_reason, screen
from scheduler.core.shape import Shape, placement_shape
from scheduler.core.speedups.memo import Memo, current_memo
from scheduler.core.speedups.switch import fair_share, indexed_state
from scheduler.core.speedups.trial import TrialPlacement
from scheduler.core.speedups.victims import Victims
from scheduler.core.state import Job, Slots, Snapshot
from scheduler.core.units import FULL_GPU_MILLI, UNITS_PER_GPU
from scheduler.core.vocabulary import BlockerKind, Priority

__all__ = ["plan_cycle", "rejection_reason"]  # rejection_reason: the question a submit asks (screening)

log = logging.getLogger(__name__)


def plan_cycle(snapshot: Snapshot, policy: Policy, now: float, *, speedups: bool = True) -> Plan:
    """The plan of one cycle for ``snapshot`` at ``now`` (module doc). ``speedups=False`` plans by the plain
    rules, every cache and shortcut off (:mod:`scheduler.core.speedups`): the same plan, found slower."""
    with Memo(speedups).current():
        return _plan_isolated(snapshot, policy, now)


def _plan_isolated(snapshot: Snapshot, policy: Policy, now: float) -> Plan:
    """:func:`_plan`, again without each pending job whose evaluation raised (:mod:`isolation`).

    A job is planned around alone; when a second job of the same placement shape fails too, every pending
    job of that shape is (they are evaluated alike), so a thousand copies of one bad request cost two extra
    passes, not a thousand."""
    failed: dict[str, str] = {}
    failed_shapes: set[Hashable] = set()
    by_id = {job.id: job for job in snapshot.pending}
    while True:
        try:
            plan = _plan(snapshot, policy, now)
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


def _plan(snapshot: Snapshot, policy: Policy, now: float) -> Plan:
    memo = current_memo()  # the one switch: plain rules, or the rules wrapped by the speed-ups
    state = indexed_state(snapshot, now, memo)
    fairness = fair_share(snapshot.teams, state, policy, memo)
    pending, rejections = screen(snapshot, state, policy)
    index = _index(state)
    index.mix = observe(state, index, pending, policy)
    run = _Run(state, fairness, policy, now, snapshot, pending)
    for job in fairness.iter_pending(pending, now):
        run.schedule(job)
    reconfigurations = run.reconfigurations.after_placement(run.order)
    return Plan(
        evictions=tuple(run.evictions + run.reconfigurations.evictions),
        reconfigurations=tuple(reconfigurations),
        binds=tuple(run.binds),
        rejections=tuple(rejections),
        waiting=tuple(run.explain(snapshot)),
    )


def _index(state: IndexedClusterState) -> CapacityIndex:
    assert state.index is not None
    return state.index


class _Run:
    """The mutable working state of one cycle."""

    def __init__(
        self,
        state: IndexedClusterState,
        fairness: FairShare,
        policy: Policy,
        now: float,
        snapshot: Snapshot,
        pending: Sequence[Job],
    ) -> None:
        self.state = state
        self.index = _index(state)
        self.fairness = fairness
        self.policy = policy
        self.now = now
        self.preemptions = tuple(sorted(snapshot.preemptions, key=lambda p: (p.at, p.victim, p.by)))
        window = policy.ping_pong_window_s
        self.recent_victims = frozenset(p.victim for p in self.preemptions if now - p.at < window)
        self.binds: list[Bind] = []
        self.evictions: list[Evict] = []
        self.order: list[Job] = []
        self.blockers: dict[str, Blocker] = {}
        self.reconfigurations = Reconfigurations(state, fairness, policy, now, self.preemptions, self.blockers, pending)
        self.reservations = Reservations(state, self.index, policy, now, self._frees_at, self.reconfigurations.bound)
        self._preempt_failed: dict[Hashable, int] = current_memo().table()
        self._victims = self._new_victims()  # valid until a reconfiguration closes a node
        self._victims_at = 0  # len(self.reconfigurations.changes) when it was built
        self._blocked_production: dict[str, Job] = {}  # production jobs still blocked, in the order taken
        self._retrying = False
        self._pending_teams: set[str] = set()

    # -- placing -----------------------------------------------------------------------------------------

    def schedule(self, job: Job) -> None:
        """Take ``job``'s turn (module doc, step 3)."""
        self.order.append(job)
        self._try(job)

    def _try(self, job: Job) -> None:
        with Evaluating(job.id):
            self._turn(job)

    def _turn(self, job: Job) -> None:
        evicted, drained = len(self.evictions), len(self.reconfigurations.evictions)
        self.blockers.pop(job.id, None)
        options = options_for(self.index, job, self.policy)
        if not options:
            self.blockers[job.id] = Blocker(BlockerKind.NOT_READY)
        else:
            self._place(job)
            if job.id in self.blockers and self.blockers[job.id].kind == BlockerKind.CAPACITY:  # not bound
                refusals: list[Admission] = []  # on the models a reservation was found on, the quota refused

                def admits_at(at: float, model: str) -> bool:
                    # Asked only of the models a reservation is found on, so most turns never ask the quota.
                    on_model = [o for o in options if o.model == model]
                    refusal = self._quota_refusal(job, on_model)
                    if refusal is None or self._admits_at(job, on_model, at):
                        return True  # admitted now (no look ahead needed), or once its own work has ended
                    refusals.append(refusal)
                    return False

                reservation = self.reservations.reserve(job, options, admits_at)
                if refusals:  # GPUs would free, but not its quota: no start time
                    self.blockers[job.id] = Blocker(BlockerKind.QUOTA, refusals[0].reason)
                if reservation is not None:
                    nodes = ", ".join(dict.fromkeys(node for node, _ in reservation.gpus))
                    self.blockers[job.id] = Blocker(BlockerKind.RESERVED, nodes, reservation.start_at)
        blocker = self.blockers.get(job.id)  # None: bound
        if job.priority == Priority.PRODUCTION and blocker is not None and blocker.kind != BlockerKind.RECONFIGURING:
            self._blocked_production[job.id] = job
        evictions = self.evictions[evicted:] + self.reconfigurations.evictions[drained:]  # this turn's
        if evictions:
            self._retry_production({self.state.jobs[e.job].team for e in evictions})

    def _place(self, job: Job) -> None:
        choice = choose(self.state, self.fairness, job, self.policy)
        if choice.slots is not None:
            self._bind(job, choice.slots)
            return
        admission = choice.refused
        if admission is None and self.reservations.made and self._backfill(job):
            return
        if admission is None:  # an idle MIG-off GPU is the same capacity as a full-GPU MIG instance
            slots = whole_gpu_slots(self.state, job, self.policy)
            if slots is not None:
                verdict = self.fairness.admit(job, placement_units(self.state, slots))
                if verdict.ok:
                    self._bind(job, slots)
                    return
                admission = verdict  # the quota, not capacity, is what keeps it waiting
        production = job.priority == Priority.PRODUCTION and admission is None
        if production and self._fallback(job):  # idle capacity before an eviction or a reconfiguration
            return
        # Production must start now: preemptible work yields before the job waits minutes for a reconfiguration.
        if production and not self._preempt_fails(job, True) and self._preempt(job, True):
            return
        if production and self.reconfigurations.for_production(job):  # an idle GPU's change before evicting firm work
            return
        lower = job.priority != Priority.PRODUCTION and admission is None
        # Other work evicts as the last resort: not while a reconfiguration could serve it. A preemption known to
        # fail needs no such question (could_change_for only answers; it changes nothing).
        if (
            not self._preempt_fails(job)
            and not (lower and self.reconfigurations.could_change_for(job))
            and self._preempt(job)
        ):
            return
        if production and self.reconfigurations.for_production(job, drain=True):
            return
        if production and self.reconfigurations.hold_for(job):  # rather than let lower work start there (module doc)
            return
        if admission is not None:
            self.blockers[job.id] = Blocker(BlockerKind.QUOTA, admission.reason)
        else:
            self.blockers[job.id] = Blocker(BlockerKind.CAPACITY)

    def _quota_refusal(self, job: Job, options: Sequence[Option]) -> Admission | None:
        """Why the quota refuses ``job`` on every one of ``options`` (one GPU model's: quotas are per GPU class),
        at its team's usage now; None when it admits one. A job no free capacity takes was never put to its quota
        (placement asks it of slots it found)."""
        refusal = None
        for option in options:
            verdict = self.fairness.admit(job, self._option_units(job, option))
            if verdict.ok:
                return None
            refusal = refusal or verdict
        return refusal

    def _admits_at(self, job: Job, options: Sequence[Option], at: float) -> bool:
        """Does the quota admit ``job`` on one of ``options`` at ``at``, once the work of its team expected to end
        by then has ended (:mod:`reservation`, rule 1)? Its own work ending is what frees its GPUs and its quota."""
        usage = dict(self.state.usage.get(job.team, {}))
        firm = dict(self.state.firm_usage.get(job.team, {}))
        for job_id, slots in self.state.placed.items():
            placed = self.state.jobs.get(job_id)
            if placed is None or placed.team != job.team or self._expected_end(job_id) > at:
                continue
            for gpu_class, units in placement_units(self.state, slots).items():
                usage[gpu_class] = usage.get(gpu_class, 0) - units
                if not placed.preemptible:
                    firm[gpu_class] = firm.get(gpu_class, 0) - units
        holdings = (self._option_units(job, option) for option in options)
        return any(self.fairness.admit(job, held, usage=usage, firm_usage=firm).ok for held in holdings)

    @staticmethod
    def _option_units(job: Job, option: Option) -> dict[str, int]:
        return {gpu_class_of(option.model): demand_units(option.demand, option.model) * job.replicas}

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

    def _fallback(self, job: Job) -> bool:
        """Bind production ``job`` on a larger free instance or a whole idle GPU (:mod:`placement.fallback`),
        counted at what it holds, if its quota admits that."""
        slots = fallback_slots(self.state, job, self.policy)
        if slots is None or not self.fairness.admit(job, placement_units(self.state, slots)).ok:
            return False
        self._bind(job, slots)
        return True

    def _backfill(self, job: Job) -> bool:
        """Bind ``job`` on GPUs held by a reservation it may backfill (:mod:`reservation`, rule 4)."""
        runtime_s = expected_runtime(job, self.fairness.teams.get(job.team), self.policy)
        slots = self.reservations.backfill(
            job, runtime_s, lambda: choose(self.state, self.fairness, job, self.policy).slots
        )
        if slots is None:
            return False
        self._bind(job, slots)
        return True

    def _expected_end(self, job_id: str) -> float:
        """When a placed job is expected to end (:mod:`reservation`, rule 5): never before the next cycle."""
        job = self.state.jobs[job_id]
        running = self.state.running.get(job_id)
        started = running.started_at if running is not None else self.now
        end = started + expected_runtime(job, self.fairness.teams.get(job.team), self.policy)
        return end if end > self.now else self.now + self.policy.cycle_s

    def _frees_at(self, job: Job, holder: str) -> float:
        """When placed job ``holder`` frees its GPUs for ``job`` (:mod:`reservation`, rule 2): its expected end,
        or earlier, when a ground of :mod:`preemption` lets ``job`` evict it — at once, or once its minimum
        runtime is past. Ping-pong and whether the eviction makes room are left to the preemption itself."""
        end = self._expected_end(holder)
        running = self.state.running.get(holder)
        if running is None:
            return end  # bound this cycle, or a reservation's placeholder: never a victim
        victim = running.job
        borrowed = victim.preemptible and self.fairness.is_borrowed(victim.team, holder)
        allow_reclaim = self.policy.fairness and self.fairness.under_guarantee(job.team, job_class(job))
        if ground(job, victim, borrowed, allow_reclaim, True, self.policy) is not None:
            return self.now  # production's ground: the minimum runtime does not protect from it
        if ground(job, victim, borrowed, allow_reclaim, False, self.policy) is not None:
            return min(end, max(self.now, fresh_until(running, self.policy)))
        return end

    def _new_victims(self) -> Victims | None:
        """A memory of each team's eviction candidates for the cycle, or None with the speed-ups off: preemption
        then asks the plain rule (:func:`~scheduler.core.rules.eviction.team_candidates`) team by team."""
        if not current_memo().enabled:
            return None
        return Victims(self.state, self.fairness, self.policy, self.now)

    def _bind(self, job: Job, slots: Slots) -> None:
        self.binds.append(bind(self.state, job, slots))
        self.reconfigurations.bound(slots)  # a node bound to this cycle is not reconfigured in it

    def _preempt_key(self, job: Job, preemptible_only: bool) -> Hashable:
        return (Shape.of(job).preemption, job.team, preemptible_only)

    def _preempt_fails(self, job: Job, preemptible_only: bool = False) -> bool:
        """Is a preemption for ``job`` known to fail: one for its shape failed and nothing was freed since?"""
        remember = job.id not in self.recent_victims
        return remember and self._preempt_failed.get(self._preempt_key(job, preemptible_only)) == self.index.freed

    def _preempt(self, job: Job, preemptible_only: bool = False) -> bool:
        """Evict for ``job`` (only preemptible work when ``preemptible_only``) and bind it, or False; the caller
        has checked :meth:`_preempt_fails`."""
        key = self._preempt_key(job, preemptible_only)
        remember = job.id not in self.recent_victims
        statement = self.state.begin()
        trial = TrialPlacement(self.state, self.index, self.fairness, job, self.policy)
        if len(self.reconfigurations.changes) != self._victims_at:  # a node closed: candidates may change
            self._victims = self._new_victims()
            self._victims_at = len(self.reconfigurations.changes)
        found = find_victims(
            self.state,
            job,
            self.fairness,
            trial,
            self.policy,
            self.now,
            self.preemptions,
            trial.shortcuts(),
            self._victims,
            preemptible_only,
        )
        if found is None:
            statement.rollback()
            if remember:
                self._preempt_failed[key] = self.index.freed
            return False
        # try_place accepted only admissible slots, and find_victims returns the state it found them in.
        evictions, slots = found
        self._bind(job, slots)
        statement.commit()
        self.evictions.extend(evictions)
        return True

    # -- explaining --------------------------------------------------------------------------------------

    def explain(self, snapshot: Snapshot) -> list[Waiting]:
        bound = {b.job for b in self.binds}
        holders = {reservation.holder.id for reservation in self.reservations.made}
        estimator = EtaEstimator(self.state, self.now, self._free_units(), self._expected_end, holders.__contains__)
        team_positions: dict[str, int] = {}
        waiting: list[Waiting] = []
        # Nothing changes while the cycle explains: what depends only on a job's shape, or on its team and
        # class, is worked out once.
        needs: dict[Hashable, tuple[Demand | None, tuple[str, ...], int, str]] = {}
        standings: dict[tuple[str, str], str] = {}
        for job in self.order:
            if job.id in bound:
                continue
            with Evaluating(job.id):
                waiting.append(self._waiting(job, len(waiting) + 1, team_positions, needs, standings, estimator))
        return waiting

    def _waiting(
        self,
        job: Job,
        position: int,
        team_positions: dict[str, int],
        needs: dict[Hashable, tuple[Demand | None, tuple[str, ...], int, str]],
        standings: dict[tuple[str, str], str],
        estimator: EtaEstimator,
    ) -> Waiting:
        """The position, reason and ETA of pending ``job``, ``position``-th in the cycle's order."""
        shape = placement_shape(job)
        if shape not in needs:
            demand, model, models = self._demand(job)
            units = demand_units(demand, model) * job.replicas if demand is not None else 0
            needs[shape] = (demand, models, units, need_text(job, demand, models))
        demand, models, units, need = needs[shape]
        blocker = self.blockers[job.id]
        eta: float | None = None
        if blocker.kind in (BlockerKind.CAPACITY, BlockerKind.RESERVED) and units:
            # A reserved job still takes its turn in the replay, so the jobs behind it count its GPUs as taken.
            runtime_s = expected_runtime(job, self.fairness.teams.get(job.team), self.policy)
            start_at = blocker.ready_at if blocker.kind == BlockerKind.RESERVED else None
            refusal = None
            if blocker.kind == BlockerKind.CAPACITY:  # a reservation's job was put to its quota when it was reserved
                refusal = self._refused_at_capacity(job, models, units, runtime_s, estimator)
            if refusal is not None:
                blocker = Blocker(BlockerKind.QUOTA, refusal.reason)
            else:
                eta = estimator.capacity_eta(models, units, runtime_s, start_at)
        # A job blocked by its quota gets no time: the reason says what would unblock it.
        if blocker.kind in (BlockerKind.RECONFIGURING, BlockerKind.HELD) and blocker.ready_at is not None:
            eta = max(0.0, blocker.ready_at - self.now)
        team_positions[job.team] = team_positions.get(job.team, 0) + 1
        standing_key = (job.team, job_class(job))
        if standing_key not in standings:
            guarantee = self.fairness.guarantee(job.team).overall or 0
            held = sum(self.state.usage.get(job.team, {}).values())
            under = self.fairness.under_guarantee(*standing_key)
            standings[standing_key] = standing_text(guarantee, held, under)
        reason = reason_text(need, blocker, standings[standing_key], position - 1, self.now)
        return Waiting(job.id, position, team_positions[job.team], reason, eta, blocker.kind)

    def _refused_at_capacity(
        self, job: Job, models: tuple[str, ...], units: int, runtime_s: float, estimator: EtaEstimator
    ) -> Admission | None:
        """The quota's refusal of capacity-blocked ``job`` when its quota (guarantee or burst limit) refuses it on
        every option now and still would when the replay finds it room, once its team's work expected to end by
        then has ended (:mod:`explain`, ETA); None when the start the replay gives it can come true. A job whose
        quota admits it now — most — costs one cached admission per option."""
        options = options_for(self.index, job, self.policy)
        refusal = self._quota_refusal(job, options)
        if refusal is None:
            return None
        eta = estimator.capacity_eta(models, units, runtime_s, claim=False)
        if eta is not None and self._admits_at(job, options, self.now + eta):
            return None
        return refusal

    def _demand(self, job: Job) -> tuple[Demand | None, str, tuple[str, ...]]:
        """The job's preferred demand, its GPU model, and every model the job may use now; when no ready node
        may take it, the demand on the first model of the cluster that could serve it (for the reason)."""
        options = options_for(self.index, job, self.policy)
        if options:
            return options[0].demand, options[0].model, tuple(sorted({o.model for o in options}))
        for model in sorted({n.gpu_model for n in self.state.nodes.values()}):
            demand = resolve(job, model, self.policy)
            if demand is not None:
                return demand, model, (model,)
        return None, "", ()  # pragma: no cover - such a job was rejected

    def _free_units(self) -> dict[str, int]:
        """Units free now on ready GPUs, per GPU model."""
        free: dict[str, int] = {}
        index = self.index
        held = self.reservations.held()  # free for the replay: their reserving jobs take them in queue order
        for gpu in index.gpus:
            if gpu.node.name not in index.group_of:
                continue
            if gpu.key in held:
                units = UNITS_PER_GPU
            elif gpu.layout:
                profiles = GPU_MODEL_BY_NAME[gpu.node.gpu_model].profiles()
                units = sum(
                    profiles[name].compute_slices * FULL_GPU_MILLI
                    for name, start in gpu.layout
                    if start not in gpu.instances
                )
            elif gpu.whole is not None:
                units = 0
            elif gpu.shares:
                units = (FULL_GPU_MILLI - gpu.milli_used) * (UNITS_PER_GPU // FULL_GPU_MILLI) if gpu.node.sharing else 0
            else:
                units = UNITS_PER_GPU
            free[gpu.node.gpu_model] = free.get(gpu.node.gpu_model, 0) + units
        return free
