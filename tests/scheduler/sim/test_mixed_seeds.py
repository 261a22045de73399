"""The shared ``--seeds`` parser and the median-and-spread summary of a figure over seeds."""

from __future__ import annotations

import pytest

from scheduler.sim.bench import openb_cli
from scheduler.sim.bench.registry import BenchUsageError
from scheduler.sim.bench.seeds import parse_seeds, seed_spread, seed_text, spread, spread_text, worst


@pytest.mark.parametrize(
    ("text", "expected"),
    [("42-46", [42, 43, 44, 45, 46]), ("42", [42]), ("42,45", [42, 45]), ("42-43, 43-44", [42, 43, 44])],
)
def test_seed_ranges_and_lists(text: str, expected: list[int]) -> None:
    assert parse_seeds(text) == expected


@pytest.mark.parametrize("text", ["x", "46-42", "-1", "42-"])
def test_bad_seeds_say_what_to_fix(text: str) -> None:
    with pytest.raises(BenchUsageError, match="--seeds"):
        parse_seeds(text)


def test_openb_uses_the_shared_parser() -> None:
    assert openb_cli.parse_seeds is parse_seeds


def test_seed_text() -> None:
    assert seed_text([42, 43, 44, 45, 46]) == "42–46"
    assert seed_text([42, 45]) == "42, 45"
    assert seed_text([7]) == "7"


def test_spread_is_median_and_min_max_leaving_out_unmeasured_seeds() -> None:
    assert spread([3.0, 1.0, 2.0, None]) == {"median": 2.0, "min": 1.0, "max": 3.0}
    assert spread([1.0, 2.0]) == {"median": 1.5, "min": 1.0, "max": 2.0}
    assert spread([None]) == {"median": None, "min": None, "max": None}


def test_spread_text() -> None:
    assert spread_text({"median": 0.5, "min": 0.25, "max": 0.75}, "{:.0%}") == "50% (25%–75%)"
    assert spread_text({"median": 2.0, "min": 2.0, "max": 2.0}) == "2"
    assert spread_text({"median": None, "min": None, "max": None}) == "-"


def test_worst_is_the_lowest_when_higher_is_better_and_the_highest_otherwise() -> None:
    values = {42: 0.7, 43: 0.55, 44: None, 45: 0.9}
    assert worst(values, higher_is_better=True) == (43, 0.55)
    assert worst(values, higher_is_better=False) == (45, 0.9)
    assert worst({42: None}, higher_is_better=True) is None


def test_worst_ties_go_to_the_lowest_seed_whatever_the_order() -> None:
    assert worst({50: 3.0, 44: 3.0, 47: 1.0}, higher_is_better=False) == (44, 3.0)


def test_seed_spread_is_the_spread_with_the_worst_seed_beside_it() -> None:
    assert seed_spread({42: 3.0, 43: 1.0, 44: 2.0}, higher_is_better=False) == {
        "median": 2.0,
        "min": 1.0,
        "max": 3.0,
        "worst": 3.0,
        "worst_seed": 42,
    }
    assert seed_spread({42: None}, higher_is_better=True) == {
        "median": None,
        "min": None,
        "max": None,
        "worst": None,
        "worst_seed": None,
    }
