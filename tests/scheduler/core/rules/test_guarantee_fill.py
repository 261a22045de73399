"""Fair-share rule 4 as one fill: the order running jobs fill a guarantee in, and which of them are borrowed.
The engine (FairShare) and billing's ledger (billing.guarantee) both call it, so they cannot disagree."""

from __future__ import annotations

from scheduler.core import borrowed_in_fill, fill_order, guarantee_limits
from scheduler.core.gpus.units import UNITS_PER_GPU
from scheduler.core.model.snapshot import Team
from scheduler.core.model.vocabulary import Priority
from scheduler.core.rules.limits import GuaranteeFill

GPU = UNITS_PER_GPU


def test_fill_order_puts_non_preemptible_work_then_priority_then_start_first() -> None:
    jobs = [
        ("late-low", fill_order(False, Priority.LOW, 5.0, "late-low")),
        ("preemptible-production", fill_order(True, Priority.PRODUCTION, 0.0, "preemptible-production")),
        ("early-low", fill_order(False, Priority.LOW, 1.0, "early-low")),
        ("high", fill_order(False, Priority.HIGH, 9.0, "high")),
    ]
    assert [name for name, _ in sorted(jobs, key=lambda item: item[1])] == [
        "high",
        "early-low",
        "late-low",
        "preemptible-production",
    ]


def test_jobs_that_no_longer_fit_are_borrowed_and_later_smaller_ones_still_fill() -> None:
    limits = guarantee_limits(Team(name="t", guaranteed=(("any", 3.0),)))
    jobs = [("a", 2 * GPU, (("A100", 2 * GPU),)), ("b", 2 * GPU, (("A100", 2 * GPU),)), ("c", GPU, (("H100", GPU),))]
    assert borrowed_in_fill(limits, jobs) == ["b"]  # first-fit: c still fits after b did not


def test_a_class_row_bounds_its_class() -> None:
    limits = guarantee_limits(Team(name="t", guaranteed=(("A100", 1.0), ("H100", 4.0))))
    jobs = [("a", GPU, (("A100", GPU),)), ("b", GPU, (("A100", GPU),)), ("c", 2 * GPU, (("H100", 2 * GPU),))]
    assert borrowed_in_fill(limits, jobs) == ["b"]


def test_a_resumed_fill_continues_from_what_it_held() -> None:
    limits = guarantee_limits(Team(name="t", guaranteed=(("any", 2.0),)))
    fill = GuaranteeFill(limits, held=GPU, filled={"A100": GPU})
    assert fill.offer(GPU, (("A100", GPU),)) and not fill.offer(GPU, (("A100", GPU),))
    assert (fill.held, fill.filled) == (2 * GPU, {"A100": 2 * GPU})
