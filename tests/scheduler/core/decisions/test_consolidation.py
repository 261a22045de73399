"""Consolidation (scheduler/core/decisions/consolidation.py): running production on larger capacity than its right
size is moved to a free right-sized slice, after every pending turn, within its bounds; planned through
``plan_cycle`` with the speed-ups on and off (the plans must be equal)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.core.decisions import consolidation
from scheduler.core.model.cluster_state import ClusterState
from scheduler.core.model.plan import Move, Plan
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, MigLayout, Node, Request, Running, Slot, Slots, Snapshot, Team
from scheduler.core.model.vocabulary import JobKind, Priority
from scheduler.core.planning.cycle import plan_cycle

NOW = 10_000.0
A100 = "A100-SXM4-80GB"
SPLIT: MigLayout = (("4g.40gb", 0), ("3g.40gb", 4))
ALL_1G: MigLayout = tuple(("1g.10gb", start) for start in range(7))
POLICY = Policy()
RECUTS = Policy(consolidation_reconfigures=True)
TEAMS = (Team("svc", guaranteed=(("any", 4.0),)), Team("lab", guaranteed=(("any", 4.0),)))


def service(job_id: str = "p1", profile: str = "4g.40gb", **options: object) -> Job:
    fields: dict[str, object] = {"kind": JobKind.INFERENCE, "priority": Priority.PRODUCTION, **options}
    return Job(id=job_id, team="svc", request=Request(mig_profile=profile), **fields)  # type: ignore[arg-type]


def whole(node: str, gpu: int = 0) -> Slots:
    return ((Slot(node, gpu),),)


def instance(node: str, profile: str, start: int, gpu: int = 0) -> Slots:
    return ((Slot(node, gpu, mig_profile=profile, mig_start=start),),)


def mig_node(name: str = "mig-1", layout: MigLayout = SPLIT, gpus: int = 1, model: str = A100) -> Node:
    return Node(name, model, gpus, mig=(layout,) * gpus)


def whole_node(name: str = "whole-1", gpus: int = 1, model: str = A100) -> Node:
    return Node(name, model, gpus)


def running(job: Job, slots: Slots, started_at: float = 0.0, **options: object) -> Running:
    return Running(job=job, slots=slots, started_at=started_at, **options)  # type: ignore[arg-type]


def plan(
    nodes: tuple[Node, ...],
    runs: tuple[Running, ...],
    pending: tuple[Job, ...] = (),
    policy: Policy = POLICY,
    now: float = NOW,
) -> Plan:
    """The cycle's plan, checked equal with the speed-ups off."""
    snapshot = Snapshot(nodes=nodes, teams=TEAMS, running=runs, pending=pending)
    planned = plan_cycle(snapshot, policy, now)
    assert plan_cycle(snapshot, policy, now, speedups=False) == planned
    return planned


def test_production_on_a_whole_gpu_moves_to_a_free_right_sized_instance() -> None:
    p1 = service()
    planned = plan((mig_node(), whole_node()), (running(p1, whole("whole-1")),))
    assert planned.moves == (Move("p1", instance("mig-1", "4g.40gb", 0), whole("whole-1")),)
    assert not planned.binds and not planned.evictions
    recut = plan((mig_node(), whole_node()), (running(p1, whole("whole-1")),), policy=RECUTS)
    assert recut.moves == planned.moves and recut.reconfigurations == ()  # a free slice: no demand


def test_a_larger_instance_moves_to_the_right_size_and_memory_counts() -> None:
    """A 2g.20gb service on a 4g.40gb instance moves; a 1g.10gb service on a 1g.20gb instance (as many compute
    slices, more memory) moves too."""
    two = service("p2", "2g.20gb")
    one = service("p1", "1g.10gb")
    nodes = (
        mig_node("big", SPLIT),
        mig_node("mem", (("1g.20gb", 0), ("3g.40gb", 4))),
        mig_node("free", (("2g.20gb", 0), ("1g.10gb", 2), ("4g.40gb", 3))),
    )
    runs = (running(two, instance("big", "4g.40gb", 0)), running(one, instance("mem", "1g.20gb", 0)))
    moves = {move.job: move for move in plan(nodes, runs).moves}
    assert moves["p2"].slots == instance("free", "2g.20gb", 0)
    assert moves["p1"].slots == instance("free", "1g.10gb", 2)


def test_right_sized_or_not_production_inference_stays() -> None:
    """A service on its own profile, a 7g.80gb service on a whole GPU (the same capacity), production training, a
    high-priority service and a service that asks for whole GPUs never move."""
    nodes = (mig_node("mig-1", ALL_1G, gpus=2), whole_node("whole-1", gpus=6))
    runs = (
        running(service("sized", "1g.10gb"), instance("mig-1", "1g.10gb", 0)),
        running(service("seven", "7g.80gb"), whole("whole-1", 0)),
        running(service("train", "1g.10gb", kind=JobKind.TRAINING), whole("whole-1", 1)),
        running(service("high", "1g.10gb", priority=Priority.HIGH), whole("whole-1", 2)),
        running(
            Job("gpus", "svc", Request(gpus=1), kind=JobKind.INFERENCE, priority=Priority.PRODUCTION),
            whole("whole-1", 3),
        ),
    )
    assert plan(nodes, runs).moves == ()


def test_an_opted_out_job_stays() -> None:
    p1 = service(consolidate=False)
    assert plan((mig_node(), whole_node()), (running(p1, whole("whole-1")),)).moves == ()


def test_a_job_already_moving_does_not_move_again_and_holds_both_placements() -> None:
    """A move under way: the job holds its old placement too, so nothing binds there, and no second move starts."""
    p1 = service()
    moving = running(p1, whole("whole-1"), moving_from=whole("whole-2"))
    train = Job("train", "lab", Request(gpus=1), kind=JobKind.TRAINING)
    planned = plan((mig_node(), whole_node("whole-1"), whole_node("whole-2")), (moving,), (train,))
    assert planned.moves == ()
    assert planned.binds == ()


def test_cluster_state_counts_the_old_placement_of_a_move_as_held() -> None:
    p1 = service()
    snapshot = Snapshot(
        nodes=(mig_node(), whole_node()),
        teams=TEAMS,
        running=(running(p1, instance("mig-1", "4g.40gb", 0), moving_from=whole("whole-1")),),
    )
    state = ClusterState(snapshot)
    assert not state.slot_free(Slot("whole-1", 0))
    assert state.job_units("p1") == {"A100": 11000}
    state.remove("p1")
    assert state.slot_free(Slot("whole-1", 0)) and state.slot_free(Slot("mig-1", 0, "4g.40gb", 0))


def test_a_move_in_the_state_rolls_back_exactly_and_refuses_a_busy_slot() -> None:
    p1 = service()
    state = ClusterState(
        Snapshot(nodes=(mig_node(), whole_node()), teams=TEAMS, running=(running(p1, whole("whole-1")),))
    )
    statement = state.begin()
    state.move("p1", instance("mig-1", "4g.40gb", 0))
    assert state.placed["p1"] == instance("mig-1", "4g.40gb", 0) + whole("whole-1")
    statement.rollback()
    assert state.placed["p1"] == whole("whole-1")
    assert state.slot_free(Slot("mig-1", 0, "4g.40gb", 0))
    with pytest.raises(ValueError, match="not free"):
        state.move("p1", whole("whole-1"))


def test_pending_work_of_equal_priority_takes_the_slice_first() -> None:
    """Moves come after every pending turn: a pending production service takes the one free 4g.40gb instance."""
    p1 = service()
    p2 = service("p2", submitted_at=NOW)
    planned = plan((mig_node(), whole_node()), (running(p1, whole("whole-1")),), (p2,))
    assert [bind.job for bind in planned.binds] == ["p2"]
    assert planned.moves == ()


def test_the_way_back_moves_before_pending_work_within_the_per_cycle_budget() -> None:
    """A 1g.10gb service on a whole GPU (beyond the fallback's cap) moves to the free 1g.10gb instance before the
    pending turns, and a pending 1g.10gb service finds it taken; the way back's moves count against the per-cycle
    budget before the others'."""
    small = running(service("p1", "1g.10gb"), whole("whole-1", 0))
    nodes = (mig_node("mig-1", (("1g.10gb", 0),)), mig_node("mig-2", SPLIT), whole_node("whole-1", gpus=2))
    planned = plan(nodes, (small,), (service("p2", "1g.10gb", submitted_at=NOW),))
    assert [(m.job, m.slots) for m in planned.moves] == [("p1", instance("mig-1", "1g.10gb", 0))]
    # p2 then starts oversized on mig-2's 3g.40gb, its way back the change of whole-1's idle GPU.
    assert [(b.job, b.slots) for b in planned.binds] == [("p2", instance("mig-2", "3g.40gb", 4))]
    assert [c.node for c in planned.reconfigurations] == ["whole-1"]
    large = running(service("p3"), whole("whole-1", 1), started_at=-100.0)  # within twice: moves after the turns
    assert [m.job for m in plan(nodes, (small, large)).moves] == ["p1", "p3"]
    assert [m.job for m in plan(nodes, (small, large), policy=replace(POLICY, moves_per_cycle=1)).moves] == ["p1"]


def test_hysteresis_a_job_oversized_for_fewer_cycles_stays() -> None:
    p1 = service()
    nodes = (mig_node(), whole_node())
    young = running(p1, whole("whole-1"), started_at=NOW - 2 * POLICY.cycle_s)
    assert plan(nodes, (young,)).moves == ()
    aged = running(p1, whole("whole-1"), started_at=NOW - 3 * POLICY.cycle_s)
    assert len(plan(nodes, (aged,)).moves) == 1


def test_interval_and_per_job_budget() -> None:
    """A job moved in the last consolidation_interval_s, or moves_per_job_per_day times in the last day, stays."""
    p1 = service()
    nodes = (mig_node(), whole_node())
    recent = running(p1, whole("whole-1"), moved_at=(NOW - 60.0,))
    assert plan(nodes, (recent,)).moves == ()
    earlier = running(p1, whole("whole-1"), moved_at=(NOW - 3700.0,))
    assert len(plan(nodes, (earlier,)).moves) == 1
    spent = running(p1, whole("whole-1"), moved_at=(NOW - 20_000.0, NOW - 10_000.0, NOW - 5000.0))
    assert plan(nodes, (spent,)).moves == ()
    yesterday = running(p1, whole("whole-1"), moved_at=(NOW - 90_000.0, NOW - 10_000.0, NOW - 5000.0))
    assert len(plan(nodes, (yesterday,), now=NOW).moves) == 1


def test_per_cycle_budget_takes_the_largest_then_the_longest_running() -> None:
    nodes = (mig_node("mig-1", SPLIT, gpus=3), whole_node("whole-1", gpus=3))
    runs = (
        running(service("a"), whole("whole-1", 0), started_at=500.0),
        running(service("b"), whole("whole-1", 1), started_at=100.0),
        running(service("c"), whole("whole-1", 2), started_at=50.0),
    )
    policy = replace(POLICY, moves_per_cycle=2)
    assert [move.job for move in plan(nodes, runs, policy=policy).moves] == ["c", "b"]
    assert plan(nodes, runs, policy=replace(POLICY, moves_per_cycle=0)).moves == ()
    assert plan(nodes, runs, policy=replace(POLICY, mig=False)).moves == ()


def test_a_move_stays_in_the_gpu_class_and_gives_back_more_than_it_takes() -> None:
    """No free instance in the job's class: it stays (an H100 instance is another class's quota)."""
    p1 = service(gpu_model=None)
    nodes = (mig_node("h100", (("4g.40gb", 0), ("3g.40gb", 4)), model="H100-SXM5-80GB"), whole_node())
    assert plan(nodes, (running(p1, whole("whole-1")),)).moves == ()


def test_an_evicted_or_moved_job_is_no_candidate() -> None:
    """Rule 1 reads the state: a job evicted this cycle (not placed) is no candidate."""
    p1 = service()
    snapshot = Snapshot(nodes=(mig_node(), whole_node()), teams=TEAMS, running=(running(p1, whole("whole-1")),))
    state = ClusterState(snapshot)
    assert [c.job.id for c in consolidation.candidates(state, POLICY, NOW)] == ["p1"]
    state.remove("p1")
    assert consolidation.candidates(state, POLICY, NOW) == []


def test_an_oversized_job_with_no_free_slice_asks_for_a_reconfiguration_of_an_idle_mig_gpu() -> None:
    """With ``consolidation_reconfigures`` (off by default), no free 4g.40gb instance: an idle MIG GPU (all
    1g.10gb) is re-cut for the running service, which moves once the change is ready; an idle GPU with MIG off is
    never turned into slices for a move."""
    p1 = service()
    runs = (running(p1, whole("whole-1")),)
    nodes = (mig_node("mig-1", ALL_1G), whole_node("whole-1"))
    assert plan(nodes, runs).reconfigurations == ()  # off by default
    planned = plan(nodes, runs, policy=RECUTS)
    assert [(c.node, any(p == "4g.40gb" for p, _ in c.new)) for c in planned.reconfigurations] == [("mig-1", True)]
    assert planned.moves == ()
    # A change under way already offers it: no second change.
    changing = replace(nodes[0], mig=(SPLIT,), reconfiguring_until=NOW + 100.0)
    assert plan((changing, nodes[1]), runs, policy=RECUTS).reconfigurations == ()
    # No MIG node ready: no demand.
    cordoned = tuple(replace(node, schedulable=False) for node in nodes)
    assert plan(cordoned, runs, policy=RECUTS).reconfigurations == ()
    # Only an idle MIG-off GPU: nothing is changed.
    assert plan((whole_node("whole-1", gpus=2),), runs, policy=RECUTS).reconfigurations == ()


def test_a_job_beyond_the_fallbacks_cap_asks_for_its_way_back_without_consolidation_reconfigures() -> None:
    """Rule 5's way back: a 1g.10gb service on a whole GPU (seven times its size, more than the fallback's twice)
    asks for its right size with ``consolidation_reconfigures`` off; a 4g.40gb one on a whole GPU (within twice) or
    a 1g.10gb one on a 2g.20gb instance does not."""
    small = running(service("p1", "1g.10gb"), whole("whole-1"))
    assert consolidation.beyond_fallback(ClusterState(Snapshot(nodes=(whole_node(),), teams=TEAMS)), small, POLICY)
    planned = plan((mig_node("mig-2", (("7g.80gb", 0),)), whole_node("whole-1")), (small,))
    assert [(c.node, any(p == "1g.10gb" for p, _ in c.new)) for c in planned.reconfigurations] == [("mig-2", True)]
    large = running(service("p2", "4g.40gb"), whole("whole-1"))
    assert plan((mig_node("mig-2", (("7g.80gb", 0),)), whole_node("whole-1")), (large,)).reconfigurations == ()
    twice = running(service("p3", "1g.10gb"), instance("mig-1", "2g.20gb", 0))
    split = mig_node("mig-1", (("2g.20gb", 0), ("2g.20gb", 2), ("3g.40gb", 4)))
    state = ClusterState(Snapshot(nodes=(split,), teams=TEAMS, running=(twice,)))
    assert not consolidation.beyond_fallback(state, twice, POLICY)
    assert [c.job.id for c in consolidation.candidates(state, POLICY, NOW)] == ["p3"]
    assert consolidation.asking(state, consolidation.candidates(state, POLICY, NOW), POLICY) == []


def test_the_reconfiguration_hysteresis_bounds_a_move_demand() -> None:
    """The demand is aged from when the job started oversized: a job oversized for less than the reconfiguration
    hysteresis changes no layout (consolidation's own hysteresis set lower to show it)."""
    p1 = service()
    nodes = (mig_node("mig-1", ALL_1G), whole_node("whole-1"))
    policy = replace(RECUTS, consolidation_hysteresis_cycles=0, reconfiguration_hysteresis_cycles=5)
    young = running(p1, whole("whole-1"), started_at=NOW - 30.0)
    assert plan(nodes, (young,), policy=policy).reconfigurations == ()
    aged = running(p1, whole("whole-1"), started_at=NOW - 60.0)
    assert len(plan(nodes, (aged,), policy=policy).reconfigurations) == 1


def test_held_of_a_gpu_outside_the_catalog_and_of_a_share() -> None:
    state = ClusterState(Snapshot(nodes=(Node("t4", "T4", 1, sharing=True), whole_node()), teams=TEAMS))
    assert consolidation.held(state, Slot("t4", 0)) == (7000, 0)
    assert consolidation.held(state, Slot("whole-1", 0, milli=500)) == (3500, 81920 // 2)
