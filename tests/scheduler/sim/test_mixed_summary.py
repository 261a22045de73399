"""B2's median-and-spread summary over seeds and the claims judged on it, on hand-made per-seed figures."""

from __future__ import annotations

from typing import Any

from scheduler.sim.bench.mixed_run import PlannerResult
from scheduler.sim.bench.mixed_summary import PlannerSummary, claims, flat


def figures(effective: float, p95: float, idle: float, evictions: float, eta: tuple[float, float]) -> dict[str, Any]:
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
    }


def summary(name: str, rows: list[dict[str, Any]]) -> PlannerSummary:
    return PlannerSummary(name, {42 + i: PlannerResult(name, row, (), 1.0, 0) for i, row in enumerate(rows)})


def test_flat_names_every_figure_and_leaves_unmeasured_ones_none() -> None:
    row = flat(figures(0.5, 10.0, 0.1, 3, (0.2, 0.5)))
    assert row["effective_utilization"] == 0.5 and row["evictions.priority"] == 3 and row["evictions.spot"] is None
    assert row["production_inference_wait_s.p95"] == 10.0 and row["queue_wait_s.low.p95"] is None
    assert row["eta_error.p90"] == 0.5
    assert row["production_avoidable_wait_s.p95"] is None  # a run without the cycle log
    judged = flat({**figures(0.5, 10.0, 0.1, 3, (0.2, 0.5)), "production_avoidable_wait_s": {"p95": 10.0, "max": 20.0}})
    assert (judged["production_avoidable_wait_s.p95"], judged["production_avoidable_wait_s.max"]) == (10.0, 20.0)


def test_claims_are_judged_on_medians_and_the_production_wait_on_the_worst_seed() -> None:
    ours = summary(
        "microcosm",
        [
            figures(0.85, 5.0, 0.01, 10, (0.1, 0.3)),
            figures(0.82, 40.0, 0.02, 20, (0.2, 0.5)),
            figures(0.50, 8.0, 0.30, 90, (0.9, 0.9)),
        ],
    )
    naive = summary("naive", [figures(0.4, 1.0, 0.0, 0, (0.0, 0.0))] * 3)
    assert ours.figures["effective_utilization"] == {"median": 0.82, "min": 0.5, "max": 0.85}
    judged = {
        c.claim.split(": ", 1)[1]: c.reproduced for c in claims("serving", {"microcosm": ours, "naive": naive}, [])
    }
    assert judged["microcosm effective utilization ≥ 80 % (median)"] is True
    assert judged["microcosm effective utilization ≥ 2× naive (medians)"] is True  # 0.82 / 0.4
    assert judged["production inference wait p95 ≤ 30 s on every seed"] is False  # one seed waited 40 s
    assert judged["idle_while_pending ≤ 5 % (median)"] is True
    assert judged["eta_error p50 ≤ 25 % and p90 ≤ 60 % (medians)"] is True
    balanced = [c.claim for c in claims("balanced", {"microcosm": ours}, [])]
    assert any("evictions per 8 h window ≤ 30" in c for c in balanced)
    assert not any("2× naive" in c for c in balanced)


def test_a_failed_seed_is_left_out_of_the_median_and_named() -> None:
    ok = PlannerResult("microcosm", figures(0.8, 5.0, 0.0, 0, (0.1, 0.1)), (), 1.0, 0)
    failed = PlannerResult("microcosm", None, (), 1.0, 0, error="boom")
    summary_ = PlannerSummary("microcosm", {42: ok, 43: failed})
    assert summary_.figures["effective_utilization"]["median"] == 0.8
    assert summary_.as_dict()["status"] == "partly failed" and summary_.as_dict()["errors"] == {"43": "boom"}
