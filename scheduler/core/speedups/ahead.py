"""A team's usage at a later time, from its placed work sorted by expected end, kept while nothing is placed or taken.

Whether the quota admits a job at a later time (:meth:`~scheduler.core.planning.run.Run.admits_at`, the reservations'
rule 1 and the explanation of a capacity-blocked job) reads the team's usage once its work expected to end by
then has ended. The plain rule (:meth:`~scheduler.core.planning.run.Run.usage_at`) walks every placed job of the
cluster per question — 6,000 jobs each at 1,000 nodes, for the ~100 questions a cycle's explanation asks while
the state no longer changes. :class:`UsageAhead` answers the same from each team's placed work sorted by expected
end, with the units per GPU class summed over every prefix: a question is a bisection and a copy. A team's table
is built at its first question by one walk that works out the ends and units of that team's jobs alone (from the
second team asked at one version on, the walk files every placed job by team once, and each team reads its own), and
kept
while the capacity index's ``version`` stands (it moves whenever a job is placed or taken off, or a GPU is
reconfigured, and a rollback restores it with the state), so a question asked between two binds costs about the
walk the plain rule takes, and the explanation's questions share one walk per team.

The answer is the rule's exactly: the units are integers, so the order they are taken off in changes no sum, and
a GPU class that a job ending by then holds is in the answer (at its difference) whether or not the team's usage
now names it, as the plain rule leaves it. The cycle builds it while the speed-ups are on (:mod:`.switch`).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass

from scheduler.core.model.tables import Tables
from scheduler.core.placement.index import IndexedClusterState
from scheduler.core.rules.limits import placement_units

Usage = dict[str, int]


@dataclass(frozen=True, slots=True)
class _TeamEnds:
    """One team's placed work, sorted by expected end: ``ends[k]`` is the (k+1)-th end, ``taken[k]`` and
    ``firm_taken[k]`` the units per class the first k jobs hold (all of them, and the non-preemptible ones)."""

    ends: tuple[float, ...]
    taken: tuple[Usage, ...]
    firm_taken: tuple[Usage, ...]


class UsageAhead:
    """``usage_at(team, at)`` of the plain rule, from tables of ``tables`` kept per index version (module doc)."""

    def __init__(self, state: IndexedClusterState, expected_end: Callable[[str], float], tables: Tables) -> None:
        assert state.index is not None
        self.state = state
        self.index = state.index
        self.expected_end = expected_end
        self._version: int | None = None  # the index version the kept ends were built at
        self._built: dict[str, _TeamEnds] = tables.table()  # team → its ends, at that version
        self._filed: dict[str, list[str]] | None = None  # team → its placed jobs, at that version, once filed

    def __call__(self, team: str, at: float) -> tuple[Usage, Usage]:
        """The team's usage and non-preemptible usage once its placed work expected to end by ``at`` has ended."""
        ends = self._ends(team)
        count = bisect_right(ends.ends, at)  # the jobs whose end is ≤ at
        usage = dict(self.state.usage.get(team, {}))
        firm = dict(self.state.firm_usage.get(team, {}))
        for gpu_class, units in ends.taken[count].items():
            usage[gpu_class] = usage.get(gpu_class, 0) - units
        for gpu_class, units in ends.firm_taken[count].items():
            firm[gpu_class] = firm.get(gpu_class, 0) - units
        return usage, firm

    def _ends(self, team: str) -> _TeamEnds:
        if self.index.version != self._version:
            self._built.clear()  # only the version now is ever asked again
            self._filed = None
            self._version = self.index.version
        ends = self._built.get(team)
        if ends is None:
            ends = self._built[team] = self._build(team)
        return ends

    def _build(self, team: str) -> _TeamEnds:
        """The team's ends: a walk of the placed jobs that works out the ends and units of the team's alone (the
        questions of a cycle come from a few teams)."""
        state = self.state
        jobs = state.jobs  # a placed job is always one of the state's jobs (ClusterState._occupy)
        if self._built and self._filed is None:
            # A second team asked at this version (the explanation asks its teams at one): one walk files every
            # placed job by team, instead of a walk per team.
            filed: dict[str, list[str]] = {}
            for job_id in state.placed:
                filed.setdefault(jobs[job_id].team, []).append(job_id)
            self._filed = filed
        if self._filed is not None:
            ids: list[str] = self._filed.get(team, [])
        else:
            ids = [job_id for job_id in state.placed if jobs[job_id].team == team]
        mine = sorted((self.expected_end(job_id), job_id) for job_id in ids)
        taken: list[Usage] = [{}]
        firm_taken: list[Usage] = [{}]
        for _, job_id in mine:
            units = placement_units(state, state.placed[job_id])
            total, firm = dict(taken[-1]), dict(firm_taken[-1])
            for gpu_class, amount in units.items():
                total[gpu_class] = total.get(gpu_class, 0) + amount
                if not jobs[job_id].preemptible:
                    firm[gpu_class] = firm.get(gpu_class, 0) + amount
            taken.append(total)
            firm_taken.append(firm)
        return _TeamEnds(tuple(end for end, _ in mine), tuple(taken), tuple(firm_taken))
