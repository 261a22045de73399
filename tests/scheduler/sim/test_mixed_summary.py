"""B2's median-and-spread summary over seeds, its worst seed per figure and the claims judged on it, on hand-made
per-seed figures."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.sim.bench.mixed_run import PlannerResult
from scheduler.sim.bench.mixed_summary import PlannerSummary, claims, flat, higher_is_better


def figures(
    effective: float,
    p95: float,
    idle: float,
    evictions: float,
    eta: tuple[float, float],
    avoidable: tuple[float, float] = (0.0, 0.0),
) -> dict[str, Any]:
    return {
        "effective_utilization": effective,
        "allocation_ratio": effective,
        "idle_while_pending": idle,
        "training_throughput": 1.0,
        "completed": 3,
        "evictions": evictions,
        "evictions_per_8h": evictions,
        "evictions_by_cause": {"priority": evictions},
        "lost_gpu_hours": 0.0,
        "rejected": 0,
        "production_inference_wait_s": {"p50": 1.0, "p95": p95, "max": p95},
        "queue_wait_s": {"production": {"p50": 1.0, "p95": p95, "max": p95, "jobs": 2, "still_waiting": 0}},
        "eta_error": {"p50": eta[0], "p90": eta[1], "waited": 4, "with_eta": 3},
        "production_avoidable_wait_s": {"p50": 0.0, "p95": avoidable[0], "max": avoidable[1]},
    }


def summary(name: str, rows: list[dict[str, Any]]) -> PlannerSummary:
    return PlannerSummary(name, {42 + i: PlannerResult(name, row, (), 1.0, 0) for i, row in enumerate(rows)})


def test_flat_names_every_figure_and_leaves_unmeasured_ones_none() -> None:
    row = flat(figures(0.5, 10.0, 0.1, 3, (0.2, 0.5)))
    assert row["effective_utilization"] == 0.5 and row["evictions.priority"] == 3 and row["evictions.spot"] is None
    assert row["production_inference_wait_s.p95"] == 10.0 and row["queue_wait_s.low.p95"] is None
    assert row["eta_error.p90"] == 0.5
    unjudged = {**figures(0.5, 10.0, 0.1, 3, (0.2, 0.5)), "production_avoidable_wait_s": None}
    assert flat(unjudged)["production_avoidable_wait_s.p95"] is None  # a run without the cycle log
    judged = flat(figures(0.5, 10.0, 0.1, 3, (0.2, 0.5), avoidable=(10.0, 20.0)))
    assert (judged["production_avoidable_wait_s.p95"], judged["production_avoidable_wait_s.max"]) == (10.0, 20.0)


def judged(mix: str, policies: dict[str, PlannerSummary]) -> dict[str, tuple[str, bool | None]]:
    """Each claim of ``mix`` at load 1.2, without its tag, → (measured, reproduced)."""
    out = {}
    for claim in claims(mix, policies, [], load=1.2, cycle_s=10.0):
        tag, text = claim.claim.split(": ", 1)
        assert tag == f"B2 {mix} at load 1.2"
        out[text] = (claim.measured, claim.reproduced)
    return out


def test_claims_are_judged_on_the_medians_and_on_the_worst_seed_as_each_target_says() -> None:
    ours = summary(
        "microcosm",
        [
            figures(0.85, 5.0, 0.01, 10, (0.1, 0.3), avoidable=(0.0, 10.0)),
            figures(0.82, 40.0, 0.02, 20, (0.2, 0.5), avoidable=(10.0, 30.0)),
            figures(0.74, 8.0, 0.07, 90, (0.9, 0.9), avoidable=(0.0, 0.0)),
        ],
    )
    naive = summary("naive", [figures(0.4, 1.0, 0.0, 0, (0.0, 0.0))] * 3)
    assert ours.figures["effective_utilization"] == {
        "median": 0.82,
        "min": 0.74,
        "max": 0.85,
        "worst": 0.74,
        "worst_seed": 44,
    }
    serving = judged("serving", {"microcosm": ours, "naive": naive})
    assert serving["microcosm effective utilization ≥ 80 % (median)"] == ("82.0%", True)
    assert serving["microcosm effective utilization ≥ 72 % on the worst seed"] == ("74.0% (seed 44)", True)
    assert serving["microcosm effective utilization ≥ 2× naive (medians)"][1] is True  # 0.82 / 0.4
    assert serving["idle_while_pending ≤ 5 % (median)"] == ("2.0%", True)
    assert serving["idle_while_pending ≤ 8 % on the worst seed"] == ("7.0% (seed 44)", True)
    assert serving["production wait avoidable p95 ≤ one cycle (10 s) on every seed"] == (
        "worst seed 43: 10 s (median 0 s)",
        True,
    )
    assert serving["production wait avoidable max ≤ 30 s on every seed"] == ("worst seed 43: 30 s (median 10 s)", True)
    assert serving["eta_error p50 ≤ 25 % and p90 ≤ 60 % (medians)"][1] is True
    assert not any("evictions" in text for text in serving)
    assert not any("production inference wait" in text for text in serving)  # the avoidable part is the target
    balanced = judged("balanced", {"microcosm": ours})
    assert balanced["evictions per 8 h window ≤ 30 (median)"] == ("20", True)
    assert not any("2× naive" in text for text in balanced)


def test_a_good_median_does_not_hide_a_bad_worst_seed() -> None:
    ours = summary(
        "microcosm",
        [
            figures(0.90, 5.0, 0.01, 0, (0.1, 0.3), avoidable=(0.0, 0.0)),
            figures(0.85, 5.0, 0.02, 0, (0.1, 0.3), avoidable=(0.0, 0.0)),
            figures(0.60, 5.0, 0.12, 0, (0.1, 0.3), avoidable=(20.0, 310.0)),
        ],
    )
    verdicts = judged("balanced", {"microcosm": ours})
    assert verdicts["microcosm effective utilization ≥ 80 % (median)"][1] is True
    assert verdicts["microcosm effective utilization ≥ 72 % on the worst seed"] == ("60.0% (seed 44)", False)
    assert verdicts["idle_while_pending ≤ 5 % (median)"][1] is True
    assert verdicts["idle_while_pending ≤ 8 % on the worst seed"] == ("12.0% (seed 44)", False)
    assert verdicts["production wait avoidable p95 ≤ one cycle (10 s) on every seed"][1] is False
    assert verdicts["production wait avoidable max ≤ 30 s on every seed"] == (
        "worst seed 44: 310 s (median 0 s)",
        False,
    )


def test_a_run_that_did_not_judge_production_waits_says_so() -> None:
    row = {**figures(0.85, 5.0, 0.01, 0, (0.1, 0.3)), "production_avoidable_wait_s": None}
    verdicts = judged("balanced", {"microcosm": summary("microcosm", [row])})
    assert verdicts["production wait avoidable max ≤ 30 s on every seed"] == ("no production job in the window", None)


def test_the_worst_seed_follows_each_figures_direction() -> None:
    ours = summary(
        "microcosm",
        [
            figures(0.85, 50.0, 0.01, 10, (0.1, 0.3)),
            figures(0.60, 5.0, 0.20, 20, (0.2, 0.5)),
            figures(0.70, 8.0, 0.02, 90, (0.9, 0.2)),
        ],
    )
    worst = {key: figure["worst_seed"] for key, figure in ours.figures.items()}
    assert worst["effective_utilization"] == 43  # lowest utilization
    assert worst["production_inference_wait_s.p95"] == 42  # highest wait
    assert worst["idle_while_pending"] == 43
    assert worst["evictions_per_8h"] == 44
    assert worst["eta_error.p90"] == 43
    assert worst["completed"] == 42  # every seed completed 3: the tie goes to the lowest seed


@pytest.mark.parametrize(
    ("key", "higher"),
    [
        ("effective_utilization", True),
        ("allocation_ratio", True),
        ("training_throughput", True),
        ("completed", True),
        ("idle_while_pending", False),
        ("evictions.priority", False),
        ("queue_wait_s.low.p95", False),
        ("eta_error.p50", False),
        ("wall_s", False),
        ("a_figure_added_later", False),
    ],
)
def test_direction_of_each_figure(key: str, higher: bool) -> None:
    assert higher_is_better(key) is higher


def test_a_failed_seed_is_left_out_of_the_median_and_named() -> None:
    ok = PlannerResult("microcosm", figures(0.8, 5.0, 0.0, 0, (0.1, 0.1)), (), 1.0, 0)
    failed = PlannerResult("microcosm", None, (), 1.0, 0, error="boom")
    summary_ = PlannerSummary("microcosm", {42: ok, 43: failed})
    assert summary_.figures["effective_utilization"]["median"] == 0.8
    assert summary_.as_dict()["status"] == "partly failed" and summary_.as_dict()["errors"] == {"43": "boom"}
