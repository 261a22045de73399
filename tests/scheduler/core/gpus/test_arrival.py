"""The provisioning model's documented defaults (scheduler/core/gpus/arrival.py)."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest

from scheduler.core.gpus.arrival import (
    ANY_CLOUD,
    FAIL_AFTER_S,
    MODELS,
    ArrivalModel,
    arrival_model,
    default_arrival_s,
    stockout_probability,
)


def test_default_arrival_is_the_triangular_mean_of_the_sourced_bounds() -> None:
    assert default_arrival_s("H100-SXM5-80GB") == pytest.approx((260 + 420 + 900) / 3)
    assert default_arrival_s("A100-SXM4-80GB", "aws") == default_arrival_s("A100-SXM4-80GB")


def test_stockout_grows_with_scarcity_and_request_size() -> None:
    assert stockout_probability("A100-SXM4-80GB") == pytest.approx(0.05)
    assert stockout_probability("H100-SXM5-80GB") == pytest.approx(0.10)
    assert stockout_probability("H200-SXM-141GB") == pytest.approx(0.15)
    # All or nothing: two nodes fail when either does.
    assert stockout_probability("H100-SXM5-80GB", 2) == pytest.approx(1 - 0.9**2)
    assert arrival_model("H100-SXM5-80GB").stockout(0) == 0.0


def test_a_cloud_entry_overrides_the_class_default(monkeypatch: pytest.MonkeyPatch) -> None:
    own = ArrivalModel("H100", "gcp", 100.0, 200.0, 300.0, 0.0)
    monkeypatch.setitem(MODELS, ("H100", "gcp"), own)
    assert arrival_model("H100-SXM5-80GB", "gcp") is own
    assert arrival_model("H100-SXM5-80GB", "aws").cloud == ANY_CLOUD


def test_unknown_model_or_class_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(KeyError, match="unknown GPU model 'T4'"):
        arrival_model("T4")
    monkeypatch.delitem(MODELS, ("H200", ANY_CLOUD))
    with pytest.raises(KeyError, match="no provisioning model for GPU class 'H200'"):
        arrival_model("H200-SXM-141GB")


def test_draws_are_seeded_bounded_and_take_two_numbers_each() -> None:
    model = arrival_model("H100-SXM5-80GB")
    assert model.draw(random.Random(7), 1) == model.draw(random.Random(7), 1)
    rng = random.Random(1)
    draws = [model.draw(rng, 4) for _ in range(400)]
    arrived = [d for d in draws if d is not None]
    assert all(model.low_s <= d <= model.high_s for d in arrived)
    assert 0 < draws.count(None) < len(draws)
    # The same number of draws whatever the outcome: a sure stockout leaves the stream where a success would.
    sure, never = random.Random(3), random.Random(3)
    assert ArrivalModel("H100", "*", 1.0, 2.0, 3.0, 0.999999).draw(sure, 50) is None
    assert ArrivalModel("H100", "*", 1.0, 2.0, 3.0, 0.0).draw(never, 50) is not None
    assert sure.random() == never.random()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"low_s": 0.0}, "low_s <= mode_s"),
        ({"mode_s": 1000.0}, "low_s <= mode_s"),
        ({"high_s": float("inf"), "mode_s": 500.0}, "low_s <= mode_s"),
        ({"stockout_per_node": 1.0}, "stockout_per_node"),
        ({"fail_after_s": 0.0}, "fail_after_s"),
    ],
)
def test_bad_models_are_refused(kwargs: dict[str, Any], message: str) -> None:
    base = ArrivalModel("H100", "*", 260.0, 420.0, 900.0, 0.1)
    with pytest.raises(ValueError, match=message):
        replace(base, **kwargs)
    assert FAIL_AFTER_S == 900.0
