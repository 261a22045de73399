"""A team's usage at a later time (speedups.ahead.UsageAhead) is the plain rule's (Run.usage_at with the speed-ups
off) at every time, before and after the state changes, and after a rollback."""

from __future__ import annotations

from scheduler.core import Policy
from scheduler.core.model.snapshot import Job, Request, Slot, Snapshot
from scheduler.core.planning.run import Run
from scheduler.core.speedups import Memo
from scheduler.core.speedups.ahead import UsageAhead
from scheduler.core.speedups.switch import fair_share, indexed_state
from scheduler.sim.bench.synthetic import NOW, ClusterShape, synthetic_snapshot


def run_of(snapshot: Snapshot, enabled: bool) -> Run:
    memo = Memo(enabled)
    with memo.current():
        state = indexed_state(snapshot, NOW, memo)
        fairness = fair_share(snapshot.teams, state, Policy(), memo)
        return Run(state, fairness, Policy(), NOW, snapshot, snapshot.pending)


def times(run: Run) -> list[float]:
    """Every placed job's expected end, a moment before it and after it, now, and never."""
    ends = sorted({run.expected_end(job_id) for job_id in run.state.placed})
    return [NOW, *ends, *(end - 0.5 for end in ends), *(end + 0.5 for end in ends), float("inf")]


def assert_same(fast: Run, plain: Run) -> None:
    teams = sorted({team.name for team in plain.fairness.teams.values()} | {"nobody"})
    for at in times(plain):
        for team in teams:
            assert fast.usage_at(team, at) == plain.usage_at(team, at), (team, at)


def test_the_usage_ahead_is_the_plain_rules_at_every_time() -> None:
    snapshot = synthetic_snapshot(ClusterShape(12, 60, seed=4, teams=3))
    fast, plain = run_of(snapshot, True), run_of(snapshot, False)
    assert isinstance(fast._ahead, UsageAhead) and plain._ahead is None
    placed = [plain.state.jobs[job_id] for job_id in plain.state.placed]
    assert {job.preemptible for job in placed} == {True, False}, "both usages must be exercised"
    assert_same(fast, plain)


def test_the_usage_ahead_follows_placements_and_rollbacks() -> None:
    snapshot = synthetic_snapshot(ClusterShape(12, 60, seed=4, teams=3))
    fast, plain = run_of(snapshot, True), run_of(snapshot, False)
    free = [gpu for gpu in plain.state.gpus.values() if gpu.idle and not gpu.layout][:2]
    team = snapshot.teams[0].name
    first, second = (Job(id=f"new-{n}", team=team, request=Request(gpus=1), duration_s=60.0) for n in (1, 2))
    assert_same(fast, plain)
    for run in (fast, plain):
        run.state.place(first, ((Slot(free[0].node.name, free[0].index),),))
    assert_same(fast, plain)  # the new job counts, and ends within a minute
    assert fast.usage_at(team, NOW + 120.0) != fast.usage_at(team, NOW)
    statement = fast.state.begin()
    for run in (fast, plain):
        run.state.place(second, ((Slot(free[1].node.name, free[1].index),),))
    assert_same(fast, plain)
    statement.rollback()
    plain.state.remove(second.id)
    assert_same(fast, plain)
