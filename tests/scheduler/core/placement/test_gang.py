"""Gangs: binding is all-or-nothing; a gang larger than the cluster is known early."""

from __future__ import annotations

import pytest

from scheduler.core.model.plan import Bind
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Node, Slot
from scheduler.core.model.vocabulary import CapacityTier, JobKind, JobTier, Priority
from scheduler.core.placement.gang import (
    GangError,
    NodeKind,
    bind,
    check_gang,
    cluster_capacity,
    node_capacity,
    node_kinds,
)
from tests.scheduler.properties.builders import A100, A100_40, H100, job, node, state_of, whole

POLICY = Policy()


@pytest.mark.parametrize(
    ("replicas", "slots", "message"),
    [
        (2, (whole("a", 0),), "2 replicas but 1 were placed"),
        (1, (whole("a", 0), whole("a", 1)), "1 replicas but 2 were placed"),
        (2, (whole("a", 0), ()), "every replica needs at least one slot"),
    ],
)
def test_check_gang_refuses_partial_gangs(replicas: int, slots: tuple, message: str) -> None:
    with pytest.raises(GangError, match=message):
        check_gang(job("g", replicas=replicas), slots)


def test_bind_places_every_replica_or_none() -> None:
    state = state_of([node("a", gpus=2)])
    gang = job("g", replicas=2)
    assert bind(state, gang, (whole("a", 0), whole("a", 1))) == Bind("g", (whole("a", 0), whole("a", 1)))
    assert state.placed["g"] == (whole("a", 0), whole("a", 1))
    other = job("h", replicas=2)
    with pytest.raises(ValueError, match="not free"):
        bind(state, other, (whole("a", 0), (Slot("a", 5),)))
    assert "h" not in state.placed


@pytest.mark.parametrize(
    ("the_node", "the_job", "expected"),
    [
        (node("a", gpus=8), job("j", gpus=3), 2),
        (node("a", gpus=8), job("j", gpus=16), 0),
        (node("a", A100, 2), job("j", mig="1g.10gb"), 14),
        (node("a", A100, 2), job("j", mig="3g.40gb"), 4),
        (node("a", gpus=2, sharing=True), job("j", milli=300), 6),
        (node("a", gpus=2), job("j", milli=300), 0),
        (node("a", gpus=8, cpu_milli=4000), job("j", gpus=1, cpu_milli=1000), 4),
        (node("a", gpus=8, memory_mib=10_000), job("j", gpus=1, memory_mib=4_000), 2),
        (node("a", tier=CapacityTier.SPOT), job("j", tier=JobTier.RESERVED_ONLY), 0),
        (node("a", tier=CapacityTier.SPOT), job("j", priority=Priority.PRODUCTION, kind=JobKind.INFERENCE), 0),
        (node("a", H100), job("j", gpu_model="A100"), 0),
    ],
)
def test_node_capacity(the_node: Node, the_job: Job, expected: int) -> None:
    assert node_capacity(NodeKind.of(the_node), the_job, POLICY) == expected


def test_cluster_capacity_counts_alike_nodes_together() -> None:
    nodes = [node(f"h{i}", H100) for i in range(3)] + [node("a", A100, 4)]
    kinds = node_kinds(nodes)
    assert [count for _, count in kinds] == [1, 3]
    assert cluster_capacity(kinds, job("j", gpus=4), POLICY) == 7
    # A whole-GPU gang stays in one class: the H100s hold 6 replicas of 4, the A100 one more elsewhere.
    assert cluster_capacity(kinds, job("g", gpus=4, replicas=2), POLICY) == 6
    # Per-replica work (here 1g.10gb slices, 7 per GPU) may spread over models.
    inference = job("i", memory_gib=8, kind=JobKind.INFERENCE, replicas=2)
    assert cluster_capacity(kinds, inference, POLICY) == (4 + 3 * 8) * 7
    assert cluster_capacity(kinds, job("x", gpu_model="H200"), POLICY) == 0


@pytest.mark.parametrize(
    ("nodes", "the_job", "expected"),
    [
        # Models of one class with one demand are counted together (placement/spans.py): 8 + 8.
        ([node("a80", A100), node("a40", A100_40)], job("g", gpus=1, replicas=12), 16),
        ([node("a80", A100), node("a40", A100_40), node("b80", A100)], job("g", gpus=4, replicas=5), 6),
        ([node("a80", A100), node("a40", A100_40)], job("g", memory_gib=30, replicas=12), 16),
        # 60 GiB: one GPU per replica on the 80 GB A100, two on the 40 GB one: apart, the best is 8.
        ([node("a80", A100), node("a40", A100_40)], job("g", memory_gib=60, replicas=12), 8),
        # Never across classes, nor off a pinned model.
        ([node("a80", A100), node("h", H100)], job("g", gpus=1, replicas=12), 8),
        ([node("a80", A100), node("a40", A100_40)], job("g", gpus=1, replicas=12, gpu_model=A100), 8),
        ([node("a80", A100), node("a40", A100_40)], job("g", gpus=1, replicas=12, gpu_model="A100"), 16),
        # One replica (no gang) is placed anywhere: every model counts.
        ([node("a80", A100), node("h", H100)], job("g", gpus=1), 16),
    ],
)
def test_cluster_capacity_counts_the_models_a_gang_may_span_together(
    nodes: list[Node], the_job: Job, expected: int
) -> None:
    assert cluster_capacity(node_kinds(nodes), the_job, POLICY) == expected


def test_node_kinds_are_sorted_whatever_the_input_order() -> None:
    nodes = [node("b", H100, cpu_milli=10), node("a", A100, memory_mib=5), Node("c", "T4", 1)]
    assert node_kinds(nodes) == node_kinds(list(reversed(nodes)))
