"""The working state of one cycle (:func:`scheduler.core.planning.cycle.plan_cycle`) and the acts its steps share.

A :class:`Run` is made once per cycle and handed to every step of every job's turn
(:mod:`scheduler.core.planning.steps`): the cluster as the cycle has changed it so far, fair share, the plan's binds and
evictions, each waiting job's blocker, the cycle's reconfigurations and reservations. Its acts — bind, preempt,
and the time questions of reservations and explanations (when placed work ends, when it frees GPUs for a job,
whether the quota admits a job then) — are the ones more than one step, or a step and the explanation, ask;
what only one step does is written in that step.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Final

from scheduler.core.decisions.preemption import TeamCandidates, find_victims
from scheduler.core.decisions.reservation import expected_runtime
from scheduler.core.model.cluster_state import gpu_class_of
from scheduler.core.model.explain import Blocker, demand_units
from scheduler.core.model.plan import Bind, Evict
from scheduler.core.model.policy import Policy
from scheduler.core.model.provisioning import NodeRequest
from scheduler.core.model.shape import placement_shape
from scheduler.core.model.snapshot import Job, Slots, Snapshot
from scheduler.core.placement import IndexedClusterState
from scheduler.core.placement.fallback import as_whole_gpus
from scheduler.core.placement.gang import bind
from scheduler.core.placement.index import CapacityIndex
from scheduler.core.placement.options import Option
from scheduler.core.placement.reconfigurations import Reconfigurations
from scheduler.core.rules.eviction import fresh_until, ground, yields_to
from scheduler.core.rules.fairshare import FairShare, job_class
from scheduler.core.rules.limits import Admission, placement_units
from scheduler.core.rules.search_bound import counts, may_search
from scheduler.core.speedups.memo import current_memo
from scheduler.core.speedups.switch import reservations, take_back_candidates, team_candidates, usage_ahead
from scheduler.core.speedups.trial import TrialPlacement
from scheduler.core.speedups.wholetrial import WholeGpuTrial


def live_index(state: IndexedClusterState) -> CapacityIndex:
    """The capacity index a cycle's :class:`IndexedClusterState` always has."""
    assert state.index is not None
    return state.index


def arrivals(requests: Sequence[NodeRequest]) -> Mapping[str, float]:
    """Job → the earliest expected arrival of the node requests in flight for it."""
    earliest: dict[str, float] = {}
    for request in requests:
        earliest[request.job] = min(request.arrives_at, earliest.get(request.job, request.arrives_at))
    return earliest


# Every attribute of a Run, so that :meth:`Run.close` can drop them all: compiled by mypyc a Run has no ``__dict__``
# to clear. tests/scheduler/core/planning/test_cycle_garbage.py keeps it, and ``Run.__deletable__``, whole.
RUN_ATTRIBUTES: Final = (
    "state",
    "index",
    "fairness",
    "policy",
    "now",
    "preemptions",
    "recent_victims",
    "nodes_coming_at",
    "binds",
    "evictions",
    "order",
    "_counted",
    "past_bound",
    "blockers",
    "reconfigurations",
    "reservations",
    "take_back_candidates",
    "_preempt_failed",
    "_victims",
    "_victims_at",
    "_ahead",
)


class Run:
    """The mutable working state of one cycle (module doc)."""

    # mypyc (docs/benchmarks/scale.md, a compiled engine) lets :meth:`close` delete only the attributes named here;
    # it reads the list when it compiles and keeps no class attribute, so close reads ``RUN_ATTRIBUTES``, the same.
    __deletable__ = [
        "state",
        "index",
        "fairness",
        "policy",
        "now",
        "preemptions",
        "recent_victims",
        "nodes_coming_at",
        "binds",
        "evictions",
        "order",
        "_counted",
        "past_bound",
        "blockers",
        "reconfigurations",
        "reservations",
        "take_back_candidates",
        "_preempt_failed",
        "_victims",
        "_victims_at",
        "_ahead",
    ]

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
        self.index = live_index(state)
        self.fairness = fairness
        self.policy = policy
        self.now = now
        self.preemptions = tuple(sorted(snapshot.preemptions, key=lambda p: (p.at, p.victim, p.by)))
        window = policy.ping_pong_window_s
        self.recent_victims = frozenset(p.victim for p in self.preemptions if now - p.at < window)
        # When on-demand nodes asked for a job arrive (its node request in flight; the earliest of any): the
        # reservation step holds nothing for it that would start later (docs/scheduling-rules.md §9).
        self.nodes_coming_at = arrivals(snapshot.provisioning.requests)
        self.binds: list[Bind] = []
        self.evictions: list[Evict] = []
        self.order: list[Job] = []  # every job that took a turn, in the order taken
        self._counted: dict[str, int] = {}  # team → its jobs counted against the search bound so far
        self.past_bound: set[str] = set()  # jobs that may not search for victims this cycle (search_bound)
        self.blockers: dict[str, Blocker] = {}  # why each job that took a turn waits; none for a bound job
        self.reconfigurations = Reconfigurations(state, fairness, policy, now, self.preemptions, self.blockers, pending)
        self.reservations = reservations(
            state, fairness, policy, now, self.frees_at, self.expected_end, self.reconfigurations.bound, current_memo()
        )
        # Who take-back may evict for a job (reservation rule 6), by the rule or the speed-up that answers alike.
        self.take_back_candidates = take_back_candidates(state, current_memo())
        self._preempt_failed: dict[Hashable, int] = current_memo().table()
        self._victims = self._new_victims()  # told of the nodes each reconfiguration closes
        self._victims_at = 0  # len(self.reconfigurations.changes) when it was last told
        self._ahead = usage_ahead(state, self.expected_end, current_memo())

    def close(self) -> None:
        """The cycle is over: break the reference cycles of its working objects — the state and its capacity index
        (each refers to the other, the index's idle classes to the state), and this run and the speed-ups that
        keep its bound methods (the reservations' ``frees_at`` and ``expected_end``, the usage ahead's) — so
        reference counting frees them as the plan is returned. Left to the cyclic collector, they were ~128,000
        objects one young collection walked after each cycle at 1,000 nodes: 45-120 ms of the caller's time
        (docs/benchmarks/scale.md, notes). The run answers nothing once closed."""
        self.state.index = None
        for name in RUN_ATTRIBUTES:
            delattr(self, name)

    def enter(self, job: Job) -> None:
        """``job`` takes its first turn: it joins the order, and its place in its team's order decides whether it
        may search for victims (:mod:`scheduler.core.rules.search_bound`)."""
        self.order.append(job)
        if counts(job):
            position = self._counted[job.team] = self._counted.get(job.team, 0) + 1
            if not may_search(job, position, self.policy):
                self.past_bound.add(job.id)

    # -- binding and evicting ----------------------------------------------------------------------------

    def bind(self, job: Job, slots: Slots) -> None:
        """Bind ``job`` to ``slots`` in the plan and the state."""
        self.binds.append(bind(self.state, job, slots))
        self.reconfigurations.bound(slots)  # a node bound to this cycle is not reconfigured in it

    def preempt_fails(self, job: Job, preemptible_only: bool = False, whole_gpu: bool = False) -> bool:
        """Is a preemption for ``job`` (of the kind :meth:`preempt` is asked) known to fail: one for its shape
        failed and nothing was freed since? Not remembered for a recent victim, whose ping-pong protection
        depends on its identity (:mod:`scheduler.core.planning.cycle`, Speed)."""
        remember = job.id not in self.recent_victims
        key = self._preempt_key(job, preemptible_only, whole_gpu)
        return remember and self._preempt_failed.get(key) == self.index.freed

    def preempt(self, job: Job, preemptible_only: bool = False, whole_gpu: bool = False) -> bool:
        """Evict for ``job`` (only preemptible work when ``preemptible_only``) and bind it, both in one Statement;
        False, with nothing changed, when no set of victims makes room its quota admits. ``whole_gpu``: only on
        GPUs with MIG off, for a profile that takes every compute slice of the GPU
        (:class:`~scheduler.core.speedups.wholetrial.WholeGpuTrial`). The caller has checked :meth:`preempt_fails`."""
        key = self._preempt_key(job, preemptible_only, whole_gpu)
        remember = job.id not in self.recent_victims
        statement = self.state.begin()
        trial: WholeGpuTrial | TrialPlacement
        if whole_gpu:
            trial = WholeGpuTrial(self.state, self.fairness, job, self.policy)
            searched = as_whole_gpus(job)  # its candidates: what holds a GPU with MIG off (or its team's quota)
        else:
            trial = TrialPlacement(self.state, self.index, self.fairness, job, self.policy)
            searched = job
        changes = self.reconfigurations.changes
        if len(changes) != self._victims_at and self._victims is not None:  # nodes closed: candidates may change
            self._victims.closed({change.node for change in changes[self._victims_at :]})
        self._victims_at = len(changes)
        found = find_victims(
            self.state,
            searched,
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
        self.bind(job, slots)
        statement.commit()
        self.evictions.extend(evictions)
        return True

    @staticmethod
    def _preempt_key(job: Job, preemptible_only: bool, whole_gpu: bool) -> Hashable:
        preemption = (placement_shape(job), job.priority, job.preemptible)  # Shape.of(job).preemption, built directly
        return (preemption, job.team, preemptible_only, whole_gpu)

    def _new_victims(self) -> TeamCandidates | None:
        """A memory of each team's eviction candidates for the cycle, or None with the speed-ups off: preemption
        then asks the plain rule (:func:`~scheduler.core.rules.eviction.team_candidates`) team by team."""
        return team_candidates(self.state, self.fairness, self.policy, self.now, current_memo())

    # -- the quota and time --------------------------------------------------------------------------------

    def quota_refusal(self, job: Job, options: Sequence[Option]) -> Admission | None:
        """Why the quota refuses ``job`` on every one of ``options`` (one GPU model's: quotas are per GPU class),
        at its team's usage now; None when it admits one. A job no free capacity takes was never put to its quota
        (placement asks it of slots it found)."""
        refusal = None
        for option in options:
            verdict = self.fairness.admit(job, option_units(job, option))
            if verdict.ok:
                return None
            refusal = refusal or verdict
        return refusal

    def admits_at(self, job: Job, options: Sequence[Option], at: float) -> bool:
        """Does the quota admit ``job`` on one of ``options`` at ``at``, once the work of its team expected to end
        by then has ended (:mod:`reservation`, rule 1)? Its own work ending is what frees its GPUs and its quota."""
        usage, firm = self.usage_at(job.team, at)
        holdings = (option_units(job, option) for option in options)
        return any(self.fairness.admit(job, held, usage=usage, firm_usage=firm).ok for held in holdings)

    def usage_at(self, team: str, at: float) -> tuple[dict[str, int], dict[str, int]]:
        """The usage and the non-preemptible usage of ``team`` once its placed work expected to end by ``at`` has
        ended (by :class:`~scheduler.core.speedups.ahead.UsageAhead` while the speed-ups are on)."""
        if self._ahead is not None:
            return self._ahead(team, at)
        usage = dict(self.state.usage.get(team, {}))
        firm = dict(self.state.firm_usage.get(team, {}))
        for job_id, slots in self.state.placed.items():
            placed = self.state.jobs.get(job_id)
            if placed is None or placed.team != team or self.expected_end(job_id) > at:
                continue
            for gpu_class, units in placement_units(self.state, slots).items():
                usage[gpu_class] = usage.get(gpu_class, 0) - units
                if not placed.preemptible:
                    firm[gpu_class] = firm.get(gpu_class, 0) - units
        return usage, firm

    def expected_end(self, job_id: str) -> float:
        """When a placed job is expected to end (:mod:`reservation`, rule 5): never before the next cycle."""
        job = self.state.jobs[job_id]
        running = self.state.running.get(job_id)
        started = running.started_at if running is not None else self.now
        end = started + expected_runtime(job, self.fairness.teams.get(job.team), self.policy)
        return end if end > self.now else self.now + self.policy.cycle_s

    def frees_at(self, job: Job, holder: str) -> float:
        """When placed job ``holder`` frees its GPUs for ``job`` (:mod:`reservation`, rule 2): its expected end,
        or earlier, when a ground of :mod:`preemption` lets ``job`` evict it — at once, or once its minimum
        runtime is past — or it would yield to ``job`` as work that backfilled in front of it (:mod:`reservation`,
        rule 6), once its minimum runtime is past: else a reservation's start would move to the backfilled
        work's own end, and work that ends before that later start could backfill what the job needs. Ping-pong
        and whether the eviction makes room are left to the preemption itself."""
        end = self.expected_end(holder)
        running = self.state.running.get(holder)
        if running is None:
            return end  # bound this cycle, or a reservation's placeholder: never a victim
        victim = running.job
        borrowed = victim.preemptible and self.fairness.is_borrowed(victim.team, holder)
        allow_reclaim = self.policy.fairness and self.fairness.under_guarantee(job.team, job_class(job))
        if ground(job, victim, borrowed, allow_reclaim, True, self.policy) is not None:
            return self.now  # production's ground: the minimum runtime does not protect from it
        yields = yields_to(job, running, borrowed and self.policy.fairness)  # borrowing is fair share's idea
        if ground(job, victim, borrowed, allow_reclaim, False, self.policy) is not None or yields:
            return min(end, max(self.now, fresh_until(running, self.policy)))
        return end


def option_units(job: Job, option: Option) -> dict[str, int]:
    """The units ``job`` would hold on ``option``, per GPU class (what its quota is asked)."""
    return {gpu_class_of(option.model): demand_units(option.demand, option.model) * job.replicas}
