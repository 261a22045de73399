"""Draining a GPU for production MIG demand: GPUs whose occupants can move at acceptable cost are drained first; and
for production whole-GPU demand, the MIG-split GPUs a node lacks only, drained and turned off."""

from __future__ import annotations

from scheduler.core.model.demand import Demand
from scheduler.core.model.plan import Evict, Reconfigure
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Slot
from scheduler.core.model.vocabulary import JobKind, Priority
from scheduler.core.placement import IndexedClusterState
from scheduler.core.placement.drain import drain_for, drain_whole_for
from scheduler.core.placement.index import Group
from scheduler.core.placement.options import Option, options_for
from scheduler.core.sizing.layouts import named_layout
from tests.scheduler.properties.builders import A100, NOW, job, node, running, state_of

POLICY = Policy()


def _world() -> IndexedClusterState:
    held = [
        running(job("one", mig="1g.10gb", priority=Priority.LOW), ((Slot("m", 0, "1g.10gb", 0),),)),
        running(job("two", mig="1g.10gb", priority=Priority.LOW), ((Slot("m", 1, "1g.10gb", 0),),)),
        running(job("three", mig="1g.10gb", priority=Priority.LOW), ((Slot("m", 1, "1g.10gb", 1),),)),
    ]
    return state_of([node("m", A100, 2, mig="all-1g.10gb")], held)


def test_the_cheapest_gpu_is_drained() -> None:
    state = _world()
    prod = job("p", mig="7g.80gb", priority=Priority.PRODUCTION, kind=JobKind.INFERENCE)
    found = drain_for(state, state.index, prod, options_for(state.index, prod, POLICY), POLICY, NOW, ())  # type: ignore[arg-type]
    assert found is not None
    evictions, changes = found
    assert evictions == [Evict("one", "repartition", "p")]
    assert [(c.gpu, c.new) for c in changes] == [(0, (("7g.80gb", 0),))]
    assert "one" not in state.placed and "two" in state.placed


def test_only_production_drains_and_only_mig_options_count() -> None:
    state = _world()
    high = job("h", mig="7g.80gb", priority=Priority.HIGH, kind=JobKind.INFERENCE)
    assert drain_for(state, state.index, high, options_for(state.index, high, POLICY), POLICY, NOW, ()) is None  # type: ignore[arg-type]
    prod = job("p", gpus=1, priority=Priority.PRODUCTION)
    group: Group = (A100, "on-demand", "nvswitch")
    whole_only = [Option(0, 0, group, Demand.whole(1))]
    assert drain_for(state, state.index, prod, whole_only, POLICY, NOW, ()) is None  # type: ignore[arg-type]
    assert sorted(state.placed) == ["one", "three", "two"]


EAGER = Policy(reconfiguration_hysteresis_cycles=0)


def _split_world() -> IndexedClusterState:
    """Node ``m``: GPU 0 MIG-split with one low job, GPU 1 with two, GPU 2 MIG-split and idle, GPU 3 MIG off and
    idle; node ``p``: two GPUs, MIG-split, one holding production (never drained)."""
    held = [
        running(job("one", mig="1g.10gb", priority=Priority.LOW), ((Slot("m", 0, "1g.10gb", 0),),)),
        running(job("two", mig="1g.10gb", priority=Priority.LOW), ((Slot("m", 1, "1g.10gb", 0),),)),
        running(job("three", mig="1g.10gb", priority=Priority.LOW), ((Slot("m", 1, "1g.10gb", 1),),)),
        running(
            job("prod", mig="1g.10gb", priority=Priority.PRODUCTION, kind=JobKind.INFERENCE),
            ((Slot("p", 0, "1g.10gb", 0),),),
        ),
    ]
    nodes = [
        node("m", A100, 4, mig=["all-1g.10gb", "all-1g.10gb", "all-1g.10gb", ""]),
        node("p", A100, 2, mig="all-1g.10gb"),
    ]
    return state_of(nodes, held)


def _drain_whole(
    state: IndexedClusterState, wanted: int, policy: Policy = EAGER, priority: Priority = Priority.PRODUCTION
):  # type: ignore[no-untyped-def]
    prod = job("w", gpus=wanted, priority=priority, kind=JobKind.INFERENCE)
    options = options_for(state.index, prod, policy)  # type: ignore[arg-type]
    return drain_whole_for(state, state.index, prod, options, policy, NOW, ())  # type: ignore[arg-type]


def test_whole_gpu_demand_drains_the_cheapest_split_gpus_of_one_node_and_turns_mig_off() -> None:
    state = _split_world()
    found = _drain_whole(state, 3)  # GPU 3 is free; GPU 2 (idle) and GPU 0 (one victim) complete it, not GPU 1
    assert found is not None
    evictions, changes = found
    assert evictions == [Evict("one", "repartition", "w")]
    assert sorted((c.node, c.gpu, c.new) for c in changes) == [("m", 0, ()), ("m", 2, ())]
    assert sorted(state.placed) == ["prod", "three", "two"]


def test_whole_gpu_demand_drains_nothing_it_cannot_complete_or_does_not_need() -> None:
    state = _split_world()
    assert _drain_whole(state, 5) is None  # m: four GPUs at most; p: production holds one of its two
    # One GPU: m has one free (placement's, not a drain's); p's idle split GPU is turned off, nobody evicted.
    assert _drain_whole(state, 1) == ([], [Reconfigure("p", 1, named_layout(A100, "all-1g.10gb"), (), NOW + 300.0)])
    state = _split_world()
    assert _drain_whole(state, 2, priority=Priority.HIGH) is None  # only production drains
    assert (
        _drain_whole(state, 2, Policy(mig=False, reconfiguration_hysteresis_cycles=0)) is None
    )  # no change: rolled back
    prod = job("w", mig="7g.80gb", priority=Priority.PRODUCTION, kind=JobKind.INFERENCE)
    mig_only = [o for o in options_for(state.index, prod, EAGER) if o.demand.kind != Demand.whole(1).kind]
    assert mig_only and drain_whole_for(state, state.index, prod, mig_only, EAGER, NOW, ()) is None  # type: ignore[arg-type]
    whole = job("w", gpus=3, priority=Priority.PRODUCTION, kind=JobKind.INFERENCE)
    options = options_for(state.index, whole, EAGER)  # type: ignore[arg-type]
    bound = {"m", "p"}  # nodes bound this cycle are never drained
    assert drain_whole_for(state, state.index, whole, options, EAGER, NOW, (), bound) is None  # type: ignore[arg-type]
    assert sorted(state.placed) == ["one", "prod", "three", "two"]
