"""B1 protocol pieces on tiny hand-made clusters (the full replay is a benchmark, not a test)."""

from __future__ import annotations

import random

import pytest

from scheduler.sim.openb import run_b1, workload
from scheduler.sim.openb.cluster import bind, fresh_cluster, gpu_choices
from scheduler.sim.openb.fragmentation import Fragmentation, Shape, typical_shapes
from scheduler.sim.traces import TraceNode, TracePod

NODES = (
    TraceNode("n0", 8000, 1024, 2, "T4"),
    TraceNode("n1", 8000, 1024, 0, ""),
    TraceNode("n2", 16000, 2048, 4, "G2"),
)


def pod(name: str, num_gpu: int, gpu_milli: int, cpu: int = 1000, spec: tuple[str, ...] = ()) -> TracePod:
    return TracePod(name=name, cpu_milli=cpu, memory_mib=10, num_gpu=num_gpu, gpu_milli=gpu_milli, gpu_spec=spec)


def test_cpu_only_nodes_are_left_out() -> None:
    assert [node.name for node in fresh_cluster(NODES)] == ["n0", "n2"]


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        (pod("p", 0, 0), [()]),
        (pod("p", 1, 500), [(0,), (1,)]),
        (pod("p", 1, 700), [(1,)]),
        (pod("p", 2, 1000), []),
        (pod("p", 1, 1000), [(1,)]),
        (pod("p", 1, 300, spec=("G2",)), []),
        (pod("p", 1, 300, cpu=9000), []),
    ],
)
def test_gpu_choices(request_: TracePod, expected: list[tuple[int, ...]]) -> None:
    node = fresh_cluster(NODES)[0]
    bind(node, pod("x", 1, 400), (0,))
    assert gpu_choices(node, request_) == expected


def test_workload_inflates_to_1_3_times_capacity_and_trims_above_it() -> None:
    pods = tuple(pod(f"p{i}", 1, 1000) for i in range(4))
    inflated = workload(pods, 10_000, random.Random(1))
    assert sum(p.gpu_request_milli for p in inflated) == 13_000
    big = tuple(pod(f"p{i}", 8, 1000) for i in range(4))
    trimmed = workload(big, 10_000, random.Random(1))
    assert sum(p.gpu_request_milli for p in trimmed) == 8_000


def test_typical_shapes_cover_95_percent_by_frequency() -> None:
    pods = (*(pod(f"a{i}", 1, 500) for i in range(19)), pod("b", 1, 300))
    assert typical_shapes(pods) == (Shape(1000, 1, 500, frozenset(), 0.95),)


def test_fragmentation_counts_idle_gpu_a_shape_cannot_use() -> None:
    frag = Fragmentation((Shape(1000, 1, 500, frozenset(), 0.5), Shape(1000, 2, 1000, frozenset({"G2"}), 0.5)))
    # T4 node, GPUs free 600 and 300: the half-GPU shape wastes the 300; the 2-GPU G2 shape wastes all 900.
    assert frag.of("T4", 8000, (300, 600)) == pytest.approx(0.5 * 300 + 0.5 * 900)
    assert frag.of("G2", 8000, (1000, 1000)) == 0.0
    assert frag.of("G2", 500, (1000, 1000)) == 2000.0
    assert frag.of("G2", 8000, ()) == 0.0


@pytest.mark.parametrize("policy", ["random", "bestfit", "fgd"])
def test_a_tiny_replay_is_deterministic_and_never_overcommits(policy: str) -> None:
    pods = tuple(pod(f"p{i}", n, m) for i, (n, m) in enumerate([(1, 500), (1, 300), (2, 1000), (0, 0), (1, 1000)]))
    first = run_b1(NODES, pods, policy, 42)
    assert first == run_b1(NODES, pods, policy, 42)
    assert all(0.0 <= allocation <= 100.0 for _, allocation in first.curve)
    assert first.unallocated_pct_at(999) is None
    assert 100 <= first.curve[-1][0] <= 130
    assert first.unallocated_pct_at(first.curve[0][0]) is not None


def test_an_unknown_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown B1 policy 'dotprod'"):
        run_b1(NODES, (pod("p", 1, 500),), "dotprod", 42)
