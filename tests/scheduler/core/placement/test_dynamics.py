"""Engine behaviour under a dynamic workload: a node is either reconfigured or bound to in one plan, idle
capacity serves waiting MIG inference, proactive reconfiguration, preemption as the last resort."""

from __future__ import annotations

from scheduler.core import plan_cycle
from scheduler.core.model.plan import Plan
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Node, Slot
from scheduler.core.model.vocabulary import JobKind, Priority
from scheduler.core.placement.drain import drain_for
from scheduler.core.placement.fallback import fallback_slots, oversize_slots
from scheduler.core.placement.options import options_for
from scheduler.core.rules.reconfiguration import MAX_NODES_PER_CYCLE, nodes_per_cycle
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


# -- idle capacity for production inference (placement.fallback) ---------------------------------------------


def _prod(job_id: str = "p", **kw: object) -> Job:
    return job(job_id, kind=JobKind.INFERENCE, priority=Priority.PRODUCTION, preemptible=False, **kw)  # type: ignore[arg-type]


def test_production_takes_the_least_oversized_free_instance_even_on_an_idle_gpu() -> None:
    # GPU 0 is idle with two 3g.40gb: a reconfiguration would take 300 s, its free 3g.40gb holds a 2g.20gb at once and
    # is less oversized than the idle MIG-off GPU 1.
    state = state_of([node("m", A100, 2, mig=["all-3g.40gb", ""])])
    assert fallback_slots(state, _prod(mig="2g.20gb"), POLICY) == ((Slot("m", 0, "3g.40gb", 0),),)
    assert fallback_slots(state, job("n", mig="2g.20gb", kind=JobKind.INFERENCE), POLICY) is None  # not production
    assert fallback_slots(state, _prod(gpus=1), POLICY) is None  # no MIG option: find_slots searched it all


def test_production_takes_a_whole_idle_gpu_when_no_larger_instance_is_free() -> None:
    state = state_of([node("m", A100, 2, mig=["all-1g.10gb", ""])])
    assert fallback_slots(state, _prod(mig="7g.80gb"), POLICY) == ((Slot("m", 1),),)
    assert fallback_slots(state, _prod(mig="4g.40gb"), POLICY) == ((Slot("m", 1),),)  # 3 extra slices of 4
    # No plain 1g for a +me, and a whole GPU is more than twice a 1g or a 3g: those wait for a change instead.
    assert fallback_slots(state, _prod(mig="1g.10gb+me"), POLICY) is None
    assert fallback_slots(state, _prod(mig="3g.40gb"), POLICY) is None
    # Two replicas: the second finds nothing once the first holds the only idle MIG-off GPU.
    assert fallback_slots(state, _prod(mig="7g.80gb", replicas=2), POLICY) is None
    both = state_of([node("m", A100, 2)])
    assert fallback_slots(both, _prod(mig="7g.80gb", replicas=2), POLICY) == ((Slot("m", 0),), (Slot("m", 1),))
    assert not both.placed  # the state is left unchanged


def test_oversize_takes_any_larger_free_capacity_the_cap_leaves_out() -> None:
    # Only an idle MIG-off GPU (1) and a free 4g.40gb (GPU 0) are free: more than twice a 1g or a 3g, so the capped
    # fallback finds nothing, and the uncapped one takes the least oversized: the 4g.40gb, then the whole GPU.
    state = state_of([node("m", A100, 2, mig=["all-4g.40gb", ""])])
    assert fallback_slots(state, _prod(mig="1g.10gb"), POLICY) is None
    assert oversize_slots(state, _prod(mig="1g.10gb"), POLICY) == ((Slot("m", 0, "4g.40gb", 0),),)
    assert oversize_slots(state, _prod(mig="3g.40gb"), POLICY) == ((Slot("m", 0, "4g.40gb", 0),),)
    assert oversize_slots(state, _prod(mig="1g.10gb", replicas=2), POLICY) == (
        (Slot("m", 0, "4g.40gb", 0),),
        (Slot("m", 1),),
    )
    assert oversize_slots(state, _prod(mig="1g.10gb", replicas=3), POLICY) is None  # all or nothing
    assert not state.placed  # the state is left unchanged
    # Still production's only, MIG demand only, and a +me profile takes only +me instances or a whole GPU.
    assert oversize_slots(state, job("n", mig="1g.10gb", kind=JobKind.INFERENCE), POLICY) is None
    assert oversize_slots(state, _prod(gpus=1), POLICY) is None
    assert oversize_slots(state, _prod(mig="1g.10gb+me"), POLICY) == ((Slot("m", 1),),)


def test_production_fallback_is_counted_at_what_it_holds_and_needs_the_quota() -> None:
    # A 4g.40gb fits a 0.6-GPU burst limit, a whole GPU does not: the job gets a reconfiguration instead.
    nodes = [node("m", A100, 1)]
    prod = _prod(team="s", mig="4g.40gb")
    plan = plan_cycle(snapshot(nodes, [prod], [team("s", guaranteed=0.6, burst=0.6)]), POLICY, NOW)
    assert not plan.binds and [(c.node, c.gpu) for c in plan.reconfigurations] == [("m", 0)]
    plan = plan_cycle(snapshot(nodes, [prod], [team("s", guaranteed=0.6)]), POLICY, NOW)  # above it: burst
    assert [(b.job, b.slots) for b in plan.binds] == [("p", ((Slot("m", 0),),))] and not plan.reconfigurations
    plan = plan_cycle(snapshot(nodes, [prod], [team("s", guaranteed=1)]), POLICY, NOW)
    assert [(b.job, b.slots) for b in plan.binds] == [("p", ((Slot("m", 0),),))] and not plan.reconfigurations


# -- several nodes per cycle (reconfiguration rule 5) -------------------------------------------------------------


def test_one_node_may_change_per_cycle_for_every_eight_mig_capable_ready_nodes() -> None:
    def budget(nodes: list[Node]) -> int:
        return nodes_per_cycle(state_of(nodes), NOW)

    assert budget([node(f"n{i}", A100, 1) for i in range(8)]) == 1
    assert budget([node(f"n{i}", A100, 1) for i in range(9)]) == 2
    unusable = [node("c", A100, 1, schedulable=False), node("r", A100, 1, reconfiguring_until=NOW + 1)]
    assert budget([*(node(f"n{i}", A100, 1) for i in range(8)), *unusable, node("x", "T4", 1)]) == 1
    assert budget([node(f"n{i:03d}", A100, 1) for i in range(1000)]) == MAX_NODES_PER_CYCLE


def test_aged_demand_left_unserved_by_one_change_gets_the_next_node_in_the_same_cycle() -> None:
    # 16 idle 1-GPU nodes of 1g.10gb instances: budget 2. Two aged 7g.80gb jobs need two GPUs, so two nodes.
    nodes = [node(f"n{i:02d}", A100, 1, mig="all-1g.10gb") for i in range(16)]
    pending = [job(f"j{i}", mig="7g.80gb", kind=JobKind.INFERENCE, submitted_at=OLD) for i in range(3)]
    plan = plan_cycle(snapshot(nodes, pending, [team("t", guaranteed=16)]), POLICY, NOW)
    assert [c.node for c in plan.reconfigurations] == ["n00", "n01"]
    reasons = {w.job: w.reason for w in plan.waiting}
    assert "node n00 GPU 0" in reasons["j0"] and "node n01 GPU 0" in reasons["j1"]
    assert "MIG reconfiguration under way" not in reasons["j2"]  # the budget is spent: next cycle
    # Production changes count against the budget: with one production change, one more node changes.
    prod = job("p", mig="7g.80gb", kind=JobKind.INFERENCE, priority=Priority.PRODUCTION, submitted_at=OLD)
    plan = plan_cycle(snapshot(nodes, [prod, *pending], [team("t", guaranteed=16)]), POLICY, NOW)
    assert [c.node for c in plan.reconfigurations] == ["n00", "n01"]


def test_production_prefers_more_memory_to_more_compute_among_larger_instances() -> None:
    gpu = Node(name="m", gpu_model=A100, gpu_count=1, mig=((("2g.20gb", 0), ("1g.20gb", 2)),))
    state = state_of([gpu])
    assert fallback_slots(state, _prod(mig="1g.10gb"), POLICY) == ((Slot("m", 0, "1g.20gb", 2),),)
