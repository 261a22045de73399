"""B1 protocol pieces on tiny hand-made clusters (the full replay is a benchmark, not a test)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from scheduler.sim.openb import run_b1, workload
from scheduler.sim.openb.cluster import NodeState, bind, fits, fresh_cluster, lowest_free, scored_cpu, tightest
from scheduler.sim.openb.curve import bucket_curve
from scheduler.sim.openb.fragmentation import Fragmentation, Shape, typical_shapes
from scheduler.sim.openb.protocol import _Groups, choose
from scheduler.sim.openb.scorers import (
    BestFitScorer,
    DotProdScorer,
    FgdScorer,
    GpuClusteringScorer,
    GpuPackingScorer,
    MicrocosmScorer,
    RandomScorer,
    make_scorer,
)
from scheduler.sim.traces import TraceNode, TracePod, load_openb_nodes, load_openb_pods

TRACES = Path(__file__).resolve().parents[3].parent / "shared" / "traces" / "alibaba-openb-2023"

NODES = (
    TraceNode("n0", 8000, 1024, 2, "T4"),
    TraceNode("n1", 8000, 1024, 0, ""),
    TraceNode("n2", 16000, 2048, 4, "G2"),
)


def pod(
    name: str, num_gpu: int, gpu_milli: int, cpu: int = 1000, spec: tuple[str, ...] = (), memory: int = 10
) -> TracePod:
    return TracePod(name=name, cpu_milli=cpu, memory_mib=memory, num_gpu=num_gpu, gpu_milli=gpu_milli, gpu_spec=spec)


def node(order: int, gpus: list[int], model: str = "G2", cpu: int = 64_000, memory: int = 1 << 20) -> NodeState:
    return NodeState(f"n{order}", model, order, cpu, memory, gpus)


# --- cluster -------------------------------------------------------------------------------------------------


def test_cpu_only_nodes_are_left_out_and_order_follows_the_file() -> None:
    cluster = fresh_cluster(NODES)
    assert [(n.name, n.order, n.gpu_free) for n in cluster] == [("n0", 0, [1000, 1000]), ("n2", 1, [1000] * 4)]


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        (pod("p", 0, 0), True),
        (pod("p", 1, 500), True),
        (pod("p", 1, 700), True),
        (pod("p", 1, 1000), True),
        (pod("p", 2, 1000), False),  # only one GPU fully free
        (pod("p", 1, 300, spec=("G2",)), False),
        (pod("p", 1, 300, spec=("G2", "T4")), True),
        (pod("p", 1, 300, cpu=9000), False),
        (pod("p", 0, 0, memory=5000), False),
    ],
)
def test_fits(request_: TracePod, expected: bool) -> None:
    state = fresh_cluster(NODES)[0]
    bind(state, pod("x", 1, 400), (0,))
    assert fits(state.key(), request_) is expected


def test_bind_records_the_kind_of_gpu_pod_in_the_key() -> None:
    state = node(0, [1000, 1000])
    bind(state, pod("a", 1, 300), (1,))
    bind(state, pod("b", 0, 0), ())
    bind(state, pod("c", 1, 1000), (0,))
    assert state.key() == ("G2", 64_000 - 3000, (1 << 20) - 30, (0, 700), ("1-gpu", "share"))


def test_gpu_helpers() -> None:
    assert lowest_free([1000, 300, 1000, 1000], 2) == (0, 2)
    assert tightest([1000, 600, 500, 500], 500) == 2
    assert scored_cpu(pod("p", 0, 0, cpu=0)) == 100
    assert scored_cpu(pod("p", 0, 0, cpu=250)) == 250


# --- workload: shuffle, inflation quirk, trimming -------------------------------------------------------------


def test_inflation_stops_on_the_per_gpu_share_so_a_multi_gpu_draw_overshoots() -> None:
    # Target 1.3 × 10 GPUs = 13,000 milli. The only pod asks 8 GPUs: the check adds its per-GPU 1000 to 8000
    # (fits), appends it (16,000), and the next draw stops. The artifact's quirk, kept on purpose.
    inflated = workload((pod("big", 8, 1000),), 10_000, random.Random(1))
    assert sum(p.gpu_request_milli for p in inflated) == 16_000


def test_inflation_appends_until_the_next_draw_would_overshoot() -> None:
    pods = tuple(pod(f"p{i}", 1, 1000) for i in range(4))
    inflated = workload(pods, 10_000, random.Random(1))
    assert sum(p.gpu_request_milli for p in inflated) == 13_000
    assert sorted(p.name for p in inflated[:4]) == ["p0", "p1", "p2", "p3"]  # the shuffled originals come first


def test_a_list_above_the_target_is_trimmed_to_at_or_below_it() -> None:
    big = tuple(pod(f"p{i}", 8, 1000) for i in range(4))
    trimmed = workload(big, 10_000, random.Random(1))
    assert sum(p.gpu_request_milli for p in trimmed) == 8_000


def test_a_list_without_gpu_requests_cannot_be_inflated() -> None:
    with pytest.raises(ValueError, match="asks for no GPU"):
        workload((pod("cpu", 0, 0),), 10_000, random.Random(1))


def test_the_order_depends_on_the_seed_not_on_the_file_order() -> None:
    pods = tuple(pod(f"p{i}", 1, 100) for i in range(30))
    assert workload(pods, 10_000, random.Random(7)) == workload(tuple(reversed(pods)), 10_000, random.Random(7))
    assert workload(pods, 10_000, random.Random(7)) != workload(pods, 10_000, random.Random(8))


# --- typical shapes and the fragmentation measure ------------------------------------------------------------


def test_typical_shapes_take_the_shape_that_crosses_95_percent_and_renormalise() -> None:
    pods = (*(pod(f"a{i}", 1, 500) for i in range(18)), pod("b", 1, 300), pod("c", 0, 0))
    shapes = typical_shapes(pods)
    # 18/20 = 90 % < 95 %: the next shape is taken too (19/20 = 95 %), then the cut; weights sum to 1.
    assert [(s.gpu_milli, round(s.weight, 4)) for s in shapes] == [(500, round(18 / 19, 4)), (300, round(1 / 19, 4))]


def test_typical_shapes_rank_equal_counts_larger_shape_first() -> None:
    pods = (pod("a", 1, 300), pod("b", 1, 700), pod("c", 0, 0, cpu=0))
    shapes = typical_shapes(pods)
    assert [(s.cpu_milli, s.gpu_milli) for s in shapes] == [(1000, 700), (1000, 300), (100, 0)]


def test_fragmentation_counts_idle_gpu_a_shape_cannot_use() -> None:
    frag = Fragmentation((Shape(1000, 1, 500, frozenset(), 0.5), Shape(1000, 2, 1000, frozenset({"G2"}), 0.5)))
    # T4 node, GPUs free 300 and 600: the half-GPU shape strands the 300; the 2-GPU G2 shape strands all 900.
    assert frag.of("T4", 8000, (300, 600)) == pytest.approx(0.5 * 300 + 0.5 * 900)
    assert frag.of("G2", 8000, (1000, 1000)) == 0.0
    assert frag.of("G2", 500, (1000, 1000)) == 2000.0  # CPU short: everything idle is fragment
    assert frag.of("G2", 8000, ()) == 0.0


def test_a_cpu_only_shape_counts_all_idle_gpu_even_when_it_fits() -> None:
    frag = Fragmentation((Shape(1000, 0, 0, frozenset(), 0.25), Shape(1000, 1, 500, frozenset(), 0.75)))
    assert frag.of("G2", 64_000, (1000, 200)) == pytest.approx(0.25 * 1200 + 0.75 * 200)


# --- policies on crafted nodes --------------------------------------------------------------------------------


def test_dotprod_score() -> None:
    key = node(0, [1000, 1000], cpu=64_000).key()
    # (64000/128000 × 8000/128000 + 2000/8000 × 1000/8000) / 2 = 0.03125 → ⌊100 × 0.96875⌋
    assert DotProdScorer().score(key, 8000, 1, 1000, "1-gpu") == 96


def test_gpu_clustering_bands() -> None:
    policy = GpuClusteringScorer()
    share_only = (*node(0, [500]).key()[:4], ("share",))
    mixed = (*node(0, [500]).key()[:4], ("1-gpu", "share"))
    idle = node(0, [1000, 1000]).key()
    assert policy.score(share_only, 1000, 1, 300, "share") == 25 * 7500 // 8000 + 75
    assert policy.score(mixed, 1000, 1, 300, "share") == 25 * 7500 // 8000 + 50
    assert policy.score(idle, 1000, 1, 300, "share") == 25 * 6000 // 8000 + 25
    assert policy.score(share_only, 1000, 1, 1000, "1-gpu") == 25 * 7500 // 8000
    assert policy.score(idle, 1000, 0, 0, None) == 0


def test_gpu_packing_cases() -> None:
    policy = GpuPackingScorer()
    assert policy.score(node(0, [1000] * 8).key(), 1000, 1, 500, "share") == 25
    assert policy.score(node(0, [1000] * 2).key(), 1000, 1, 500, "share") == 31
    assert policy.score(node(0, [1000, 300]).key(), 1000, 1, 200, "share") == 97
    assert policy.score(node(0, [1000, 300]).key(), 1000, 1, 500, "share") == 49
    assert policy.score(node(0, [0, 1000, 1000, 1000]).key(), 1000, 2, 1000, "2-gpu") == 48
    assert policy.score(node(0, [0, 1000]).key(), 1000, 0, 0, None) == 0


def test_bestfit_score_and_gpu() -> None:
    policy = BestFitScorer()
    key = node(0, [1000, 400], cpu=32_000).key()
    assert policy.score(key, 16_000, 1, 300, "share") == int((1 - (16_000 / 128_000 * 0.5 + 1100 / 8000 * 0.5)) * 100)
    assert policy.gpus(node(0, [1000, 400, 300]), 1, 300, 1000) == (2,)
    assert policy.gpus(node(0, [1000, 400, 1000]), 2, 1000, 1000) == (0, 2)
    assert policy.gpus(node(0, [1000]), 0, 0, 1000) == ()


def _groups(*states: NodeState) -> _Groups:
    return _Groups(list(states))


def test_equal_scores_go_to_the_earliest_node() -> None:
    groups = _groups(node(0, [1000, 1000]), node(1, [1000, 1000]), node(2, [1000, 1000], cpu=32_000))
    big = pod("p", 1, 1000, cpu=32_000)
    assert choose(groups, DotProdScorer(), big, random.Random(1)) == 2  # less free CPU left: higher score
    assert choose(groups, DotProdScorer(), pod("p", 1, 1000), random.Random(1)) == 0  # equal integer scores
    groups = _groups(node(3, [1000, 1000]), node(1, [1000, 1000]))
    assert choose(groups, DotProdScorer(), pod("p", 1, 1000), random.Random(1)) == 1


def test_bestfit_normalises_then_picks_the_highest() -> None:
    groups = _groups(node(0, [1000] * 8), node(1, [1000, 300]), node(2, [1000, 300]))
    assert choose(groups, BestFitScorer(), pod("p", 1, 300), random.Random(1)) == 1
    same = _groups(node(5, [1000]), node(4, [1000]))
    assert choose(same, BestFitScorer(), pod("p", 1, 300), random.Random(1)) == 4  # span 0: all 0, earliest


def test_no_feasible_node_means_the_pod_fails() -> None:
    groups = _groups(node(0, [300]))
    assert choose(groups, BestFitScorer(), pod("p", 1, 500), random.Random(1)) is None


def test_fgd_quantised_scores_tie_and_the_earliest_node_wins() -> None:
    shapes = (Shape(1000, 1, 500, frozenset(), 0.3), Shape(1000, 1, 100, frozenset(), 0.7))
    policy = FgdScorer(shapes)
    first = node(0, [1000])  # placing 100 leaves 900: Δ = 0 → ⌊100 σ(0)⌋ = 50
    better = node(1, [100, 1000])  # filling the 100 removes 30 of fragment: Δ = +30 → ⌊100 σ(0.03)⌋ = 50 too
    request = pod("p", 1, 100)
    assert policy.score(first.key(), 1000, 1, 100, "share") == 50
    assert policy.score(better.key(), 1000, 1, 100, "share") == 50
    assert choose(_groups(first, better), policy, request, random.Random(1)) == 0
    assert policy.gpus(better, 1, 100, 1000) == (0,)  # both GPUs score 50 there: the first index


def test_fgd_scores_whole_gpu_and_cpu_only_pods() -> None:
    policy = FgdScorer((Shape(4000, 1, 1000, frozenset(), 1.0),))
    assert policy.score(node(0, [1000, 1000]).key(), 1000, 1, 1000, "1-gpu") == 50
    # A CPU-only pod that leaves less CPU than the shape needs strands both GPUs: Δ = −2000.
    assert policy.score(node(0, [1000, 1000], cpu=4000).key(), 1000, 0, 0, None) == int(100 / (1 + 2.718281828**2))
    assert policy.gpus(node(0, [0, 1000, 1000]), 1, 1000, 1000) == (1,)


def test_random_picks_uniformly_among_feasible_nodes_and_gpus() -> None:
    rng = random.Random(3)
    policy = RandomScorer(rng)
    groups = _groups(node(0, [1000]), node(1, [1000]), node(2, [100]), node(3, [1000]))
    picks = {choose(groups, policy, pod("p", 1, 500), rng) for _ in range(60)}
    assert picks == {0, 1, 3}
    gpus = {policy.gpus(node(0, [1000, 200, 600]), 1, 500, 1000) for _ in range(40)}
    assert gpus == {(0,), (2,)}
    assert policy.gpus(node(0, [0, 1000]), 1, 1000, 1000) == (1,)
    with pytest.raises(NotImplementedError):
        policy.score(node(0, [1000]).key(), 1000, 1, 500, "share")


def test_microcosm_uses_the_engine_scorer_and_prefers_a_used_node() -> None:
    policy = MicrocosmScorer((Shape(1000, 1, 500, frozenset(), 1.0),))
    idle, used = node(0, [1000, 1000]), node(1, [1000, 0])
    assert choose(_groups(idle, used), policy, pod("p", 1, 1000), random.Random(1)) == 1
    assert policy.gpus(used, 1, 1000, 1000) == (0,)


def test_an_unknown_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown B1 scorer 'tetris'"):
        make_scorer("tetris", (), random.Random(1))


# --- curve bucketing -----------------------------------------------------------------------------------------


def test_curve_rounds_half_to_even_and_fills_a_gap_from_its_neighbours() -> None:
    # 100 GPUs: arrived 50.5 % rounds to 50, 51.5 % to 52; bucket 51 has no sample of its own.
    samples = [(50_500, 40_000), (51_500, 41_000), (53_000, 42_345)]
    curve = dict(bucket_curve(samples, 100_000))
    assert curve[50] == 40.0
    assert curve[51] == 40.5
    assert curve[52] == 41.0
    assert curve[53] == 42.34 or curve[53] == 42.35
    assert 49 in curve and 48 not in curve


# --- whole replays -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "policy", ["random", "dotprod", "gpu-clustering", "gpu-packing", "bestfit", "fgd", "microcosm"]
)
def test_a_tiny_replay_is_deterministic_and_never_overcommits(policy: str) -> None:
    pods = tuple(pod(f"p{i}", n, m) for i, (n, m) in enumerate([(1, 500), (1, 300), (2, 1000), (0, 0), (1, 1000)]))
    first = run_b1(NODES, pods, policy, 42)
    assert first == run_b1(NODES, pods, policy, 42)
    assert all(0.0 <= allocation <= 100.0 for _, allocation in first.curve)
    assert first.unallocated_pct_at(999) is None
    assert 100 <= first.curve[-1][0] <= 130


#: First 200 pods of the default list on the first 50 GPU nodes, seed 42: (unallocated % at 100, failed,
#: pods tried).
#: Pinned figures: a change here is a change of protocol or policy and must be explained.
REGRESSION = {
    "random": (9.1, 55, 359),
    "dotprod": (2.82, 69, 359),
    "gpu-clustering": (2.82, 69, 359),
    "gpu-packing": (2.82, 69, 359),
    "bestfit": (2.82, 69, 359),
    "fgd": (2.01, 67, 359),
    "microcosm": (2.01, 67, 359),
}


@pytest.fixture(scope="module")
def trace_slice() -> tuple[tuple[TraceNode, ...], tuple[TracePod, ...]]:
    nodes = load_openb_nodes(TRACES / "openb_node_list_gpu_node.csv")[:50]
    pods = load_openb_pods(TRACES / "openb_pod_list_default.csv")[:200]
    return nodes, pods


@pytest.mark.parametrize("policy", sorted(REGRESSION))
def test_regression_on_a_slice_of_the_real_trace(
    policy: str, trace_slice: tuple[tuple[TraceNode, ...], tuple[TracePod, ...]]
) -> None:
    nodes, pods = trace_slice
    result = run_b1(nodes, pods, policy, 42)
    assert (result.unallocated_pct_at(100), result.failed, result.pods_tried) == REGRESSION[policy]
