"""Engine behaviour under a dynamic workload: a node is either reconfigured or bound to in one plan, idle
capacity serves waiting MIG inference, proactive repartition, preemption as the last resort."""

from __future__ import annotations

from scheduler.core import plan_cycle
from scheduler.core.placement.drain import drain_for
from scheduler.core.placement.options import options_for
from scheduler.core.plan import Plan
from scheduler.core.policy import Policy
from scheduler.core.state import Slot
from scheduler.core.vocabulary import JobKind, Priority
from tests.scheduler.properties.builders import A100, NOW, job, node, running, snapshot, state_of, team

POLICY = Policy()
OLD = NOW - 100  # pending 10 cycles: past the hysteresis


def _bound_nodes(plan: Plan) -> set[str]:
    return {slot.node for b in plan.binds for replica in b.slots for slot in replica}


def _changed_nodes(plan: Plan) -> set[str]:
    return {change.node for change in plan.reconfigurations}


def test_a_node_that_takes_a_bind_is_not_reconfigured_in_the_same_plan() -> None:
    # a-1 GPU 0 has a free 1g.10gb; its GPU 1 is idle and MIG off. The 1g.10gb job binds on a-1 GPU 0; the aged
    # 3g.40gb demand must then be served by a change on b-1 (a-1 would win the tie by name otherwise).
    nodes = [node("a-1", A100, 2, mig=["all-1g.10gb", ""]), node("b-1", A100, 1)]
    small = job("small", mig="1g.10gb", kind=JobKind.INFERENCE, submitted_at=OLD)
    big = job("big", mig="3g.40gb", kind=JobKind.INFERENCE, submitted_at=OLD)
    plan = plan_cycle(snapshot(nodes, [small, big], [team("t", guaranteed=4)]), POLICY, NOW)
    assert [b.job for b in plan.binds] == ["small"]
    assert _bound_nodes(plan) == {"a-1"}
    assert _changed_nodes(plan) == {"b-1"}
    assert not _bound_nodes(plan) & _changed_nodes(plan)


def test_production_changes_avoid_nodes_bound_this_cycle() -> None:
    # A production 3g.40gb (explicit profile, so no whole-GPU fallback is needed for the rule under test) that
    # comes after a bind on a-1: its change goes to b-1.
    nodes = [node("a-1", A100, 2, mig=["all-1g.10gb", "all-1g.10gb"]), node("b-1", A100, 1, mig=["all-1g.10gb"])]
    small = job("a-small", mig="1g.10gb", kind=JobKind.INFERENCE, priority=Priority.PRODUCTION, submitted_at=OLD)
    big = job("b-big", mig="3g.40gb", kind=JobKind.INFERENCE, priority=Priority.PRODUCTION, submitted_at=OLD)
    plan = plan_cycle(snapshot(nodes, [small, big], [team("t", guaranteed=4)]), POLICY, NOW)
    assert "a-small" in {b.job for b in plan.binds}
    assert not _bound_nodes(plan) & _changed_nodes(plan)
    assert _changed_nodes(plan)


def test_drain_skips_nodes_that_took_a_bind_this_cycle() -> None:
    held = [running(job("one", mig="1g.10gb", priority=Priority.LOW), ((Slot("m", 0, "1g.10gb", 0),),))]
    state = state_of([node("m", A100, 1, mig="all-1g.10gb")], held)
    assert state.index is not None
    prod = job("p", mig="7g.80gb", priority=Priority.PRODUCTION, kind=JobKind.INFERENCE)
    options = options_for(state.index, prod, POLICY)
    assert drain_for(state, state.index, prod, options, POLICY, NOW, (), exclude={"m"}) is None
    assert "one" in state.placed
    assert drain_for(state, state.index, prod, options, POLICY, NOW, ()) is not None
