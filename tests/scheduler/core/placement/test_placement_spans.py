"""A whole-GPU gang may span the GPU models of one class (rules in scheduler/core/placement/spans.py)."""

from __future__ import annotations

import pytest

from scheduler.core import plan_cycle, rejection_reason
from scheduler.core.gpus.units import UNITS_PER_GPU
from scheduler.core.model.demand import Demand
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Node, Running
from scheduler.core.model.vocabulary import CapacityTier, JobTier
from scheduler.core.placement import find_slots, index_of
from scheduler.core.placement.options import options_for
from scheduler.core.placement.spans import class_pools, span_key
from scheduler.core.rules.limits import placement_units
from tests.scheduler.properties.builders import (
    A100,
    A100_40,
    H100,
    NOW,
    job,
    node,
    running,
    snapshot,
    state_of,
    team,
    whole,
)

POLICY = Policy()
H100_NVL = "H100-NVL-94GB"


def _busy(name: str, *gpus: int) -> Running:
    return running(job(f"busy-{name}", gpus=len(gpus)), (whole(name, *gpus),))


def _half(name: str, model: str, free: int = 4, **kwargs: object) -> tuple[Node, Running]:
    """An 8-GPU node of ``model`` with its last ``free`` GPUs free (4 by default), the others busy."""
    return node(name, model, **kwargs), _busy(name, *range(8 - free))  # type: ignore[arg-type]


def _placed(nodes_and_busy: list[tuple[Node, Running | None]], the_job: Job) -> list[str] | None:
    """The nodes ``find_slots`` puts ``the_job`` on (sorted), or None when it finds no placement."""
    nodes = [n for n, _ in nodes_and_busy]
    busy = [b for _, b in nodes_and_busy if b is not None]
    slots = find_slots(state_of(nodes, busy), the_job, POLICY)
    if slots is None:
        return None
    assert len(slots) == the_job.replicas
    return sorted({slot.node for replica in slots for slot in replica})


# Each case: the nodes (with their busy GPUs), the gang, the nodes it lands on (None: it waits).
CASES = [
    pytest.param(
        [_half("a80", A100), _half("a40", A100_40)], job("g", gpus=1, replicas=8), ["a40", "a80"], id="a100-40-with-80"
    ),
    pytest.param(
        [_half("a80", A100), _half("a40", A100_40)],
        job("g", gpus=2, replicas=4),
        ["a40", "a80"],
        id="two-gpus-per-replica",
    ),
    pytest.param(
        [_half("a80", A100), _half("a40", A100_40)],
        job("g", memory_gib=30, replicas=8),
        ["a40", "a80"],
        id="memory-fits-the-smallest-model",
    ),
    pytest.param(
        # 60 GiB: two GPUs per replica on a 40 GB A100, one on an 80 GB: the replicas would differ.
        [_half("a80", A100), _half("a40", A100_40)],
        job("g", memory_gib=60, replicas=8),
        None,
        id="memory-needs-the-larger-model",
    ),
    pytest.param(
        [_half("h80", H100), _half("nvl", H100_NVL)],
        job("g", memory_gib=60, replicas=8),
        ["h80", "nvl"],
        id="h100-sxm-with-nvl",
    ),
    pytest.param(
        # 79.9 GiB is more than an H100 SXM's 81,559 MiB: two GPUs there, one on the NVL.
        [_half("h80", H100), _half("nvl", H100_NVL)],
        job("g", memory_gib=79.9, replicas=8),
        None,
        id="memory-just-over-the-smaller-h100",
    ),
    pytest.param(
        [_half("a80", A100), _half("h80", H100)], job("g", gpus=1, replicas=8), None, id="never-across-classes"
    ),
    pytest.param(
        [_half("a80", A100), _half("a40", A100_40)],
        job("g", gpus=1, replicas=8, gpu_model=A100),
        None,
        id="a-model-pin-stays-on-its-model",
    ),
    pytest.param(
        [_half("a80", A100), _half("a40", A100_40)],
        job("g", gpus=1, replicas=8, gpu_model="A100"),
        ["a40", "a80"],
        id="a-class-pin-allows-its-models",
    ),
    pytest.param(
        # A single model is preferred even when it crosses leaves and the mix would stay under one.
        [
            _half("a80-1", A100, leaf="A"),
            _half("a80-2", A100, leaf="B"),
            _half("a40-1", A100_40, leaf="A"),
        ],
        job("g", gpus=1, replicas=8),
        ["a80-1", "a80-2"],
        id="one-model-first",
    ),
    pytest.param(
        # No model holds 8 (6 free each); among mixes the topology rule holds: leaf A's 4 + 4, not 2 leaves.
        [
            _half("a80-1", A100, leaf="A"),
            _half("a80-2", A100, 2, leaf="B"),
            _half("a40-1", A100_40, leaf="A"),
            _half("a40-2", A100_40, 2, leaf="B"),
        ],
        job("g", gpus=1, replicas=8),
        ["a40-1", "a80-1"],
        id="mixes-keep-the-topology-order",
    ),
    pytest.param(
        # Tier rank stays the first criterion: a mix on reserved nodes before one model on on-demand ones.
        [
            _half("r80", A100, tier=CapacityTier.RESERVED),
            _half("r40", A100_40, tier=CapacityTier.RESERVED),
            (node("o80", A100, tier=CapacityTier.ON_DEMAND), None),
        ],
        job("g", gpus=1, replicas=8),
        ["r40", "r80"],
        id="preferred-tier-first",
    ),
    pytest.param(
        [
            _half("r80", A100, tier=CapacityTier.RESERVED),
            _half("s40", A100_40, tier=CapacityTier.SPOT),
        ],
        job("g", gpus=1, replicas=8, tier=JobTier.RESERVED_ONLY),
        None,
        id="tier-routing-still-applies",
    ),
]


@pytest.mark.parametrize(("nodes", "the_job", "expected"), CASES)
def test_where_a_gang_may_span_models(
    nodes: list[tuple[Node, Running | None]], the_job: Job, expected: list[str] | None
) -> None:
    assert _placed(nodes, the_job) == expected


def test_tiers_are_pooled_for_a_mix_only_when_no_tier_holds_it_alone() -> None:
    nodes = [
        _half("r80", A100, tier=CapacityTier.RESERVED),
        _half("o40", A100_40, tier=CapacityTier.ON_DEMAND),
    ]
    assert _placed(nodes, job("g", gpus=1, replicas=8)) == ["o40", "r80"]


def test_a_mixed_gang_gets_whole_gpus_of_the_right_count_on_every_node() -> None:
    nodes = [node("a80", A100), node("a40", A100_40)]
    state = state_of(nodes, [_busy("a80", 0, 1, 2, 3, 4, 5), _busy("a40", 0, 1)])
    slots = find_slots(state, job("g", gpus=2, replicas=4), POLICY)
    assert slots is not None
    assert sorted(tuple((s.node, s.gpu) for s in replica) for replica in slots) == [
        (("a40", 2), ("a40", 3)),
        (("a40", 4), ("a40", 5)),
        (("a40", 6), ("a40", 7)),
        (("a80", 6), ("a80", 7)),
    ]


def test_a_mixed_gang_holds_units_of_its_one_class_only() -> None:
    state = state_of([node("a80", A100), node("a40", A100_40)], [_busy("a80", 0, 1, 2, 3), _busy("a40", 0, 1, 2, 3)])
    slots = find_slots(state, job("g", gpus=1, replicas=8), POLICY)
    assert slots is not None
    assert placement_units(state, slots) == {"A100": 8 * UNITS_PER_GPU}


@pytest.mark.parametrize(
    ("model_a", "demand_a", "model_b", "demand_b", "same"),
    [
        (A100, Demand.whole(1), A100_40, Demand.whole(1), True),
        (A100, Demand.whole(1), A100_40, Demand.whole(2), False),
        (A100, Demand.whole(1), H100, Demand.whole(1), False),
        (H100, Demand.whole(1, 61_440), H100_NVL, Demand.whole(1, 61_440), True),
        ("T4", Demand.whole(1), "L4", Demand.whole(1), False),  # outside the catalog: each model its own class
    ],
)
def test_span_key(model_a: str, demand_a: Demand, model_b: str, demand_b: Demand, same: bool) -> None:
    assert (span_key(model_a, demand_a) == span_key(model_b, demand_b)) is same


def test_class_pools_hold_two_models_or_more_in_option_order() -> None:
    nodes = [
        node("a80", A100, tier=CapacityTier.RESERVED),
        node("a40", A100_40, tier=CapacityTier.RESERVED),
        node("a40-od", A100_40, tier=CapacityTier.ON_DEMAND),
        node("h80", H100),
    ]
    index, _ = index_of(state_of(nodes))
    pools = class_pools(options_for(index, job("g", gpus=1, replicas=2), POLICY))
    assert [[(o.model, o.group[1]) for o in pool] for pool in pools] == [
        [(A100_40, "reserved"), (A100, "reserved"), (A100_40, "on-demand")]
    ]
    assert class_pools(options_for(index, job("g", gpus=1, replicas=2, gpu_model="H100"), POLICY)) == []


# -- the cycle: the "could never run" screen and quota admission --------------------------------------------


@pytest.mark.parametrize(
    ("nodes", "the_job", "rejected"),
    [
        ([node("a80", A100), node("a40", A100_40)], job("g", gpus=1, replicas=12), None),
        (
            [node("a80", A100), node("h80", H100)],
            job("g", gpus=1, replicas=12),
            "needs 12 replicas of 1 GPU at once; the cluster can hold at most 8 on the nodes it may use",
        ),
        (
            [node("a80", A100), node("a40", A100_40)],
            job("g", memory_gib=60, replicas=12),
            "the cluster can hold at most 8 on the nodes it may use",
        ),
    ],
)
def test_a_gang_that_fits_only_across_models_of_one_class_is_not_rejected(
    nodes: list[Node], the_job: Job, rejected: str | None
) -> None:
    reason = rejection_reason(the_job, nodes, POLICY)
    assert reason == rejected if rejected is None else rejected in (reason or "")
    plan = plan_cycle(snapshot(nodes, [the_job], [team("t", 16)]), POLICY, NOW)
    assert [r.job for r in plan.rejections] == ([] if rejected is None else ["g"])


@pytest.mark.parametrize(("a100_guarantee", "bound"), [(8, True), (7, False)])
def test_quota_counts_a_mixed_gang_in_its_class(a100_guarantee: float, bound: bool) -> None:
    """The fillers' team holds 8 A100s within its guarantee; the gang's team is guaranteed A100s only, and a
    non-preemptible gang runs only within the guarantee: 8 A100 units, across the two models."""
    nodes = [node("a80", A100), node("a40", A100_40)]
    fillers = [running(job(f"f-{n}", "o", gpus=4, preemptible=False), (whole(n, 0, 1, 2, 3),)) for n in ("a80", "a40")]
    gang = job("g", "t", gpus=1, replicas=8, preemptible=False)
    teams = [team("o", 8), team("t", A100=a100_guarantee)]
    plan = plan_cycle(snapshot(nodes, [gang], teams, fillers), POLICY, NOW)
    if bound:
        (bind,) = plan.binds
        assert sorted({slot.node for replica in bind.slots for slot in replica}) == ["a40", "a80"]
    else:
        assert plan.binds == () and plan.waiting[0].job == "g" and plan.waiting[0].blocker == "quota"
