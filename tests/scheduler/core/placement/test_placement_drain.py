"""Draining a GPU for production MIG demand: GPUs whose occupants can move at acceptable cost are drained first."""

from __future__ import annotations

from scheduler.core.model.demand import Demand
from scheduler.core.model.plan import Evict
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Slot
from scheduler.core.model.vocabulary import JobKind, Priority
from scheduler.core.placement import IndexedClusterState
from scheduler.core.placement.drain import drain_for
from scheduler.core.placement.index import Group
from scheduler.core.placement.options import Option, options_for
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
