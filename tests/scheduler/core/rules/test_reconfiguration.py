"""MIG reconfiguration: which idle GPUs get which new layout, when, and what is never touched."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.gpus.catalog import validate_layout
from scheduler.core.model.cluster_state import ClusterState
from scheduler.core.model.demand import Demand
from scheduler.core.model.plan import Reconfigure
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, MigLayout, Node, Request, Running, Slot, Snapshot
from scheduler.core.model.vocabulary import CapacityTier, JobKind, Priority
from scheduler.core.rules.reconfiguration import WHOLE_KEY, demand_key, plan_reconfiguration
from scheduler.core.sizing.layouts import named_layout

A100_40 = "A100-SXM4-40GB"
A100_80 = "A100-SXM4-80GB"
H100 = "H100-SXM5-80GB"
POLICY = Policy()  # cycle 10 s, hysteresis 3 cycles, reconfiguration 300 s
NOW = 1000.0
OLD = NOW - 30  # pending 3 cycles: past the hysteresis
NEW = NOW - 20  # pending 2 cycles: not yet


def _node(name: str, model: str = A100_80, gpus: int = 2, mig: Sequence[MigLayout] = (), **kw: object) -> Node:
    return Node(name=name, gpu_model=model, gpu_count=gpus, mig=tuple(mig), **kw)  # type: ignore[arg-type]


def _mig_job(job_id: str, profile: str, replicas: int = 1, at: float = OLD, **kw: object) -> tuple[Job, Demand]:
    job = Job(
        id=job_id,
        team="t",
        request=Request(mig_profile=profile),
        kind=JobKind.INFERENCE,
        replicas=replicas,
        submitted_at=at,
        **kw,  # type: ignore[arg-type]
    )
    return job, Demand.mig(profile)


def _whole_job(job_id: str, gpus: int = 1, at: float = OLD) -> tuple[Job, Demand]:
    job = Job(id=job_id, team="t", request=Request(gpus=gpus), kind=JobKind.TRAINING, submitted_at=at)
    return job, Demand.whole(gpus)


def _state(nodes: Sequence[Node], running: Sequence[Running] = ()) -> ClusterState:
    return ClusterState(Snapshot(nodes=tuple(nodes), teams=(), running=tuple(running)))


def _running(job_id: str, node: str, gpu: int, profile: str | None = None, start: int | None = None) -> Running:
    job = Job(id=job_id, team="t", request=Request(gpus=1) if profile is None else Request(mig_profile=profile))
    slot = Slot(node=node, gpu=gpu, mig_profile=profile, mig_start=start)
    return Running(job=job, slots=((slot,),), started_at=0.0)


def _plan(
    state: ClusterState,
    mig: Sequence[tuple[Job, Demand]] = (),
    whole: Sequence[tuple[Job, Demand]] = (),
    policy: Policy = POLICY,
    age: Mapping[str, int] | None = None,
) -> list[Reconfigure]:
    ops = plan_reconfiguration(state, mig, policy, NOW, demand_age=age, pending_whole=whole)
    for op in ops:
        model = state.nodes[op.node].gpu_model
        assert list(op.new) == validate_layout(model, op.new)
        assert op.old == state.gpus[(op.node, op.gpu)].layout
        assert state.gpus[(op.node, op.gpu)].idle
        assert op.ready_at == NOW + policy.mig_reconfigure_s
    assert len({op.node for op in ops}) <= 1
    return ops


def _profiles(op: Reconfigure) -> Counter[str]:
    return Counter(name for name, _ in op.new)


ALL_1G = named_layout(A100_80, "all-1g.10gb")


@pytest.mark.parametrize(
    ("case", "nodes", "mig", "expected"),
    [
        ("young demand waits out the hysteresis", [_node("a")], [_mig_job("j", "3g.40gb", at=NEW)], []),
        ("nothing pending", [_node("a")], [], []),
        ("non-MIG demand is ignored", [_node("a")], [_whole_job("w")], []),
        ("a GPU outside the catalog has no MIG", [_node("a", model="V100")], [_mig_job("j", "3g.40gb")], []),
        ("cordoned nodes are left alone", [_node("a", schedulable=False)], [_mig_job("j", "3g.40gb")], []),
        (
            "a node already reconfiguring is left alone",
            [_node("a", reconfiguring_until=NOW + 1)],
            [_mig_job("j", "3g.40gb")],
            [],
        ),
        (
            "a profile of another model family fits nowhere",
            [_node("a", model=A100_40)],
            [_mig_job("j", "3g.40gb")],
            [],
        ),
        (
            "production work never lands on spot",
            [_node("a", tier=CapacityTier.SPOT)],
            [_mig_job("j", "3g.40gb", priority=Priority.PRODUCTION)],
            [],
        ),
        (
            "an idle GPU whose instances already serve the demand is kept",
            [_node("a", gpus=1, mig=[named_layout(A100_80, "all-3g.40gb")])],
            [_mig_job("gang", "3g.40gb", replicas=4)],
            [],
        ),
    ],
)
def test_no_change(case: str, nodes: list[Node], mig: list[tuple[Job, Demand]], expected: list[Reconfigure]) -> None:
    assert _plan(_state(nodes), mig) == expected, case


def test_aged_demand_cuts_an_idle_gpu() -> None:
    ops = _plan(_state([_node("a")]), [_mig_job("j", "3g.40gb")])
    assert [(op.node, op.gpu, op.old) for op in ops] == [("a", 0, ())]
    assert _profiles(ops[0])["3g.40gb"] >= 1
    assert ops[0].new == (("4g.40gb", 0), ("3g.40gb", 4))  # the full-compute layout first in enumeration order


def test_a_finished_reconfiguration_no_longer_blocks() -> None:
    ops = _plan(_state([_node("a", reconfiguring_until=NOW)]), [_mig_job("j", "3g.40gb")])
    assert len(ops) == 1


@pytest.mark.parametrize(("age", "changes"), [({"3g.40gb": 2}, 0), ({"3g.40gb": 3}, 1), ({"1g.10gb": 9}, 0), ({}, 0)])
def test_hysteresis_by_the_callers_ages(age: dict[str, int], changes: int) -> None:
    # The job itself is old; with ages given, only the ages count.
    assert len(_plan(_state([_node("a")]), [_mig_job("j", "3g.40gb")], age=age)) == changes


def test_busy_gpus_are_never_touched() -> None:
    state = _state(
        [_node("a", gpus=3, mig=[ALL_1G, ALL_1G])],
        [_running("r0", "a", 0, "1g.10gb", 0), _running("r2", "a", 2)],
    )
    ops = _plan(state, [_mig_job("j", "3g.40gb")])
    assert [(op.gpu, op.old) for op in ops] == [(1, ALL_1G)]


def test_idle_mig_gpus_are_recut_before_whole_gpus_are_converted() -> None:
    nodes = [_node("a", gpus=2), _node("b", gpus=2, mig=[ALL_1G, ALL_1G])]
    ops = _plan(_state(nodes), [_mig_job("j", "3g.40gb")])
    assert [(op.node, op.gpu) for op in ops] == [("b", 0)]


def test_mig_gpus_before_whole_gpus_on_one_node() -> None:
    ops = _plan(_state([_node("a", gpus=2, mig=[(), ALL_1G])]), [_mig_job("j", "3g.40gb")])
    assert [(op.gpu, op.old) for op in ops] == [(1, ALL_1G)]


def test_one_node_per_cycle_the_one_serving_most() -> None:
    nodes = [_node("a", gpus=1), _node("b", gpus=2), _node("c", gpus=2)]
    ops = _plan(_state(nodes), [_mig_job("big", "7g.80gb", replicas=3)])
    assert [(op.node, op.gpu, op.new) for op in ops] == [
        ("b", 0, (("7g.80gb", 0),)),
        ("b", 1, (("7g.80gb", 0),)),
    ]


def test_the_layout_serves_aged_demand_then_younger_demand() -> None:
    pending = [
        _mig_job("aged", "3g.40gb"),
        _mig_job("young-1", "2g.20gb", at=NEW),
        _mig_job("young-2", "1g.10gb", at=NEW),
        _mig_job("young-3", "1g.10gb", at=NEW),
    ]
    ops = _plan(_state([_node("a", gpus=1)]), pending)
    assert _profiles(ops[0]) == Counter({"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2})


def test_demand_spills_over_to_the_next_gpu() -> None:
    ops = _plan(_state([_node("a", gpus=3)]), [_mig_job("j", "4g.40gb", replicas=2)])
    assert [op.gpu for op in ops] == [0, 1]
    assert all(_profiles(op)["4g.40gb"] == 1 for op in ops)


def test_instances_other_work_could_use_are_kept() -> None:
    current = (("1g.10gb", 0), ("1g.10gb", 1), ("1g.10gb", 2), ("1g.10gb", 3), ("3g.40gb", 4))
    ops = _plan(_state([_node("a", gpus=1, mig=[current])]), [_mig_job("j", "4g.40gb")])
    assert ops[0].new == (("4g.40gb", 0), ("3g.40gb", 4))  # 3g@4 survives


def test_profiles_are_resolved_per_model() -> None:
    job = Job(id="m", team="t", request=Request(memory_gib=15), kind=JobKind.INFERENCE, submitted_at=OLD)
    a100 = _plan(_state([_node("a", model=A100_40, gpus=1)]), [(job, Demand.mig("3g.20gb", 15360))])
    h100 = _plan(_state([_node("h", model=H100, gpus=1)]), [(job, Demand.mig("3g.20gb", 15360))])
    assert _profiles(a100[0])["3g.20gb"] == 1
    assert _profiles(h100[0])["1g.20gb"] >= 1


def test_media_engine_demand_gets_a_media_engine_layout() -> None:
    ops = _plan(_state([_node("a", gpus=1)]), [_mig_job("j", "1g.10gb+me")])
    assert _profiles(ops[0])["1g.10gb+me"] == 1


def test_aged_whole_demand_turns_idle_mig_gpus_back_into_whole_gpus() -> None:
    state = _state([_node("a", gpus=3, mig=[ALL_1G, ALL_1G, ALL_1G])])
    ops = _plan(state, whole=[_whole_job("w", gpus=2)])
    assert [(op.gpu, op.new) for op in ops] == [(0, ()), (1, ())]


def test_young_whole_demand_changes_nothing() -> None:
    assert _plan(_state([_node("a", gpus=1, mig=[ALL_1G])]), whole=[_whole_job("w", at=NEW)]) == []


def test_a_whole_gpu_that_whole_demand_could_use_is_not_converted() -> None:
    state = _state([_node("a", gpus=1)])
    assert _plan(state, [_mig_job("j", "3g.40gb")], whole=[_whole_job("w")]) == []


def test_mig_demand_keeps_a_mig_gpu_that_serves_it_despite_whole_demand() -> None:
    state = _state([_node("a", gpus=1, mig=[(("7g.80gb", 0),)])])
    assert _plan(state, [_mig_job("j", "7g.80gb")], whole=[_whole_job("w")]) == []


def test_mig_disabled_by_policy_plans_nothing() -> None:
    assert _plan(_state([_node("a")]), [_mig_job("j", "3g.40gb")], policy=Policy(mig=False)) == []


def test_without_a_cycle_length_no_demand_ages_by_itself() -> None:
    assert _plan(_state([_node("a")]), [_mig_job("j", "3g.40gb")], policy=Policy(cycle_s=0)) == []


def test_the_state_is_not_changed_and_the_answer_is_stable() -> None:
    state = _state([_node("a", gpus=2), _node("b", gpus=2, mig=[ALL_1G])])
    pending = [_mig_job("j1", "3g.40gb"), _mig_job("j2", "2g.20gb"), _mig_job("j3", "1g.20gb")]
    before = {key: gpu.layout for key, gpu in state.gpus.items()}
    first = _plan(state, pending)
    assert first == _plan(state, list(reversed(pending)))
    assert {key: gpu.layout for key, gpu in state.gpus.items()} == before


@pytest.mark.parametrize(
    ("demand", "key"),
    [(Demand.mig("3g.40gb"), "3g.40gb"), (Demand.whole(2), WHOLE_KEY), (Demand.share(300), WHOLE_KEY)],
)
def test_demand_key(demand: Demand, key: str) -> None:
    assert demand_key(demand) == key


PROFILES_80 = ["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "1g.10gb+me"]
LAYOUTS_80 = [(), ALL_1G, named_layout(A100_80, "all-balanced"), named_layout(A100_80, "all-3g.40gb")]


@settings(max_examples=150, deadline=None)
@given(
    layouts=st.lists(st.sampled_from(LAYOUTS_80), min_size=1, max_size=4),
    busy=st.lists(st.booleans(), min_size=4, max_size=4),
    demand=st.lists(st.tuples(st.sampled_from(PROFILES_80), st.integers(1, 3), st.booleans()), max_size=5),
    whole=st.integers(0, 2),
)
def test_property_only_idle_gpus_of_one_node_get_legal_layouts(
    layouts: list[MigLayout], busy: list[bool], demand: list[tuple[str, int, bool]], whole: int
) -> None:
    nodes = [_node("a", gpus=len(layouts), mig=layouts), _node("b", gpus=len(layouts), mig=layouts)]
    running = []
    for index, layout in enumerate(layouts):
        if busy[index]:
            slot = (layout[0][0], layout[0][1]) if layout else (None, None)
            running.append(_running(f"r{index}", "a", index, *slot))
    state = _state(nodes, running)
    pending = [_mig_job(f"j{i}", p, n, OLD if aged else NEW) for i, (p, n, aged) in enumerate(demand)]
    whole_jobs = [_whole_job(f"w{i}") for i in range(whole)]
    _plan(state, pending, whole_jobs)  # _plan asserts the invariants
