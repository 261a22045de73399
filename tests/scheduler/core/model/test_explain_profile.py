"""The ETA replay's pool (``explain._Profile``): each start it gives is the earliest its definition allows — the
first breakpoint (after now when ``later``) from which ``units`` stay free for the whole run — through claims that
lower it, whatever the scan's shortcuts (the floor kept per question, the window's check over a slice)."""

from __future__ import annotations

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from scheduler.core.model.explain import _Profile
from scheduler.core.speedups.memo import Memo


def _earliest(times: list[float], frees: list[int], units: int, duration_s: float, later: bool) -> float | None:
    """The definition, by brute force over the breakpoints."""
    for i in range(1 if later else 0, len(times)):
        end = times[i] + duration_s
        if all(frees[j] >= units for j in range(i, len(times)) if times[j] < end):
            return times[i]
    return None


releases = st.lists(st.tuples(st.integers(0, 40).map(float), st.integers(1, 6)), max_size=14)
questions = st.lists(
    st.tuples(st.integers(1, 12), st.integers(1, 30).map(float), st.booleans(), st.booleans()), min_size=1, max_size=12
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(releases, questions)
# A claim ending at 1 makes 1 a breakpoint, and so a start the floor of the first question (2) must not skip.
@example([(0.0, 1), (2.0, 1)], [(1, 1.0, True, False), (1, 1.0, False, True), (1, 1.0, True, False)])
def test_every_start_is_the_earliest_the_definition_allows(
    given_releases: list[tuple[float, int]], asked: list[tuple[int, float, bool, bool]]
) -> None:
    pool = _Profile(0.0, given_releases, Memo())
    for units, duration_s, later, claim in asked:
        expected = _earliest(list(pool.times), list(pool.frees), units, duration_s, later)
        assert pool.start(units, duration_s, later=later, claim=claim) == expected


def test_a_run_that_meets_too_little_free_starts_after_it() -> None:
    """Free 2 from 0, 1 from 5 (a claim), 3 from 10: a run of 2 units for 8 s cannot start at 0 (too little at 5), so
    it starts at 10 — where the window's check over the slice must find the dip."""
    pool = _Profile(0.0, [(0.0, 2), (10.0, 1)], Memo())
    assert pool.start(1, 5.0, at=5.0) == 5.0  # a reservation's claim: 1 unit from 5 to 10
    assert pool.start(2, 8.0) == 10.0
    assert pool.start(1, 4.0, claim=False) == 0.0  # 1 unit is free from 0 to 4
