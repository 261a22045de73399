"""The placed jobs filed by team (:mod:`scheduler.core.speedups.teamplaced`) are the scan's: each team's, in the
state's order, through evictions, binds and their undo."""

from __future__ import annotations

import random

from scheduler.core.model.snapshot import Slots
from scheduler.core.speedups.memo import Memo
from scheduler.core.speedups.switch import indexed_state, team_placed
from scheduler.core.speedups.teamplaced import TeamPlaced
from scheduler.sim.bench.synthetic import NOW, ClusterShape, synthetic_snapshot


def test_each_team_s_placed_jobs_are_the_scan_s_through_changes_and_their_undo() -> None:
    snapshot = synthetic_snapshot(ClusterShape(20, 100, seed=4, teams=5))
    state = indexed_state(snapshot, NOW, Memo())
    kept = TeamPlaced(state)
    plain = team_placed(state, Memo(enabled=False))
    teams = [*sorted({team.name for team in snapshot.teams}), "nobody"]
    rng = random.Random(4)

    def scanned(team: str) -> list[tuple[str, Slots]]:
        return [(job_id, slots) for job_id, slots in plain(team) if state.jobs[job_id].team == team]

    for step in range(40):
        statement = state.begin() if step % 2 else None
        for victim in rng.sample(sorted(state.placed), 2):
            removed = state.remove(victim)
            if step % 5 == 0:
                state.place(state.jobs[victim], removed)  # put back: last in the state's order now
        for team in teams:
            assert list(kept.of(team)) == scanned(team)
        if statement is not None:
            statement.rollback()
            for team in teams:
                assert list(kept.of(team)) == scanned(team)
    assert not list(kept.of("nobody"))


def test_the_switch_files_by_team_only_while_the_memo_is_on() -> None:
    state = indexed_state(synthetic_snapshot(ClusterShape(4, 10, seed=1)), NOW, Memo())
    assert getattr(team_placed(state, Memo()), "__self__", None).__class__ is TeamPlaced
    assert list(team_placed(state, Memo(enabled=False))("any")) == list(state.placed.items())
