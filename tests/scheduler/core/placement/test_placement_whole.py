"""Whole-GPU replicas: best fit keeps whole nodes free; pairs, tiers, readiness."""

from __future__ import annotations

import pytest

from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Node, Running, Slot
from scheduler.core.model.vocabulary import CapacityTier, Interconnect, JobKind, JobTier, Priority
from scheduler.core.placement import find_slots
from scheduler.core.placement.whole import choose_gpus, has_free_pair, static_penalty
from tests.scheduler.properties.builders import A100, H100, NOW, job, node, running, state_of, whole

POLICY = Policy()
PAIRS, SWITCH, PCIE = Interconnect.NVLINK_PAIRS, Interconnect.NVSWITCH, Interconnect.PCIE


@pytest.mark.parametrize(
    ("interconnect", "free", "gpus", "expected"),
    [
        (SWITCH, [0, 1, 2, 3, 4, 5, 6, 7], 3, [0, 1, 2]),
        (PCIE, [0, 2, 5], 2, [0, 2]),
        (PAIRS, [0, 1, 2, 3], 1, [0]),  # no lone GPU: break the first pair
        (PAIRS, [1, 2, 3], 1, [1]),  # GPU 1's partner is busy: keep pair 2-3 whole
        (PAIRS, [1, 2, 3], 2, [2, 3]),  # a bridged pair
        (PAIRS, [0, 1, 3, 4, 5], 3, [0, 1, 3]),  # one pair, then a lone GPU
        (PAIRS, [0, 1, 2, 3], 3, [0, 1, 2]),  # two pairs, odd count: break the second
        (PAIRS, [1, 3, 5, 7], 2, [1, 3]),  # no pair at all
        (PAIRS, [0, 1, 2, 3, 4, 5, 6, 7], 8, [0, 1, 2, 3, 4, 5, 6, 7]),
    ],
)
def test_choose_gpus(interconnect: Interconnect, free: list[int], gpus: int, expected: list[int]) -> None:
    assert choose_gpus(interconnect, free, gpus) == expected


@pytest.mark.parametrize(
    ("free", "expected"), [([], False), ([0], False), ([1, 2], False), ([0, 1], True), ([3, 4, 5], True)]
)
def test_has_free_pair(free: list[int], expected: bool) -> None:
    assert has_free_pair(free) is expected


@pytest.mark.parametrize(
    ("interconnect", "gpus", "expected"),
    [(SWITCH, 8, 0), (PCIE, 1, 0), (PCIE, 2, 1), (PAIRS, 1, 0), (PAIRS, 2, None), (PAIRS, 4, 1)],
)
def test_static_penalty(interconnect: Interconnect, gpus: int, expected: int | None) -> None:
    assert static_penalty(interconnect, gpus) == expected


def _busy(node_name: str, *gpus: int, job_id: str = "busy") -> Running:
    return running(job(job_id, gpus=len(gpus)), (whole(node_name, *gpus),))


@pytest.mark.parametrize(("gpus", "expected_node"), [(1, "c"), (2, "c"), (3, "b"), (4, "a"), (8, "a")])
def test_best_fit_takes_the_node_with_fewest_free_gpus_that_still_fits(gpus: int, expected_node: str) -> None:
    state = state_of(
        [node("a"), node("b"), node("c")],
        [_busy("b", 0, 1, 2, 3, 4, job_id="x"), _busy("c", 0, 1, 2, 3, 4, 5, job_id="y")],
    )
    slots = find_slots(state, job("j", gpus=gpus), POLICY)
    assert slots is not None
    assert {s.node for s in slots[0]} == {expected_node}
    assert len(slots[0]) == gpus


def test_a_replica_is_never_split_across_nodes() -> None:
    state = state_of([node("a", gpus=4), node("b", gpus=4)], [_busy("a", 0, 1), _busy("b", 0, 1, job_id="z")])
    assert find_slots(state, job("j", gpus=3), POLICY) is None


def test_two_gpus_prefer_a_bridged_pair_over_a_tighter_fit() -> None:
    # "a" has 2 free but not a pair (1 and 2); "b" has 4 free with pair 2-3.
    state = state_of(
        [node("a", interconnect=PAIRS, gpus=4), node("b", interconnect=PAIRS, gpus=8)],
        [_busy("a", 0, 3, job_id="x"), _busy("b", 0, 1, 4, 5, job_id="y")],
    )
    slots = find_slots(state, job("j", gpus=2), POLICY)
    assert slots == ((Slot("b", 2), Slot("b", 3)),)


def test_two_gpus_take_split_gpus_when_no_pair_is_free() -> None:
    state = state_of([node("a", interconnect=PAIRS, gpus=4)], [_busy("a", 0, 3)])
    assert find_slots(state, job("j", gpus=2), POLICY) == ((Slot("a", 1), Slot("a", 2)),)


def test_multi_gpu_replicas_prefer_nvswitch_over_pcie() -> None:
    state = state_of([node("a", interconnect=PCIE, gpus=4), node("b", interconnect=SWITCH)])
    assert find_slots(state, job("j", gpus=4), POLICY)[0][0].node == "b"  # type: ignore[index]
    assert find_slots(state, job("k", gpus=1), POLICY)[0][0].node == "a"  # type: ignore[index]


@pytest.mark.parametrize(
    ("tier", "priority", "expected"),
    [
        (JobTier.ANY, Priority.NORMAL, "r"),
        (JobTier.SPOT_OK, Priority.NORMAL, "s"),
        (JobTier.RESERVED_ONLY, Priority.LOW, "r"),
        (JobTier.SPOT_OK, Priority.PRODUCTION, "r"),
    ],
)
def test_tier_preference_comes_before_packing(tier: JobTier, priority: Priority, expected: str) -> None:
    nodes = [
        node("o", tier=CapacityTier.ON_DEMAND),
        node("r", tier=CapacityTier.RESERVED),
        node("s", tier=CapacityTier.SPOT),
    ]
    # The on-demand node is the tightest fit; tiers still win.
    state = state_of(nodes, [_busy("o", 0, 1, 2, 3, 4, 5, 6)])
    the_job = job("j", tier=tier, priority=priority, kind=JobKind.INFERENCE)
    assert find_slots(state, the_job, POLICY)[0][0].node == expected  # type: ignore[index]


def test_production_never_lands_on_spot_and_reserved_only_never_elsewhere() -> None:
    state = state_of([node("s", tier=CapacityTier.SPOT), node("o", tier=CapacityTier.ON_DEMAND)])
    assert find_slots(state, job("p", priority=Priority.PRODUCTION, kind=JobKind.INFERENCE), POLICY)[0][0].node == "o"  # type: ignore[index]
    assert find_slots(state, job("r", tier=JobTier.RESERVED_ONLY), POLICY) is None
    only_spot = state_of([node("s", tier=CapacityTier.SPOT)])
    assert find_slots(only_spot, job("p", priority=Priority.PRODUCTION), POLICY) is None


@pytest.mark.parametrize(("constraint", "expected"), [("A100", "a"), ("H100", "h"), (H100, "h"), ("H200", None)])
def test_gpu_model_constraint(constraint: str, expected: str | None) -> None:
    state = state_of([node("a", A100), node("h", H100)])
    slots = find_slots(state, job("j", gpu_model=constraint), POLICY)
    assert (slots[0][0].node if slots else None) == expected


@pytest.mark.parametrize(
    ("changes", "fits"),
    [
        ({"schedulable": False}, False),
        ({"reconfiguring_until": NOW + 1}, False),
        ({"reconfiguring_until": NOW}, True),
        ({"reconfiguring_until": NOW - 60}, True),
    ],
)
def test_only_ready_nodes_take_new_work(changes: dict[str, object], fits: bool) -> None:
    state = state_of([node("a", **changes)])
    assert (find_slots(state, job("j"), POLICY) is not None) is fits


def test_cpu_and_host_memory_limits_apply_when_the_node_states_them() -> None:
    nodes = [node("a", cpu_milli=8000, memory_mib=64_000), node("b", cpu_milli=16_000)]
    held = running(job("r", gpus=1, cpu_milli=6000, memory_mib=60_000), (whole("a", 0),))
    state = state_of(nodes, [held])
    # "a" is the tighter fit, but 6000 of its 8000 milli-CPU are taken.
    assert find_slots(state, job("j", cpu_milli=4000), POLICY)[0][0].node == "b"  # type: ignore[index]
    assert find_slots(state, job("k", cpu_milli=2000, memory_mib=8_000), POLICY)[0][0].node == "b"  # type: ignore[index]
    assert find_slots(state, job("l", cpu_milli=2000), POLICY)[0][0].node == "a"  # type: ignore[index]
    assert find_slots(state, job("m", cpu_milli=20_000), POLICY) is None


def test_whole_gpus_never_land_on_mig_or_shared_gpus() -> None:
    nodes = [node("m", A100, 2, mig="all-balanced"), node("s", gpus=2, sharing=True)]
    share = running(job("sh", milli=100), ((Slot("s", 0, milli=100),),))
    state = state_of(nodes, [share])
    assert find_slots(state, job("j", gpus=1), POLICY) == ((Slot("s", 1),),)
    assert find_slots(state, job("k", gpus=2), POLICY) is None


def test_a_memory_request_that_needs_whole_gpus_gets_the_fewest_that_hold_it() -> None:
    state = state_of([node("h", H100)])
    slots = find_slots(state, job("j", memory_gib=150, kind=JobKind.TRAINING), POLICY)
    assert slots is not None and len(slots[0]) == 2


def test_nodes_outside_the_catalog_serve_whole_gpus() -> None:
    state = state_of([Node("t", "V100M32", 8)])
    assert find_slots(state, job("j", gpus=8), POLICY) is not None
