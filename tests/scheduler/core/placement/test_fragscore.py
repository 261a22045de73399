"""The node-level fragmentation scorer: the measure, the gradient classes, the tie-break, the GPU choice."""

from __future__ import annotations

import math

import pytest

from scheduler.core.placement.fragscore import FragScorer, TaskShape, gradient_class

HALF = TaskShape(cpu_milli=4000, gpus=1, milli=500, models=frozenset(), weight=0.5)
TWO_T4 = TaskShape(cpu_milli=8000, gpus=2, milli=1000, models=frozenset({"T4"}), weight=0.5)
CPU_ONLY = TaskShape(cpu_milli=2000, gpus=0, milli=0, models=frozenset(), weight=0.25)


def test_cpu_only_shapes_never_count() -> None:
    scorer = FragScorer((HALF, CPU_ONLY))
    assert scorer.shapes == (HALF,)
    assert scorer.fragmentation("G2", 10_000, (1000, 1000)) == 0.0


@pytest.mark.parametrize(
    ("model", "cpu_free", "gpus", "expected"),
    [
        # HALF fits: only the 300 (< 500) is stranded for it; TWO_T4 fits nowhere on a G2: all 1300 idle.
        ("G2", 10_000, (300, 1000), 0.5 * 300 + 0.5 * 1300),
        # On a T4 with two GPUs of which one is partly used TWO_T4 lacks a second whole GPU: all idle.
        ("T4", 10_000, (300, 1000), 0.5 * 300 + 0.5 * 1300),
        # Both fit: HALF strands nothing, TWO_T4 strands nothing.
        ("T4", 10_000, (1000, 1000), 0.0),
        # CPU short for both: every idle milli is fragment.
        ("T4", 1000, (1000, 1000), 2000.0),
        # Nothing idle, nothing stranded.
        ("T4", 10_000, (0, 0), 0.0),
    ],
)
def test_fragmentation_of_a_node(model: str, cpu_free: int, gpus: tuple[int, ...], expected: float) -> None:
    assert FragScorer((HALF, TWO_T4)).fragmentation(model, cpu_free, gpus) == pytest.approx(expected)


def test_gradient_classes_are_fgd_logistic_classes() -> None:
    assert gradient_class(0.0) == -50
    assert gradient_class(-30.0) == -50  # a small decrease stays in the Δ = 0 class
    assert gradient_class(30.0) == -49  # a small increase is one class worse
    assert gradient_class(-1000.0) == -int(100 / (1 + math.exp(-1)))
    assert gradient_class(5000.0) > gradient_class(1000.0)


def test_a_share_goes_where_it_strands_least_first_of_equals() -> None:
    scorer = FragScorer((HALF,))
    # GPUs free 1000, 700, 500: a 500 share on the 500 GPU fills it exactly (Δ = 0, stays class -50); on
    # the 700 it leaves 200 stranded (Δ = +200); on the 1000 it leaves 500 usable (Δ = 0). The first GPU of
    # the best class wins: index 0 (the 1000) ties with index 2 (the 500) and comes first.
    cost, chosen = scorer.placement("G2", 10_000, [1000, 700, 500], 1000, 1, 500)
    assert chosen == (0,)
    assert cost == (-50, 0)
    _, chosen = scorer.placement("G2", 10_000, [700, 500, 1000], 1000, 1, 500)
    assert chosen == (1,)


def test_whole_gpus_take_the_lowest_free_indexes() -> None:
    scorer = FragScorer((HALF,))
    cost, chosen = scorer.placement("G2", 10_000, [300, 1000, 1000, 1000], 1000, 2, 1000)
    assert chosen == (1, 2)
    assert cost[1] == 0  # the node was in use


def test_an_idle_node_ranks_after_a_used_node_of_the_same_class() -> None:
    scorer = FragScorer((HALF,))
    idle_cost, _ = scorer.placement("G2", 10_000, [1000, 1000], 1000, 1, 1000)
    used_cost, _ = scorer.placement("G2", 10_000, [1000, 1000, 0], 1000, 1, 1000)
    assert idle_cost[0] == used_cost[0]
    assert used_cost < idle_cost


def test_a_cpu_only_task_is_scored_by_what_its_cpu_strands() -> None:
    scorer = FragScorer((HALF,))
    cheap, chosen = scorer.placement("G2", 10_000, [1000], 2000, 0, 0)
    assert chosen == ()
    costly, _ = scorer.placement("G2", 5000, [1000], 2000, 0, 0)  # leaves 3000 < HALF's 4000: all idle stranded
    assert costly > cheap


def test_a_task_that_does_not_fit_is_refused() -> None:
    with pytest.raises(ValueError, match="check fit first"):
        FragScorer((HALF,)).placement("G2", 10_000, [300], 1000, 1, 500)
