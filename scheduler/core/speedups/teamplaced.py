"""Each team's placed jobs, kept while the state stands: what the quota's look-ahead reads.

:meth:`~scheduler.core.planning.run.Run.admits_at` (a reservation's rule 1, and the explanation's ETA) asks whether a
job's quota admits it once its team's work expected to end by then has ended; the plain way scans every placed job
of the cluster for the team's, and in a full cluster at 5,000 nodes each question scanned some 30,000 jobs.
:class:`TeamPlaced` files the placed jobs by team in one scan, in the state's order, and keeps them while the
capacity index's ``version`` stands (it moves on every place and remove; a rolled-back Statement restores it, and the
state is then exactly as it was). ``tests/scheduler/core/speedups/test_teamplaced.py`` compares it with the scan.
"""

from __future__ import annotations

from collections.abc import Iterable

from scheduler.core.model.snapshot import Slots
from scheduler.core.placement.index import IndexedClusterState


def every_placed(state: IndexedClusterState, team: str) -> Iterable[tuple[str, Slots]]:
    """The plain answer: every placed job with its slots (the caller skips other teams')."""
    return state.placed.items()


class TeamPlaced:
    """``of(team)``: the placed jobs of ``team`` with their slots, in the state's order (module doc)."""

    def __init__(self, state: IndexedClusterState) -> None:
        assert state.index is not None
        self.state = state
        self.index = state.index
        self._version = -1
        self._by_team: dict[str, list[tuple[str, Slots]]] = {}

    def of(self, team: str) -> Iterable[tuple[str, Slots]]:
        if self.index.version != self._version:
            self._version = self.index.version
            self._by_team = {}
            jobs = self.state.jobs
            for job_id, slots in self.state.placed.items():  # a placed job is always one of the state's jobs
                self._by_team.setdefault(jobs[job_id].team, []).append((job_id, slots))
        return self._by_team.get(team, ())
