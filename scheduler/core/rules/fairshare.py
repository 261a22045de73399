"""Fair share: team quotas, admission, the order of pending work, and which running work is borrowed.

Rules (``docs/scheduling-rules.md``), all in integer units of 1/7000 GPU (:data:`UNITS_PER_GPU`; a whole GPU is
7000, a MIG slice ``compute × 1000``, a milli share ``milli × 7``); quotas are written in GPU-equivalents and
converted with ``round(gpus × 7000)``:

1. **Quotas** (the arithmetic is :mod:`scheduler.core.rules.limits`'s). ``Team.guaranteed`` / ``Team.burst`` hold
   an overall figure under ``"any"`` and per-class figures under a GPU class (``"A100"``, ``"H100"``,
   ``"H200"`` or a trace's model name).
   - Overall guarantee: the ``"any"`` entry; without one, the sum of the class entries (0 when none).
   - Class guarantee: the class entry; a class without an entry is bounded only by the overall figure when
     an ``"any"`` entry exists, and is 0 when the team guarantees classes only (a team that lists
     ``{"H100": 2}`` is guaranteed H100s, not A100s).
   - Burst: the ``"any"`` / class entry, never below the matching guarantee; no entry means unlimited.
   - A team absent from the snapshot, or with no quota at all, has guarantee 0 and unlimited burst: like a
     Kueue queue borrowing from its cohort, it may run preemptible work on idle capacity only.
2. **Admission** (:meth:`FairShare.admit`), as KAI-Scheduler's proportion plugin counts it:
   - Non-preemptible work other than production runs only within the guarantee, counting the team's
     *non-preemptible* units only (``ClusterState.firm_usage``): after adding the job, those units ≤ overall
     guarantee and, for each class the job uses, ≤ the class guarantee. The team's preemptible work does not
     block it: that work becomes the team's borrowed work (rule 4 fills the guarantee with non-preemptible
     work first) and yields to reclaim. All of the team's units still stay within burst.
   - Production may run above the guarantee, up to burst (overall and per class): it must always run, and
     the burst limit is what bounds it. Its units count as non-preemptible against the team's other work.
   - Preemptible work may go up to burst; above the guarantee (counting all the team's units) it is
     *borrowing*.
   Whether the capacity is idle is the caller's business (placement only sees free slots). Placement asks
   admission of the placement it ranks first and, when refused, of the best one whose holding is admitted
   (:mod:`scheduler.core.decisions.choose`; :meth:`FairShare.admitted` answers for every holding at once).
3. **Order** (:meth:`FairShare.iter_pending`). Pending jobs are taken team by team; a team's key is
   (tier, share / weight) of the team now, then its next job's (priority, rank, submit time, id):
   - tier 0: the team's next job is ``production`` (it must always run; placing it first avoids binding
     work this cycle that it would evict next cycle);
   - tier 1: the team's next job fits within its guarantee (:meth:`FairShare.fits_guarantee`): held units
     plus the fewest units the job could hold on some GPU model of the cluster stay ≤ the overall guarantee
     and, when the job is pinned to a GPU class with a bounded class guarantee, ≤ that class guarantee — as
     KAI-Scheduler serves a queue whose request fits its deserved quota before any queue that would borrow;
   - tier 2: everyone else.
   The share in tiers 0 and 1 is the dominant share: max over classes of (team units in the class / units of
   every GPU of the class in the snapshot, schedulable or not: a denominator that stays put within a cycle).
   In tier 2 it is the borrowed share (:meth:`FairShare.borrowed_share`): the units held above the
   guarantee, overall over the whole cluster and per class over that class, the larger — so what lies above
   the guarantees is split in proportion to the weights (two teams guaranteed 2 of 8 GPUs with weights 1
   and 3 end at 3 and 5), not the totals. Within a team: priority (production > high > normal > low), then
   the lead's rank (lower first), then submit time, then job id — a total order.
   Keys are recomputed as the cycle places jobs: after each job the team is re-keyed, and teams whose usage
   changed otherwise (evictions) are re-keyed when :meth:`FairShare.changed` names them.
   With ``policy.fairness`` off: plain (priority, submit time, id) order and every admission succeeds.
4. **Borrowed jobs** (:meth:`FairShare.borrowed_jobs`). A team's running jobs (from the snapshot, still
   placed) in the order (non-preemptible first, priority high → low, started earlier first, id) fill the
   guarantee first-fit: a job that still fits (overall and per class) is guaranteed, one that does not is
   borrowed. Evicting only borrowed jobs therefore never takes a job that fits in the guarantee — the floor
   holds at job granularity. Jobs bound during this cycle are not running yet and are not counted.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping, Sequence
from typing import cast

from scheduler.core.gpus.units import UNITS_PER_GPU, gpus_text
from scheduler.core.model.cluster_state import ClusterState, gpu_class_of
from scheduler.core.model.explain import demand_units
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Team
from scheduler.core.model.vocabulary import PRIORITY_INDEX, Priority
from scheduler.core.rules.limits import (
    ANY,
    Admission,
    Excess,
    Limits,
    borrowed_in_fill,
    burst_limits,
    exceeds,
    fill_order,
    guarantee_limits,
    of_class,
)
from scheduler.core.sizing.rightsize import resolve

_MIN_WEIGHT = 1e-9  # a weight ≤ 0 is read as "served last", never as a division by zero

# The order's keys are built, compared and queued whole, never taken apart in a hot loop. They are typed as tuples of
# any length so that the compiled engine keeps them as the Python tuples they are: mypyc holds a tuple of fixed
# length as a C struct and builds a new tuple of new numbers each time one enters a heap, a list or a dict.
JobKey = tuple[int | float | str, ...]  # (priority index, resumes 0/1, rank, submitted at, job id)
TeamKey = tuple[int | float | str, ...]  # (tier, share per weight, *the head's JobKey, team)

_FAIRNESS_OFF = Admission(True, False, "fair share is off")
_WITHIN = Admission(True, False, "within the team's guarantee")
# Non-preemptible work within the guarantee while the team's preemptible work takes it above: that work is the
# team's borrowed work now (rule 4 fills the guarantee with non-preemptible work first).
_FIRM_ABOVE = Admission(True, False, "within the team's guarantee; its preemptible work is borrowing")
_PRODUCTION_ABOVE = Admission(True, True, "production above the team's guarantee, within its burst limit")
Holding = tuple[str, int]  # (GPU class, units) one replica would hold: what admit is asked of a placement


def job_key(job: Job) -> JobKey:
    """Order within a team: priority, then a job resuming after an infrastructure loss (``Job.resumes``), then
    the lead's rank, submit time, id."""
    return (PRIORITY_INDEX[job.priority], 0 if job.resumes else 1, job.rank, job.submitted_at, job.id)


def job_class(job: Job) -> str:
    """The quota class a job's constraint pins it to, or ``"any"`` when it may run on several classes."""
    return gpu_class_of(job.gpu_model) if job.gpu_model else ANY


class FairShare:
    """Quotas and order for one cycle, reading usage live from ``state`` (so it follows the cycle's changes).

    Build one per cycle, after the state, and before the cycle places anything. ``teams`` may omit teams
    that have jobs (rule 1). Every answer is worked out afresh when asked: the cycle's speed-ups remember them
    and resume the guarantee fill (:class:`scheduler.core.speedups.fairshare.RememberingFairShare`, the same
    answers).
    """

    def __init__(self, teams: Sequence[Team], state: ClusterState, policy: Policy) -> None:
        self.state = state
        self.policy = policy
        self.teams: dict[str, Team] = {team.name: team for team in teams}
        capacity: dict[str, int] = {}
        for gpu in state.gpus.values():
            gpu_class = gpu_class_of(gpu.node.gpu_model)
            capacity[gpu_class] = capacity.get(gpu_class, 0) + UNITS_PER_GPU
        self.capacity: dict[str, int] = dict(sorted(capacity.items()))
        self.total_capacity = sum(capacity.values())
        self.models = tuple(sorted({gpu.node.gpu_model for gpu in state.gpus.values()}))
        # Running jobs (the only eviction candidates) by team, in guarantee-fill order (rule 4).
        by_team: dict[str, list[tuple[tuple[int, int, float, str], str]]] = {}
        for job_id, running in state.running.items():
            job = running.job
            key = fill_order(job.preemptible, job.priority, running.started_at, job_id)
            by_team.setdefault(job.team, []).append((key, job_id))
        self._running_by_team: dict[str, tuple[str, ...]] = {
            team: tuple(job_id for _, job_id in sorted(entries)) for team, entries in sorted(by_team.items())
        }
        # Preemptible running jobs by team, lowest priority first: priority preemption scans only these.
        self._preemptible_by_team: dict[str, tuple[tuple[int, str], ...]] = {
            team: tuple(sorted(((key[1], job_id) for key, job_id in entries if key[0]), reverse=True))
            for team, entries in sorted(by_team.items())
        }
        self._watchers: list[set[str]] = []

    # -- quotas ------------------------------------------------------------------------------------------

    def guarantee(self, team: str) -> Limits:
        return guarantee_limits(self.teams.get(team))

    def burst(self, team: str) -> Limits:
        return burst_limits(self.teams.get(team), self.guarantee(team))

    def weight(self, team: str) -> float:
        spec = self.teams.get(team)
        return max(spec.weight, _MIN_WEIGHT) if spec else 1.0

    def usage(self, team: str) -> dict[str, int]:
        """Units held per class and overall under ``"any"`` (what :meth:`ClusterState.team_units` says)."""
        return self.state.team_units(team)

    def under_guarantee(self, team: str, gpu_class: str = ANY) -> bool:
        """Overall units < overall guarantee and, for a class with a bounded guarantee, class units < it."""
        limits = self.guarantee(team)
        usage = self.state.usage.get(team, {})
        held = sum(usage.values())
        if held >= (limits.overall or 0):
            return False
        if gpu_class == ANY:
            return True
        limit = limits.for_class(gpu_class)
        return limit is None or usage.get(gpu_class, 0) < limit

    def within_guarantee(self, team: str, units_by_class: Mapping[str, int]) -> bool:
        """True when the team would stay within its guarantee after also holding ``units_by_class``."""
        return exceeds(self.guarantee(team), self.state.usage.get(team, {}), units_by_class) is None

    def borrowing_units(self, team: str) -> int:
        """Units held above the overall guarantee (0 when within it)."""
        held = sum(self.state.usage.get(team, {}).values())
        return max(0, held - (self.guarantee(team).overall or 0))

    def dominant_share(self, team: str) -> float:
        """Max over classes of team units / cluster units of that class."""
        usage = self.state.usage.get(team)
        if not usage:
            return 0.0
        share = 0.0
        for gpu_class, units in usage.items():
            capacity = self.capacity.get(gpu_class)
            if units and capacity:
                share = max(share, units / capacity)
        return share

    # -- admission ---------------------------------------------------------------------------------------

    def admit(
        self,
        job: Job,
        units_by_class: Mapping[str, int],
        usage: Mapping[str, int] | None = None,
        firm_usage: Mapping[str, int] | None = None,
    ) -> Admission:
        """May ``job`` hold ``units_by_class`` (units per GPU class, from
        :func:`~scheduler.core.rules.limits.placement_units`)? Rule 2. ``usage`` (units per class) asks at a
        usage of the team other than its usage now, and ``firm_usage`` its non-preemptible usage (default: now). A
        cycle asks this tens of thousands of times: a refusal's reason is written when read."""
        if not self.policy.fairness:
            return _FAIRNESS_OFF
        team = job.team
        if usage is None:
            usage = self.state.usage.get(team, {})
        if not job.preemptible:
            return self._admit_firm(job, units_by_class, usage, firm_usage)
        over = exceeds(self.guarantee(team), usage, units_by_class)
        if over is None:
            return _WITHIN
        over_burst = exceeds(self.burst(team), usage, units_by_class)
        if over_burst is not None:
            return self._refusal(team, over_burst, "burst limit")
        return self._borrowing(team)

    def _borrowing(self, team: str) -> Admission:
        """The one answer of :meth:`admit` for a team's preemptible work above its guarantee, within burst."""
        return Admission(True, True, f"borrowing idle capacity above team {team}'s guarantee (preemptible)")

    def _admit_firm(
        self,
        job: Job,
        units_by_class: Mapping[str, int],
        usage: Mapping[str, int],
        firm_usage: Mapping[str, int] | None = None,
    ) -> Admission:
        """Rule 2 for non-preemptible work: the team's non-preemptible units against the guarantee (its
        borrowed preemptible work yields instead of blocking), all its units against the burst limit;
        production against the burst limit alone."""
        team = job.team
        if job.priority != Priority.PRODUCTION:
            firm = self.state.firm_usage.get(team, {}) if firm_usage is None else firm_usage
            over = exceeds(self.guarantee(team), firm, units_by_class)
            if over is not None:
                return self._refusal(team, over, "guarantee", firm=True)
        over_burst = exceeds(self.burst(team), usage, units_by_class)
        if over_burst is not None:
            return self._refusal(team, over_burst, "burst limit")
        if exceeds(self.guarantee(team), usage, units_by_class) is None:
            return _WITHIN
        return _FIRM_ABOVE if job.priority != Priority.PRODUCTION else _PRODUCTION_ABOVE

    def _refusal(self, team: str, over: Excess, limit_name: str, *, firm: bool = False) -> Admission:
        """A refusal whose reason says what blocks the job and what would unblock it."""

        def reason() -> str:
            where, after, limit = over
            held = " in work that is not preemptible" if firm else ""
            text = (
                f"team {team} would hold {gpus_text(after)} GPUs{of_class(where)}{held}, above its {limit_name} "
                f"of {gpus_text(limit)}"
            )
            count = gpus_text(after - limit)
            frees = f"{count} {'GPU' if count == '1' else 'GPUs'}{of_class(where)}"
            if firm:
                return (
                    f"{text}; it starts when the team's work that is not preemptible frees {frees}, or submit it "
                    "as preemptible to use borrowed capacity"
                )
            return f"{text}; it starts when the team's work frees {frees}, or when a platform admin raises the limit"

        return Admission(False, False, reason)

    def admitted(
        self, job: Job, holdings: tuple[Holding, ...], usage: Mapping[str, int] | None = None
    ) -> frozenset[Holding]:
        """The (GPU class, units) of ``holdings`` that :meth:`admit` admits for ``job`` one at a time, at its
        team's usage now or at ``usage``."""
        return frozenset(holding for holding in holdings if self.admit(job, dict((holding,)), usage).ok)

    # -- borrowed work -----------------------------------------------------------------------------------

    def running_jobs(self, team: str) -> tuple[str, ...]:
        """The team's snapshot-running jobs still placed, in guarantee-fill order (rule 4)."""
        everyone = self._running_by_team.get(team, ())
        missing = self.state.running_gone.get(team)  # kept by the state as jobs are removed and put back
        if not missing:
            return everyone
        return tuple(job_id for job_id in everyone if job_id not in missing)

    def running_units(self, job_id: str) -> dict[str, int]:
        """Units per class of a running job (its slots do not change within a cycle)."""
        return self.state.job_units(job_id)

    def running_slot_nodes(self, job_id: str) -> tuple[tuple[str, bool], ...]:
        """The distinct (node, holds a MIG instance) pairs of a running job's slots, in slot order: all that
        decides whether evicting it frees capacity of some holding on a node."""
        pairs = (
            (slot.node, slot.mig_profile is not None)
            for replica in self.state.placed.get(job_id, ())
            for slot in replica
        )
        return tuple(dict.fromkeys(pairs))

    def borrowed_jobs(self, team: str, running: tuple[str, ...] | None = None) -> list[str]:
        """Running jobs of ``team`` that sit on borrowed capacity (rule 4), in guarantee-fill order.

        ``running``, when given, must be what :meth:`running_jobs` returns for ``team`` right now (a caller
        that has it already saves a second scan of the team's jobs)."""
        return list(self.borrowed(team, running))

    def borrowed(self, team: str, running: tuple[str, ...] | None = None) -> tuple[str, ...]:
        """:meth:`borrowed_jobs` as a tuple. The fill depends only on which of the team's running jobs are still
        placed (not on work bound this cycle): binds leave it alone, evictions and their undo change it."""
        if running is None:
            running = self.running_jobs(team)
        return self._fill(team, running)

    def is_borrowed(self, team: str, job_id: str) -> bool:
        """Is running job ``job_id`` of ``team`` one of its :meth:`borrowed` jobs?"""
        return job_id in self.borrowed(team)

    def _fill(self, team: str, running: tuple[str, ...]) -> tuple[str, ...]:
        """The borrowed jobs of ``running`` (in fill order): rule 4's guarantee fill
        (:class:`~scheduler.core.rules.limits.GuaranteeFill`) over every one of them, first to last."""
        return tuple(
            borrowed_in_fill(self.guarantee(team), ((job_id, *self._fill_units(job_id)) for job_id in running))
        )

    def _fill_units(self, job_id: str) -> tuple[int, tuple[tuple[str, int], ...]]:
        """A running job's total units and its non-zero units per class."""
        units = self.running_units(job_id)
        return sum(units.values()), tuple((c, u) for c, u in units.items() if u)

    def lower_preemptible(self, team: str, priority: Priority) -> tuple[str, ...]:
        """The team's preemptible running jobs (still placed) of lower priority than ``priority``."""
        rank = PRIORITY_INDEX[priority]
        placed = self.state.placed
        found = []
        for job_rank, job_id in self._preemptible_by_team.get(team, ()):
            if job_rank <= rank:
                break
            if job_id in placed:
                found.append(job_id)
        return tuple(found)

    def over_guarantee(self, team: str) -> bool:
        """Holds more than its guarantee overall or in some class (only then can it have borrowed jobs)."""
        limits = self.guarantee(team)
        usage = self.state.usage.get(team, {})
        if sum(usage.values()) > (limits.overall or 0):
            return True
        for gpu_class, units in usage.items():
            limit = limits.for_class(gpu_class)
            if limit is not None and units > limit:
                return True
        return False

    def teams_with_running(self) -> tuple[str, ...]:
        return tuple(self._running_by_team)

    # -- order -------------------------------------------------------------------------------------------

    def changed(self, team: str) -> None:
        """Tell active iterations that ``team``'s usage changed outside them (an eviction, a drain)."""
        for dirty in self._watchers:
            dirty.add(team)

    def team_key(self, team: str, head: Job, head_key: JobKey | None = None) -> TeamKey:
        """Where ``team`` stands when ``head`` is its next job (rule 3); smaller is served first."""
        tier, share = self.standing(team, head)
        return (tier, share, *(head_key or job_key(head)), team)

    def standing(self, team: str, head: Job) -> tuple[int, float]:
        """The tier and the share per weight that lead :meth:`team_key`."""
        if head.priority == Priority.PRODUCTION:
            tier = 0
        elif self.fits_guarantee(team, head):
            tier = 1
        else:
            tier = 2
        share = self.dominant_share(team) if tier < 2 else self.borrowed_share(team)
        return tier, share / self.weight(team)

    def fits_guarantee(self, team: str, head: Job) -> bool:
        """Rule 3, tier 1: ``head`` at the fewest units it could hold on the cluster (:meth:`need_units`)
        keeps ``team`` within its guarantee, overall and in the class ``head`` is pinned to."""
        limits = self.guarantee(team)
        usage = self.state.usage.get(team, {})
        need = self.need_units(head)
        if sum(usage.values()) + need > (limits.overall or 0):
            return False
        gpu_class = job_class(head)
        limit = limits.for_class(gpu_class) if gpu_class != ANY else None
        return limit is None or usage.get(gpu_class, 0) + need <= limit

    def need_units(self, job: Job) -> int:
        """The fewest units ``job`` (every replica) could hold on some GPU model of the cluster; at least 1, so
        a job of unknown size counts as more than nothing."""
        per_replica = [
            demand_units(demand, model)
            for model in self.models
            if (demand := resolve(job, model, self.policy)) is not None
        ]
        return max(1, min(per_replica, default=1) * job.replicas)

    def borrowed_share(self, team: str) -> float:
        """Max over classes of the team's units above its guarantee / cluster units of that class: rule 3's
        measure of a team in tier 2, so capacity above the guarantees is split by weight."""
        usage = self.state.usage.get(team)
        if not usage:
            return 0.0
        limits = self.guarantee(team)
        above = max(0, sum(usage.values()) - (limits.overall or 0))
        share = above / self.total_capacity if self.total_capacity else 0.0
        for gpu_class, units in usage.items():
            limit = limits.for_class(gpu_class)
            capacity = self.capacity.get(gpu_class)
            if limit is not None and capacity and units > limit:
                share = max(share, (units - limit) / capacity)
        return share

    def iter_pending(self, pending: Sequence[Job], now: float) -> Iterator[Job]:
        """Yield ``pending`` in fair order (rule 3), re-keying as the caller places jobs between steps.

        The caller may place the yielded job (or not) before asking for the next one; usage is read live.
        Changes to other teams must be reported with :meth:`changed`; a team whose usage grew unreported is
        still re-keyed when its turn comes, one whose usage shrank unreported is served late. ``now`` is
        accepted for a future aging rule and does not change the order today.
        """
        # ``now`` unused: no aging yet, waiting time enters only through the submit-time tie-break. (Not ``del``:
        # mypyc cannot delete a generator's local.)
        if not self.policy.fairness:
            yield from sorted(
                pending, key=lambda j: (PRIORITY_INDEX[j.priority], 0 if j.resumes else 1, j.submitted_at, j.id)
            )
            return
        queues: dict[str, list[tuple[JobKey, Job]]] = {}
        for job in pending:
            queues.setdefault(job.team, []).append((job_key(job), job))
        for queue in queues.values():
            queue.sort(reverse=True)  # next job at the end: pop() is O(1); keys are unique (they end in the id)
        # Heap entries: (team key, version, step pushed). A team's older entries are superseded by version;
        # usage only changes between steps, so an entry pushed in the current step needs no re-check.
        version: dict[str, int] = dict.fromkeys(queues, 0)
        heap = [(self.team_key(team, queue[-1][1], queue[-1][0]), 0, 0) for team, queue in queues.items()]
        heapq.heapify(heap)
        step = 0
        dirty: set[str] = set()
        self._watchers.append(dirty)
        try:
            while heap or dirty:
                if dirty:
                    for team in sorted(dirty):
                        if queues.get(team):
                            version[team] += 1
                            head_key, head = queues[team][-1]
                            heapq.heappush(heap, (self.team_key(team, head, head_key), version[team], step))
                    dirty.clear()
                    continue
                key, stamp, pushed = heapq.heappop(heap)
                team = cast(str, key[-1])
                if stamp != version[team]:
                    continue  # superseded by a fresher entry
                if pushed != step:
                    head_key, head = queues[team][-1]
                    current = self.team_key(team, head, head_key)
                    if current != key:  # usage moved since the entry was pushed
                        version[team] += 1
                        heapq.heappush(heap, (current, version[team], step))
                        continue
                job = queues[team].pop()[1]
                yield job
                step += 1
                dirty.add(team)
        finally:
            self._watchers.remove(dirty)

    def order(self, pending: Sequence[Job], now: float) -> list[Job]:
        """The order :meth:`iter_pending` yields when nothing is placed in between (for explanations)."""
        return list(self.iter_pending(pending, now))
