"""The preemption search bound (scheduler.core.rules.search_bound) and the policy setting it reads."""

from __future__ import annotations

import pytest

from scheduler.core.model.policy import Policy
from scheduler.core.model.vocabulary import JobKind, Priority
from scheduler.core.rules.search_bound import counts, may_search, skipped_text
from tests.scheduler.properties.builders import job

PRODUCTION = job("p", priority=Priority.PRODUCTION, kind=JobKind.INFERENCE)
NORMAL = job("j")


def test_only_non_production_work_counts_against_the_bound() -> None:
    assert counts(NORMAL) and not counts(PRODUCTION)


@pytest.mark.parametrize(
    ("bound", "position", "expected"),
    [(None, 10**6, True), (2, 1, True), (2, 2, True), (2, 3, False), (0, 1, False)],
)
def test_the_first_n_of_a_teams_jobs_may_search(bound: int | None, position: int, expected: bool) -> None:
    assert may_search(NORMAL, position, Policy(preemption_search_per_team=bound)) is expected


def test_production_is_never_bounded() -> None:
    assert may_search(PRODUCTION, 10**6, Policy(preemption_search_per_team=0))


def test_the_reason_names_the_bound() -> None:
    text = skipped_text(Policy(preemption_search_per_team=100))
    assert "first 100 jobs in queue order (production aside) may preempt" in text


@pytest.mark.parametrize("bad", [-1, 1.5, True, "100"])
def test_a_bound_that_is_not_a_whole_number_is_refused_with_its_name(bad: object) -> None:
    with pytest.raises(ValueError, match="preemption_search_per_team must be None or a whole number >= 0"):
        Policy.from_mapping({"preemption_search_per_team": bad})


@pytest.mark.parametrize("good", [None, 0, 100])
def test_none_and_whole_numbers_are_accepted(good: int | None) -> None:
    assert Policy.from_mapping({"preemption_search_per_team": good}).preemption_search_per_team == good
