"""Whole-GPU gangs: one node, then one leaf, then one spine, then across."""

from __future__ import annotations

import pytest

from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Running
from scheduler.core.model.vocabulary import CapacityTier, Interconnect
from scheduler.core.placement import find_slots
from scheduler.core.placement.topology import _from_hist
from tests.scheduler.properties.builders import A100, H100, job, node, running, state_of, whole

POLICY = Policy()


def _busy(node_name: str, *gpus: int) -> Running:
    return running(job(f"busy-{node_name}", gpus=len(gpus)), (whole(node_name, *gpus),))


def _nodes(slots: tuple[tuple[object, ...], ...] | None) -> list[str]:
    assert slots is not None
    return sorted({s.node for replica in slots for s in replica})  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("hist", "gpus", "replicas", "expected"),
    [
        ([0, 0, 0, 0, 1], 4, 2, None),  # one node with 4 free holds one replica of 4
        ([0, 0, 0, 0, 2], 4, 2, (2, 0, {4: 2})),
        ([0, 0, 0, 0, 1, 0, 0, 0, 2], 4, 3, (2, 0, {8: 1, 4: 1})),  # 8 + best-fit 4, not 8 + 8
        ([0, 0, 0, 0, 0, 0, 0, 0, 3], 4, 3, (2, 4, {8: 2})),
        ([0, 3, 1, 0, 0], 1, 4, (3, 0, {2: 1, 1: 2})),
        ([0, 0, 5], 2, 3, (3, 0, {2: 3})),
        ([0, 1, 1, 1], 2, 2, (2, 1, {3: 1, 2: 1})),
        ([0, 0, 1, 0, 1, 0, 1], 2, 4, (2, 0, {6: 1, 2: 1})),  # the 4 is swapped for the best-fit 2
    ],
)
def test_from_hist_uses_fewest_nodes_then_best_fit(
    hist: list[int], gpus: int, replicas: int, expected: tuple[int, int, dict[int, int]] | None
) -> None:
    assert _from_hist(hist, gpus, replicas) == expected


def test_a_gang_that_fits_one_node_stays_on_it() -> None:
    state = state_of([node("a"), node("b")], [_busy("a", 0, 1, 2, 3)])
    slots = find_slots(state, job("g", gpus=2, replicas=2), POLICY)
    assert _nodes(slots) == ["a"]  # best fit: "a" has 4 free, exactly enough
    assert slots is not None and len(slots) == 2 and all(len(r) == 2 for r in slots)


def test_one_nvswitch_node_before_a_pcie_node() -> None:
    state = state_of([node("a", interconnect=Interconnect.PCIE, gpus=4), node("b")])
    assert _nodes(find_slots(state, job("g", gpus=2, replicas=2), POLICY)) == ["b"]


def test_nodes_under_one_leaf_before_crossing_leaves() -> None:
    nodes = [node("n0", leaf="A", gpus=4), node("n1", leaf="B", gpus=4), node("n2", leaf="A", gpus=4)]
    assert _nodes(find_slots(state_of(nodes), job("g", gpus=4, replicas=2), POLICY)) == ["n0", "n2"]


def test_leaves_under_one_spine_before_crossing_the_spine() -> None:
    nodes = [
        node("n0", leaf="A", spine="S1", gpus=4),
        node("n1", leaf="C", spine="S2", gpus=4),
        node("n2", leaf="B", spine="S1", gpus=4),
    ]
    assert _nodes(find_slots(state_of(nodes), job("g", gpus=4, replicas=2), POLICY)) == ["n0", "n2"]


def test_within_a_spine_the_roomiest_leaves_come_first() -> None:
    nodes = [
        node("a0", leaf="A", spine="S", gpus=4),
        node("b0", leaf="B", spine="S", gpus=4),
        node("b1", leaf="B", spine="S", gpus=4),
        node("c0", leaf="C", spine="S", gpus=4),
    ]
    state = state_of(nodes, [_busy("b1", 0, 1, 2, 3)])
    # With b1 busy every leaf holds one replica: three leaves. With b1 free, leaf B holds two: two leaves.
    assert _nodes(find_slots(state, job("g", gpus=4, replicas=3), POLICY)) == ["a0", "b0", "c0"]
    full = state_of(nodes)
    assert _nodes(find_slots(full, job("h", gpus=4, replicas=3), POLICY)) == ["a0", "b0", "b1"]


def test_crossing_spines_when_nothing_smaller_holds_the_gang() -> None:
    nodes = [node("n0", leaf="A", spine="S1", gpus=4), node("n1", leaf="B", spine="S2", gpus=4)]
    assert _nodes(find_slots(state_of(nodes), job("g", gpus=4, replicas=2), POLICY)) == ["n0", "n1"]


def test_unlabelled_nodes_are_each_their_own_leaf() -> None:
    nodes = [node("x", gpus=4), node("l0", leaf="L", gpus=4), node("l1", leaf="L", gpus=4)]
    assert _nodes(find_slots(state_of(nodes), job("g", gpus=4, replicas=2), POLICY)) == ["l0", "l1"]
    loose = [node("x", gpus=4), node("y", gpus=4), node("z", gpus=4)]
    assert _nodes(find_slots(state_of(loose), job("g", gpus=4, replicas=3), POLICY)) == ["x", "y", "z"]


def test_fewest_nodes_then_best_fit_for_the_last() -> None:
    nodes = [node("a", leaf="L"), node("b", leaf="L"), node("c", leaf="L")]
    state = state_of(nodes, [_busy("c", 0, 1, 2, 3)])
    slots = find_slots(state, job("g", gpus=4, replicas=3), POLICY)
    assert _nodes(slots) == ["a", "c"]  # 8 + 4, leaving "b" whole
    assert slots is not None and sum(len(r) for r in slots) == 12


def test_a_gang_stays_on_one_gpu_model() -> None:
    state = state_of([node("a", A100, 4), node("h", H100, 4)])
    assert find_slots(state, job("g", gpus=4, replicas=2), POLICY) is None
    assert _nodes(find_slots(state, job("g", gpus=2, replicas=2), POLICY)) in (["a"], ["h"])


def test_one_tier_alone_before_pooling_tiers() -> None:
    nodes = [
        node("r0", tier=CapacityTier.RESERVED, gpus=4, leaf="L"),
        node("o0", tier=CapacityTier.ON_DEMAND, gpus=4, leaf="L"),
        node("o1", tier=CapacityTier.ON_DEMAND, gpus=4, leaf="M"),
    ]
    assert _nodes(find_slots(state_of(nodes), job("g", gpus=4, replicas=2), POLICY)) == ["o0", "o1"]
    assert _nodes(find_slots(state_of(nodes), job("g", gpus=4, replicas=3), POLICY)) == ["o0", "o1", "r0"]


def test_gangs_limited_by_cpu_are_placed_node_by_node() -> None:
    nodes = [
        node("a", leaf="L", cpu_milli=4000),
        node("b", leaf="L", cpu_milli=64000),
        node("c", leaf="M", cpu_milli=64000),
    ]
    slots = find_slots(state_of(nodes), job("g", gpus=2, replicas=4, cpu_milli=3000), POLICY)
    assert _nodes(slots) == ["b"]
    slots = find_slots(state_of(nodes), job("g", gpus=4, replicas=4, cpu_milli=3000), POLICY)
    assert _nodes(slots) == ["b", "c"]  # "a" holds one replica only by CPU; two nodes are enough anyway
    slots = find_slots(state_of(nodes), job("g", gpus=4, replicas=5, cpu_milli=3000), POLICY)
    assert _nodes(slots) == ["a", "b", "c"]
    assert find_slots(state_of(nodes), job("g", gpus=4, replicas=6, cpu_milli=3000), POLICY) is None


def test_gangs_limited_by_cpu_prefer_one_leaf() -> None:
    nodes = [node("a", leaf="L", cpu_milli=8000), node("b", leaf="M", cpu_milli=8000), node("c", leaf="L")]
    slots = find_slots(state_of(nodes), job("g", gpus=8, replicas=2, cpu_milli=1000), POLICY)
    assert _nodes(slots) == ["a", "c"]


def test_a_gang_that_does_not_fit_gets_nothing() -> None:
    state = state_of([node("a", leaf="L"), node("b", leaf="L")], [_busy("b", 0)])
    assert find_slots(state, job("g", gpus=4, replicas=4), POLICY) is None
    assert find_slots(state, job("g", gpus=4, replicas=3), POLICY) is not None


def test_enough_free_gpus_in_total_but_no_node_holds_a_replica() -> None:
    nodes = [node("a", gpus=4, leaf="L"), node("b", gpus=4, leaf="L"), node("c", gpus=4, leaf="L")]
    state = state_of(nodes, [_busy("a", 0), _busy("b", 0), _busy("c", 0)])
    assert find_slots(state, job("g", gpus=4, replicas=2), POLICY) is None


def test_nodes_that_name_a_spine_but_no_leaf_join_the_spine_stage() -> None:
    nodes = [node("a", gpus=4, spine="S"), node("b", gpus=4, leaf="L", spine="S"), node("c", gpus=4, leaf="M")]
    assert _nodes(find_slots(state_of(nodes), job("g", gpus=4, replicas=2), POLICY)) == ["a", "b"]


def test_a_tier_with_enough_free_gpus_but_no_room_for_a_replica_is_passed_over() -> None:
    reserved = [node(f"r{i}", gpus=4, tier=CapacityTier.RESERVED) for i in range(3)]
    busy = [running(job(f"b{i}"), (whole(f"r{i}", 0),)) for i in range(3)]
    state = state_of([*reserved, node("o", tier=CapacityTier.ON_DEMAND)], busy)
    assert _nodes(find_slots(state, job("g", gpus=4, replicas=2), POLICY)) == ["o"]


def test_each_model_is_tried_in_the_tiers_it_has() -> None:
    nodes = [node("a", A100, tier=CapacityTier.RESERVED), node("h", H100, tier=CapacityTier.ON_DEMAND)]
    assert _nodes(find_slots(state_of(nodes), job("g", gpus=4, replicas=2), POLICY)) == ["a"]
    assert _nodes(find_slots(state_of(nodes), job("g", gpus=4, replicas=2, gpu_model="H100"), POLICY)) == ["h"]
