"""No whole-turn repeat for a shape that already failed at the same state (:mod:`scheduler.core.speedups.repeat`): a
job past its team's search bound is given an earlier job's blocker without its steps only when its steps would end
alike, and the plans with the speed-ups on equal the plain rules' — on synthetic clusters whose queues are mostly
past the bound, in the live loop's steady state, and on random small clusters."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings

from scheduler.core import Policy, Snapshot, plan_cycle
from scheduler.core.decisions.reservation import Reservations
from scheduler.core.decisions.screening import screen
from scheduler.core.model.explain import Blocker
from scheduler.core.model.snapshot import Job
from scheduler.core.model.tables import FORGET
from scheduler.core.model.vocabulary import BlockerKind, JobKind, Priority
from scheduler.core.placement.options import options_for
from scheduler.core.planning.run import Run
from scheduler.core.planning.steps import Turn, steps_for, take_turn
from scheduler.core.speedups.memo import Memo
from scheduler.core.speedups.repeat import EveryTurn, TurnRepeats
from scheduler.core.speedups.switch import fair_share, indexed_state, turn_repeats
from scheduler.sim.bench.synthetic import NOW, ClusterShape, synthetic_snapshot
from tests.scheduler.core.speedups.test_backfill_memory import Counting, asks, held
from tests.scheduler.core.speedups.test_freetimes import steady
from tests.scheduler.properties.builders import H100, job, node, running, snapshot, team, whole
from tests.scheduler.properties.builders import NOW as SMALL_NOW
from tests.scheduler.properties.test_cycle_properties import snapshots

# Past the bound at once (0), or after a few (3), with and without reservations.
POLICIES = [
    Policy(preemption_search_per_team=0),
    Policy(preemption_search_per_team=3, reservation_depth=8),
    Policy(preemption_search_per_team=0, reservation_depth=0),
]


@pytest.mark.parametrize("policy", POLICIES, ids=["bound-0", "bound-3-depth-8", "bound-0-depth-0"])
@pytest.mark.parametrize(
    "shape",
    [ClusterShape(40, 600, seed=1), ClusterShape(48, 900, seed=2, teams=4), ClusterShape(24, 700, seed=3, teams=3)],
    ids=lambda s: f"{s.nodes}-{s.pending}-t{s.teams}",
)
def test_plans_are_the_same_with_and_without_repeated_turns(shape: ClusterShape, policy: Policy) -> None:
    snapshot = synthetic_snapshot(shape)
    fast = plan_cycle(snapshot, policy, NOW)
    assert fast == plan_cycle(snapshot, policy, NOW, speedups=False)
    assert {BlockerKind.CAPACITY, BlockerKind.QUOTA} <= {w.blocker for w in fast.waiting}


@pytest.mark.parametrize("shape", [ClusterShape(40, 800, seed=8, teams=4), ClusterShape(30, 500, seed=11, teams=2)])
def test_a_steady_cycle_plans_the_same_with_and_without_repeated_turns(shape: ClusterShape) -> None:
    snapshot = steady(shape)
    for policy in (Policy(), Policy(preemption_search_per_team=2, reservation_depth=8)):
        assert plan_cycle(snapshot, policy, NOW + 10) == plan_cycle(snapshot, policy, NOW + 10, speedups=False)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_random_small_clusters_plan_the_same_with_and_without_repeated_turns(snapshot: Snapshot) -> None:
    for bound in (0, 1):
        policy = Policy(preemption_search_per_team=bound)
        assert plan_cycle(snapshot, policy, SMALL_NOW) == plan_cycle(snapshot, policy, SMALL_NOW, speedups=False)


# -- the shortcut alone ------------------------------------------------------------------------------------------


class Turns:
    """The cycle's turns (``planning.cycle._Turns``, without production's second turn) over a small cluster,
    counting the turns whose steps ran."""

    def __init__(self, snap: Snapshot, policy: Policy) -> None:
        memo = Memo()
        state = indexed_state(snap, SMALL_NOW, memo)
        fairness = fair_share(snap.teams, state, policy, memo)
        pending, _ = screen(snap, state, policy)
        self.run = Run(state, fairness, policy, SMALL_NOW, snap, pending)
        repeats = turn_repeats(state, self.run.reservations, policy, self.run.past_bound, self.run.blockers, memo)
        assert isinstance(repeats, TurnRepeats)
        self.repeats = repeats
        self.ran = 0

    def take(self, job: Job) -> Blocker | None:
        run = self.run
        run.enter(job)
        run.blockers.pop(job.id, None)
        turn = Turn(job, options_for(run.index, job, run.policy))
        self.repeats.take(job, lambda: self._steps(turn))
        return run.blockers.get(job.id)

    def _steps(self, turn: Turn) -> None:
        self.ran += 1
        take_turn(self.run, turn, steps_for(turn.job))


PAST = Policy(preemption_search_per_team=0, reservation_depth=0)


def full_but(free: int) -> Snapshot:
    """Node a (8 H100), all but ``free`` GPUs held by team u's firm work; team t guarantees 8."""
    busy = [running(job(f"r{g}", "u", preemptible=False), (whole("a", g),)) for g in range(8 - free)]
    return snapshot([node("a", H100)], (), [team("t", guaranteed=8), team("u", guaranteed=8)], busy)


def test_a_job_that_fits_nowhere_repeats_an_earlier_one_while_nothing_is_freed() -> None:
    turns = Turns(full_but(2), PAST)
    first = turns.take(job("p1", "t", gpus=4))
    assert first is not None and first.kind == BlockerKind.CAPACITY and turns.ran == 1
    assert turns.take(job("p2", "t", gpus=4)) == first and turns.ran == 1  # repeated
    assert turns.take(job("small", "v", gpus=1)) is None and turns.ran == 2  # binds: takes capacity, frees none
    assert turns.take(job("p3", "t", gpus=4)) == first and turns.ran == 2  # still repeated
    turns.run.state.remove("r0")  # capacity freed
    assert turns.take(job("p4", "t", gpus=4)) == first and turns.ran == 3  # asked again (and still fits nowhere)


def test_a_quota_refusal_repeats_only_at_an_equal_state() -> None:
    snap = replace(full_but(4), teams=(team("t", guaranteed=1), team("u", guaranteed=8)))
    turns = Turns(snap, PAST)
    first = turns.take(job("p1", "t", gpus=2, preemptible=False))
    assert first is not None and first.kind == BlockerKind.QUOTA and turns.ran == 1
    assert turns.take(job("p2", "t", gpus=2, preemptible=False)) == first and turns.ran == 1
    assert turns.take(job("other", "v", gpus=1)) is None and turns.ran == 2  # a bind: usage changed
    assert turns.take(job("p3", "t", gpus=2, preemptible=False)) == first and turns.ran == 3  # asked again


def test_only_jobs_of_the_same_key_past_the_bound_other_than_production_repeat() -> None:
    turns = Turns(full_but(0), PAST)
    turns.take(job("p1", "t", gpus=4))
    turns.take(job("other-team", "v", gpus=4))
    turns.take(job("other-shape", "t", gpus=2))
    turns.take(job("firm", "t", gpus=4, preemptible=False))
    assert turns.ran == 4
    production = job("prod", "t", gpus=4, kind=JobKind.INFERENCE, priority=Priority.PRODUCTION, preemptible=False)
    turns.take(production)
    turns.take(replace(production, id="prod2"))
    assert turns.ran == 6  # production takes its whole turn every time
    within = Turns(full_but(0), Policy(reservation_depth=0))  # the default bound: every job here may search
    within.take(job("p1", "t", gpus=4))
    within.take(job("p2", "t", gpus=4))
    assert within.ran == 2


def test_a_turn_that_may_reserve_or_changed_the_state_is_not_remembered() -> None:
    turns = Turns(full_but(0), Policy(preemption_search_per_team=0))  # reservations on: whole GPUs may reserve
    reserving = job("p1", "t", gpus=4)
    turns.run.enter(reserving)
    turns.run.blockers[reserving.id] = Blocker(BlockerKind.CAPACITY)
    turns.repeats.took(reserving, turns.repeats._key(reserving) or (), turns.repeats.stamp())
    assert turns.repeats.repeated(reserving, turns.repeats._key(reserving) or ()) is None
    other = Turns(full_but(0), PAST)
    moved = job("p1", "t", gpus=4)
    other.run.enter(moved)
    other.run.blockers[moved.id] = Blocker(BlockerKind.CAPACITY)
    before = other.repeats.stamp()
    other.run.state.remove("r0")  # the turn changed the state
    key = other.repeats._key(moved)
    assert key is not None
    other.repeats.took(moved, key, before)
    assert other.repeats.repeated(moved, key) is None
    other.run.blockers[moved.id] = Blocker(BlockerKind.RESERVED, "a", SMALL_NOW + 60)  # not an outcome to repeat
    other.repeats.took(moved, key, other.repeats.stamp())
    assert other.repeats.repeated(moved, key) is None


def test_a_held_reservation_without_a_remembered_failure_stops_the_repeat() -> None:
    _, reservations = held(Memo())
    small = job("small", "u", gpus=4)
    assert not reservations.backfill_known_unplaced(small)  # backfill would choose with the hold lifted
    assert asks(reservations, small, Counting()) == 1  # nothing fitted: remembered per placement shape
    assert reservations.backfill_known_unplaced(small)
    assert reservations.backfill_known_unplaced(job("alike", "v", gpus=4))
    assert not reservations.backfill_known_unplaced(job("other", "u", gpus=3))
    _, refusing = held(Memo())
    assert asks(refusing, small, Counting(refused=True)) == 1  # the quota refused: per team and preemption shape
    assert refusing.backfill_known_unplaced(small)
    assert not refusing.backfill_known_unplaced(job("alike", "v", gpus=4))
    _, forgetting = held(FORGET)
    asks(forgetting, small, Counting())
    assert not forgetting.backfill_known_unplaced(small)  # the speed-ups off remember nothing


def test_reservations_holding_nothing_never_stop_the_repeat() -> None:
    state, reservations = held(Memo())
    assert (
        Reservations(state, reservations.index, Policy(), SMALL_NOW, lambda j, h: SMALL_NOW, lambda s: None).made == []
    )
    empty = replace(reservations.made[0], held=())
    reservations.made[0] = empty
    assert reservations.backfill_known_unplaced(job("small", "u", gpus=4))


def test_the_switch_takes_every_turn_with_the_speedups_off() -> None:
    snap = full_but(0)
    memo = Memo(enabled=False)
    state = indexed_state(snap, SMALL_NOW, memo)
    fairness = fair_share(snap.teams, state, PAST, memo)
    run = Run(state, fairness, PAST, SMALL_NOW, snap, ())
    plain = turn_repeats(state, run.reservations, PAST, run.past_bound, run.blockers, memo)
    assert isinstance(plain, EveryTurn)
    ran: list[str] = []
    plain.take(job("p1"), lambda: ran.append("p1"))
    plain.take(job("p2"), lambda: ran.append("p2"))
    assert ran == ["p1", "p2"]


def test_a_turn_that_left_a_held_reservation_unasked_is_not_remembered() -> None:
    turns = Turns(full_but(2), Policy(preemption_search_per_team=0, reservation_depth=1))
    reserved = turns.take(job("big", "t", gpus=8))
    assert reserved is not None and reserved.kind == BlockerKind.RESERVED and turns.run.reservations.made[0].held
    # Firm and longer than the reservation's wait: it may not backfill, so its turn leaves the hold unasked.
    turns.take(job("long1", "t", gpus=4, preemptible=False, duration_s=1e7))
    turns.take(job("long2", "t", gpus=4, preemptible=False, duration_s=1e7))
    assert turns.ran == 3
    # Ends before the reservation starts: it may backfill, and the choice with the hold lifted found nothing.
    turns.take(job("short1", "t", gpus=4, duration_s=5))
    turns.take(job("short2", "t", gpus=4, duration_s=5))
    assert turns.ran == 4
