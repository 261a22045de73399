"""The reservation search with kept node times (:mod:`scheduler.core.speedups.freetimes`) finds what the plain search
finds: the same start and GPUs for every job, through evictions, binds, holds and their undo, and the same plans in
a steady cycle, where most searches end in a quota refusal."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from scheduler.core import Policy, Snapshot, plan_cycle
from scheduler.core.decisions.reservation import Reservations
from scheduler.core.decisions.screening import screen
from scheduler.core.model.demand import DemandKind
from scheduler.core.model.snapshot import Job, Request, Running
from scheduler.core.model.vocabulary import PRIORITY_INDEX, BlockerKind, Priority
from scheduler.core.placement.options import options_for
from scheduler.core.planning.run import Run
from scheduler.core.speedups.freetimes import KeptReservations, NodeTimes
from scheduler.core.speedups.memo import Memo
from scheduler.core.speedups.sharedsearch import SharedSearches
from scheduler.core.speedups.switch import fair_share, indexed_state, reservations
from scheduler.sim.bench.synthetic import NOW, ClusterShape, synthetic_snapshot


def steady(shape: ClusterShape) -> Snapshot:
    """The cycle after ``shape``'s cluster, started empty, bound what it could: full, its queue still waiting (the
    live loop's steady state)."""
    snapshot = synthetic_snapshot(shape)
    jobs = [r.job for r in snapshot.running] + list(snapshot.pending)
    snapshot = replace(snapshot, running=(), pending=tuple(j for j in jobs if j.request.gpu_milli is None))
    plan = plan_cycle(snapshot, Policy(), NOW)
    bound = {b.job: b.slots for b in plan.binds}
    rejected = {r.job for r in plan.rejections}
    by_id = {j.id: j for j in snapshot.pending}
    running = tuple(
        Running(job=by_id[j], slots=s, started_at=NOW - 600 * (i % 7)) for i, (j, s) in enumerate(bound.items())
    )
    waiting = tuple(j for j in snapshot.pending if j.id not in bound and j.id not in rejected)
    return replace(snapshot, running=running, pending=waiting)


@pytest.mark.parametrize(
    "shape",
    [ClusterShape(60, 900, seed=3), ClusterShape(40, 800, seed=8, teams=4), ClusterShape(30, 500, seed=11, teams=2)],
    ids=lambda s: f"{s.nodes}-{s.pending}-t{s.teams}",
)
def test_a_steady_cycle_plans_the_same_with_and_without_kept_times(shape: ClusterShape) -> None:
    snapshot = steady(shape)
    policy = Policy(reservation_depth=8)
    fast = plan_cycle(snapshot, policy, NOW + 10)
    assert fast == plan_cycle(snapshot, policy, NOW + 10, speedups=False)
    kinds = {w.blocker for w in fast.waiting}
    assert BlockerKind.RESERVED in kinds, "reservations must be made, or the comparison proves little"
    assert BlockerKind.QUOTA in kinds, "quota refusals must be found, or the comparison proves little"


def _run(snapshot: Snapshot, policy: Policy) -> tuple[Run, list[Job]]:
    memo = Memo()
    state = indexed_state(snapshot, NOW + 10, memo)
    fairness = fair_share(snapshot.teams, state, policy, memo)
    pending, _ = screen(snapshot, state, policy)
    return Run(state, fairness, policy, NOW + 10, snapshot, pending), list(pending)


@pytest.mark.parametrize("fairness", [True, False], ids=["fair-share", "plain-order"])
def test_every_search_finds_what_the_plain_search_finds_through_changes_and_their_undo(fairness: bool) -> None:
    snapshot = steady(ClusterShape(40, 700, seed=5, teams=4))
    production = [replace(j, id=f"{j.id}-prod", priority=Priority.PRODUCTION) for j in snapshot.pending[:20]]
    policy = Policy(reservation_depth=1000, fairness=fairness)
    run, pending = _run(replace(snapshot, pending=snapshot.pending + tuple(production)), policy)
    kept = run.reservations
    assert isinstance(kept, KeptReservations)
    rng = random.Random(5)
    compared = reached = 0
    placed = sorted(run.state.running)
    for step in range(120):
        job = rng.choice(pending)
        options = options_for(run.index, job, policy)
        if step % 9 == 0 and options:
            kept.reserve(job, options)  # holds GPUs, and later searches skip the ones it took
        statement = run.state.begin() if step % 3 == 0 else None
        for victim in rng.sample(placed, 3):
            if victim in run.state.placed:
                run.state.remove(victim)
        by_model: dict[str, tuple[int, list[str]]] = {}
        for option in options:
            if option.demand.kind == DemandKind.WHOLE:
                _, names = by_model.setdefault(option.model, (option.demand.gpus, []))
                names.extend(run.index.groups.get(option.group, ()))
        for per_replica, names in by_model.values():
            ordered = sorted(set(names))
            expected = Reservations._earliest(kept, job, ordered, per_replica)
            # The kept times alone, beneath the shared searches (speedups.sharedsearch) the cycle builds on them.
            assert KeptReservations._earliest(kept, job, ordered, per_replica) == expected
            assert kept._earliest(job, ordered, per_replica) == expected
            reached += sum(kept._nodes[name].reached_by(job, True, True) for name in ordered)
            compared += 1
        if statement is not None:
            statement.rollback()
    assert compared > 50 and reached, "searches must run, some over nodes the job reaches"


def test_what_a_job_reaches_on_a_node() -> None:
    times = [(1.0, 0)]
    job = Job(id="j", team="a", request=Request(gpus=1), priority=Priority.NORMAL, submitted_at=100.0)
    normal, low = PRIORITY_INDEX[Priority.NORMAL], PRIORITY_INDEX[Priority.LOW]
    assert not NodeTimes(times, True, frozenset({"b"}), {}).reached_by(job, True, True)
    assert NodeTimes(times, True, frozenset({"a"}), {}).reached_by(job, False, True)  # its team's preemptible work
    # Another team's borrowed work: reclaim takes it; else it yields only when started later and queued behind.
    late_low = {low: (200.0, 50.0)}
    assert NodeTimes(times, True, frozenset({"b"}), late_low).reached_by(job, True, True)
    assert NodeTimes(times, True, frozenset({"b"}), late_low).reached_by(job, False, True)
    assert not NodeTimes(times, True, frozenset({"b"}), late_low).reached_by(job, False, False)
    assert not NodeTimes(times, True, frozenset({"b"}), {low: (50.0, 50.0)}).reached_by(job, False, True)
    assert NodeTimes(times, True, frozenset({"b"}), {normal: (200.0, 150.0)}).reached_by(job, False, True)
    assert not NodeTimes(times, True, frozenset({"b"}), {normal: (200.0, 90.0)}).reached_by(job, False, True)
    assert not NodeTimes(times, True, frozenset({"b"}), {0: (200.0, 150.0)}).reached_by(job, False, True)
    production = replace(job, priority=Priority.PRODUCTION)
    assert NodeTimes(times, True, frozenset(), {}).reached_by(production, False, True)  # lower work, by production
    assert not NodeTimes(times, False, frozenset(), {}).reached_by(production, False, True)  # production alone


def test_the_switch_builds_the_plain_reservations_off_and_the_kept_shared_ones_on() -> None:
    snapshot = synthetic_snapshot(ClusterShape(8, 20, seed=1))
    for memo, kind in ((Memo(enabled=False), Reservations), (Memo(), SharedSearches)):
        state = indexed_state(snapshot, NOW, memo)
        fairness = fair_share(snapshot.teams, state, Policy(), memo)
        built = reservations(state, fairness, Policy(), NOW, lambda j, h: NOW, lambda h: NOW, lambda s: None, memo)
        assert type(built) is kind
