"""Fair share that remembers: the plain rule (:class:`~scheduler.core.rules.fairshare.FairShare`) with its answers
kept for the cycle and its guarantee fill resumed (:mod:`.fill`), behind the same interface.

A cycle asks fair share the same questions again and again while little changes: quotas per team, the fewest
units a job of one size could hold, admission of one holding while the team's usage stands still, a running job's
units and slot nodes (fixed for the cycle), the team's running jobs still placed and the borrowed ones among them
(changed only by evictions and their undo), and a team's standing in the fair order — its borrowed share,
whether a head of a given size fits its guarantee, and the whole key of the head it last keyed (the order re-checks
an entry before serving it) — while its usage stands still (a turn that binds nothing leaves it so, and the team's
next job is keyed at once). Each answer here is kept in a table of the cycle's memo, keyed or
stamped by what it depends on, so an answer handed out is the rule's answer now. The cycle builds this class
while the speed-ups are on (:mod:`.switch`); ``tests/scheduler/core/speedups/test_speedups.py`` compares the plans.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from scheduler.core.model.cluster_state import ClusterState
from scheduler.core.model.policy import Policy
from scheduler.core.model.shape import size_shape
from scheduler.core.model.snapshot import Job, Team
from scheduler.core.model.tables import Tables
from scheduler.core.model.vocabulary import Priority
from scheduler.core.rules.fairshare import FairShare, Holding, JobKey, TeamKey, job_class, job_key
from scheduler.core.rules.limits import Admission, GuaranteeFill, Limits
from scheduler.core.speedups.fill import FillResume


class RememberingFairShare(FairShare):
    """:class:`~scheduler.core.rules.fairshare.FairShare` whose answers are kept in tables of ``tables`` (module
    doc); with a disabled memo they forget and every answer is the rule's, worked out afresh."""

    def __init__(self, teams: Sequence[Team], state: ClusterState, policy: Policy, tables: Tables) -> None:
        super().__init__(teams, state, policy)
        self._guarantee: dict[str, Limits] = tables.table()
        self._burst: dict[str, Limits] = tables.table()
        self._need: dict[tuple[object, ...], int] = tables.table()  # need_units per job size (Shape.size)
        self._running_cache: dict[str, tuple[frozenset[str], tuple[str, ...]]] = tables.table()
        self._borrowings: dict[str, Admission] = tables.table()  # per team: the one answer of admit when borrowing
        self._admitted: dict[tuple[str, bool, bool, tuple[Holding, ...]], tuple[object, frozenset[Holding]]] = (
            tables.table()
        )
        self._running_units: dict[str, dict[str, int]] = tables.table()
        self._borrowed_cache: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = tables.table()
        self._borrowed_sets: dict[str, tuple[tuple[str, ...], frozenset[str]]] = tables.table()  # see is_borrowed
        self._slot_nodes: dict[str, tuple[tuple[str, bool], ...]] = tables.table()
        self._fill_cache: dict[str, tuple[int, tuple[tuple[str, int], ...]]] = tables.table()
        self._resume = FillResume(tables)  # where the next fill of a team resumes
        # Per team, and per (team, fewest units, class): (the team's usage as a tuple, the answer).
        self._borrowed_shares: dict[str, tuple[tuple[tuple[str, int], ...], float]] = tables.table()
        self._fits: dict[tuple[str, int, str], tuple[tuple[tuple[str, int], ...], bool]] = tables.table()
        # Per (team, production head, head's size): (the team's usage as a tuple, the key's tier and share per
        # weight).
        self._standings: dict[tuple[str, bool, tuple[object, ...]], tuple[tuple[tuple[str, int], ...], int, float]] = (
            tables.table()
        )
        # Per team: (its head, its usage as a tuple, the whole key) last handed out.
        self._last_keys: dict[str, tuple[Job, tuple[tuple[str, int], ...], TeamKey]] = tables.table()

    # -- quotas: fixed for the cycle ---------------------------------------------------------------------

    def guarantee(self, team: str) -> Limits:
        limits = self._guarantee.get(team)
        if limits is None:
            limits = self._guarantee[team] = super().guarantee(team)
        return limits

    def burst(self, team: str) -> Limits:
        limits = self._burst.get(team)
        if limits is None:
            limits = self._burst[team] = super().burst(team)
        return limits

    def need_units(self, job: Job) -> int:
        key = size_shape(job)  # all that the fewest units depend on
        need = self._need.get(key)
        if need is None:
            need = self._need[key] = super().need_units(job)
        return need

    # -- admission: shared yes answers, and the answer per holding while the team's usage stands still --------

    def _borrowing(self, team: str) -> Admission:
        answer = self._borrowings.get(team)
        if answer is None:
            answer = self._borrowings[team] = super()._borrowing(team)
        return answer

    def admitted(
        self, job: Job, holdings: tuple[Holding, ...], usage: Mapping[str, int] | None = None
    ) -> frozenset[Holding]:
        """At the usage now, remembered per (team, preemptible, production, holdings) until that usage changes:
        turns of jobs of one shape ask it again and again while the team's usage stands still."""
        if usage is not None:
            return super().admitted(job, holdings, usage)
        key = (job.team, job.preemptible, job.priority == Priority.PRODUCTION, holdings)
        firm = () if job.preemptible else tuple(self.state.firm_usage.get(job.team, {}).items())
        stamp = (self.state.usage_stamp(job.team), firm)
        cached = self._admitted.get(key)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        allowed = super().admitted(job, holdings)
        self._admitted[key] = (stamp, allowed)
        return allowed

    # -- order: a team's standing, kept while its usage stands still ------------------------------------------

    def team_key(self, team: str, head: Job, head_key: JobKey | None = None) -> TeamKey:
        """The rule's key, its tier and share kept per the head's production flag and size (all they read of the
        head: :meth:`fits_guarantee` reads its fewest units and class) while the team's usage stands still: the
        tier and the share read of the cycle only that usage (:meth:`fits_guarantee`, :meth:`dominant_share`,
        :meth:`borrowed_share`) besides its fixed capacity, quotas and weights. The fair order keys a team's next
        job after each turn, and most turns leave the team's usage as it was — a bind of another team's job moves
        the state's version, not this team's usage (docs/benchmarks/scale.md, 2026-12-06)."""
        stamp = self.state.usage_stamp(team)
        last = self._last_keys.get(team)
        if last is not None and last[0] is head and last[1] == stamp:
            return last[2]  # the same head at the same usage: the fair order re-checks an entry before serving it
        production = head.priority == Priority.PRODUCTION
        size = (team, production, size_shape(head))
        kept = self._standings.get(size)
        if kept is None or kept[0] != stamp:
            tier, share = super().standing(team, head)
            kept = self._standings[size] = (stamp, tier, share)
        key = (kept[1], kept[2], *(head_key or job_key(head)), team)
        self._last_keys[team] = (head, stamp, key)
        return key

    def borrowed_share(self, team: str) -> float:
        """Asked whenever the team's next job is keyed (rule 3): most of the time its last job did not bind, and
        its usage, all the share reads besides the cycle's fixed capacity and quotas, is what it was."""
        stamp = self._usage_stamp(team)
        cached = self._borrowed_shares.get(team)
        if cached is None or cached[0] != stamp:
            cached = self._borrowed_shares[team] = (stamp, super().borrowed_share(team))
        return cached[1]

    def fits_guarantee(self, team: str, head: Job) -> bool:
        """Reads of ``head`` only the fewest units it could hold and its class; kept per those while the team's
        usage stands still."""
        key = (team, self.need_units(head), job_class(head))
        stamp = self._usage_stamp(team)
        cached = self._fits.get(key)
        if cached is None or cached[0] != stamp:
            cached = self._fits[key] = (stamp, super().fits_guarantee(team, head))
        return cached[1]

    def _usage_stamp(self, team: str) -> tuple[tuple[str, int], ...]:
        return self.state.usage_stamp(team)

    # -- running and borrowed work: fixed per running job, and per the team's running jobs still placed -----

    def running_jobs(self, team: str) -> tuple[str, ...]:
        missing = self.state.running_gone.get(team)
        if not missing:
            return self._running_by_team.get(team, ())
        cached = self._running_cache.get(team)
        if cached is None or cached[0] != missing:  # evictions (or their undo) since the last scan
            cached = self._running_cache[team] = (frozenset(missing), super().running_jobs(team))
        return cached[1]

    def running_units(self, job_id: str) -> dict[str, int]:
        """Summed from what occupying its slots does (:meth:`ClusterState.slot_ops`: each slot's GPU class and
        units, as :meth:`ClusterState.job_units` reads them), which the state kept when it placed the job: at
        5,000 nodes the cycle asks this of ~20,000 running jobs once each."""
        units = self._running_units.get(job_id)
        if units is None:
            slots = self.state.placed.get(job_id)
            if slots is None:
                units = super().running_units(job_id)
            else:
                units = {}
                for op in self.state.slot_ops(job_id, slots):
                    units[op[3]] = units.get(op[3], 0) + op[4]
            self._running_units[job_id] = units
        return units

    def running_slot_nodes(self, job_id: str) -> tuple[tuple[str, bool], ...]:
        slot_nodes = self._slot_nodes.get(job_id)
        if slot_nodes is None:
            slot_nodes = self._slot_nodes[job_id] = super().running_slot_nodes(job_id)
        return slot_nodes

    def borrowed(self, team: str, running: tuple[str, ...] | None = None) -> tuple[str, ...]:
        """The tuple itself, kept while the team's running jobs still placed are the same (no copy)."""
        if running is None:
            running = self.running_jobs(team)
        cached = self._borrowed_cache.get(team)
        if cached is None or cached[0] != running:
            cached = self._borrowed_cache[team] = (running, self._fill(team, running))
        return cached[1]

    def is_borrowed(self, team: str, job_id: str) -> bool:
        """A set lookup, the set kept while the borrowed tuple stands."""
        borrowed = self.borrowed(team)
        cached = self._borrowed_sets.get(team)
        if cached is None or cached[0] is not borrowed:
            cached = self._borrowed_sets[team] = (borrowed, frozenset(borrowed))
        return job_id in cached[1]

    def _fill(self, team: str, running: tuple[str, ...]) -> tuple[str, ...]:
        """The rule's fill, resumed where the team's previous fill agrees (:mod:`.fill`)."""
        resume, held, filled, borrowed, checkpoints = self._resume.start(team, running)
        fill = GuaranteeFill(self.guarantee(team), held, filled)
        saves_at = self._resume.saves_at
        for position in range(resume, len(running)):
            if saves_at(position, resume):
                checkpoints.append((fill.held, tuple(fill.filled.items()), len(borrowed)))
            job_id = running[position]
            if not fill.offer(*self._fill_units(job_id)):
                borrowed.append(job_id)
        self._resume.save(team, running, checkpoints, borrowed)
        return tuple(borrowed)

    def _fill_units(self, job_id: str) -> tuple[int, tuple[tuple[str, int], ...]]:
        cached = self._fill_cache.get(job_id)
        if cached is None:
            cached = self._fill_cache[job_id] = super()._fill_units(job_id)
        return cached
