"""The cycle's speed-ups change nothing it decides: the plan with every cache and shortcut on equals the plan
by the plain rules (``plan_cycle(..., speedups=False)``, :mod:`scheduler.core.speedups`). A stale cache, or a
shortcut that promised a wrong answer, makes the two differ. No monkeypatching: the switch is the engine's
own, and ``test_speedups_registry`` keeps every cache behind it."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from scheduler.core import Policy, Snapshot, plan_cycle
from scheduler.core.model.tables import FORGET
from scheduler.core.model.vocabulary import Priority
from scheduler.core.rules.fairshare import FairShare
from scheduler.core.speedups import Memo, current_memo
from scheduler.core.speedups.fairshare import RememberingFairShare
from scheduler.core.speedups.switch import fair_share, indexed_state, team_candidates
from scheduler.core.speedups.victims import Victims
from scheduler.sim.bench.synthetic import NOW, ClusterShape, synthetic_snapshot
from tests.scheduler.properties.builders import NOW as SMALL_NOW
from tests.scheduler.properties.test_cycle_properties import reclaim_worlds, snapshots

SHAPES = [
    ClusterShape(40, 600, seed=1),
    ClusterShape(48, 900, seed=2, teams=4),  # heavy pressure: few teams, long queues, much preemption
    ClusterShape(24, 700, seed=3, teams=3, gpus_per_node=4),
    # Production searches over large pools, MIG reconfigurations on several nodes. The largest cluster of the
    # core suite, slow-marked: `make test` runs it, the inner loop (-m "not slow") does not.
    pytest.param(ClusterShape(200, 2000, seed=5), marks=pytest.mark.slow),
]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s.nodes}x{s.gpus_per_node}-{s.pending}-t{s.teams}")
def test_plans_are_the_same_with_and_without_the_speedups(shape: ClusterShape) -> None:
    snapshot = synthetic_snapshot(shape)
    fast = plan_cycle(snapshot, Policy(), NOW)
    assert fast.evictions, "the shape must exercise preemption, or the comparison proves little"
    assert fast == plan_cycle(snapshot, Policy(), NOW, speedups=False)


def test_a_bounded_search_plans_the_same_with_and_without_the_speedups() -> None:
    """The search bound is a rule (it changes plans), so both paths apply it alike; heavy pressure, bound 5."""
    snapshot = synthetic_snapshot(ClusterShape(48, 900, seed=2, teams=4))
    bounded = Policy(preemption_search_per_team=5)
    fast = plan_cycle(snapshot, bounded, NOW)
    assert fast == plan_cycle(snapshot, bounded, NOW, speedups=False)
    unbounded = plan_cycle(snapshot, Policy(), NOW)
    assert len(fast.evictions) < len(unbounded.evictions), "the bound must bind here, or the comparison proves little"
    production = {job.id for job in snapshot.pending if job.priority == Priority.PRODUCTION}
    skipped = {w.job for w in fast.waiting if "no preemption tried" in w.reason}
    assert skipped and not skipped & production


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_random_small_clusters_plan_the_same_with_and_without_the_speedups(snapshot: Snapshot) -> None:
    assert plan_cycle(snapshot, Policy(), SMALL_NOW) == plan_cycle(snapshot, Policy(), SMALL_NOW, speedups=False)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reclaim_worlds())
def test_reclaim_plans_the_same_with_and_without_the_speedups(world: tuple[Snapshot, dict[str, int]]) -> None:
    snapshot, _ = world
    assert plan_cycle(snapshot, Policy(), SMALL_NOW) == plan_cycle(snapshot, Policy(), SMALL_NOW, speedups=False)


def test_a_disabled_memo_forgets_what_it_is_told_as_the_plain_tables_do() -> None:
    for table in (Memo(enabled=False).table(), FORGET.table()):
        table["key"] = 1
        assert table.get("key") is None and "key" not in table and table.setdefault("key", 2) == 2
        assert table["key"] == 2  # what the caller has just stored reads back: "if missing, store, return it"
    remembered = Memo().table()
    remembered["key"] = 1
    assert remembered.get("key") == 1


def test_the_switch_builds_the_plain_rules_off_and_the_rules_wrapped_by_their_speedups_on() -> None:
    snapshot = synthetic_snapshot(ClusterShape(8, 20, seed=1))
    for memo, kind, tracked in ((Memo(enabled=False), FairShare, False), (Memo(), RememberingFairShare, True)):
        state = indexed_state(snapshot, NOW, memo)
        fairness = fair_share(snapshot.teams, state, Policy(), memo)
        assert type(fairness) is kind
        assert state.index is not None and (state.index.idle is not None) is tracked
        job_id, slots = next(iter(state.placed.items()))  # the state's own cache: what occupying slots does
        assert (state.slot_ops(job_id, slots) is state.slot_ops(job_id, slots)) is tracked
        # Off, the preemption search asks the plain rule team by team; on, it reads the victims' memory.
        remembered = team_candidates(state, fairness, Policy(), NOW, memo)
        assert (None if remembered is None else type(remembered)) is (Victims if tracked else None)


def test_the_switch_holds_only_inside_the_cycle() -> None:
    with Memo(enabled=False).current():
        assert not current_memo().enabled
    assert current_memo().enabled
