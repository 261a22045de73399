"""Production wait becomes advice (billing.advisor.advise_production_wait): hours waited, the peak and the p95 of
the demand production could not hold, and what to buy or which burst limit to raise, worked by hand."""

from __future__ import annotations

import math

import pytest

from billing.advisor import (
    AdvisorInputError,
    WaitRecord,
    advise_production_wait,
    wait_text,
    weighted_percentile,
)

H = 3600.0


def held(
    at: float, gpus: float, gpu_class: str = "H100", seconds: float = 10.0, short: float | None = None
) -> WaitRecord:
    """Production held out of a class, ``short`` GPUs short of its capacity (by default all that waited)."""
    short = gpus if short is None else short
    return WaitRecord(at=at, gpu_class=gpu_class, cause="held", team="", gpus=gpus, seconds=seconds, short_gpus=short)


def burst(
    at: float,
    gpus: float,
    need: float,
    team: str = "nlp",
    scope: str = "H100",
    gpu_class: str = "H100",
    seconds: float = 10.0,
) -> WaitRecord:
    """``gpus`` of team ``team``'s production refused by its limit on ``scope``, under which it needed ``need``."""
    return WaitRecord(
        at=at, gpu_class=gpu_class, cause="burst", team=team, gpus=gpus, seconds=seconds, scope=scope, need_gpus=need
    )


@pytest.mark.parametrize(
    ("seconds", "text"), [(0, "0 s"), (59, "59 s"), (60, "1 min"), (3599, "60 min"), (3600, "1.0 h"), (18_720, "5.2 h")]
)
def test_how_long_production_waited_reads(seconds, text) -> None:
    assert wait_text(seconds) == text


@pytest.mark.parametrize(
    ("values", "weights", "q", "expected"),
    [
        ([1.0], [1.0], 95, 1.0),
        ([1.0, 2.0, 3.0], [1.0, 1.0, 1.0], 50, 2.0),  # the smallest value with half the weight at or below it
        ([1.0, 2.0, 3.0], [1.0, 1.0, 1.0], 95, 3.0),
        ([4.0, 1.0], [19.0, 1.0], 95, 4.0),  # order of the input does not matter
        ([1.0, 4.0], [19.0, 1.0], 95, 1.0),  # 95 % of the time at 1 GPU: the rare peak is not the p95
        ([1.0, 4.0], [18.0, 2.0], 95, 4.0),
        ([2.0, 2.0, 8.0], [5.0, 5.0, 0.0], 100, 2.0),  # a value held for no time never counts
    ],
)
def test_the_time_weighted_percentile(values, weights, q, expected) -> None:
    assert weighted_percentile(values, weights, q) == expected


@pytest.mark.parametrize(
    ("values", "weights", "q", "message"),
    [
        ([], [], 95, "no production wait"),
        ([1.0], [1.0, 2.0], 95, "one weight per value"),
        ([1.0], [0.0], 95, "no time"),
        ([1.0], [1.0], 101, "outside 0–100"),
        ([math.nan], [1.0], 95, "finite"),
        ([1.0], [-1.0], 95, "finite"),
    ],
)
def test_the_percentile_refuses_what_it_cannot_weigh(values, weights, q, message) -> None:
    with pytest.raises(AdvisorInputError, match=message):
        weighted_percentile(values, weights, q)


def test_held_wait_becomes_gpus_to_reserve_rounded_up_to_the_purchase_unit() -> None:
    # 100 cycles of 10 s: 95 of them 3 H100 GPUs waited, 5 of them 10: the p95 is 3, the peak 10.
    records = [held(i * 10.0, 3.0) for i in range(95)] + [held(950.0 + i * 10.0, 10.0) for i in range(5)]

    (advice,) = advise_production_wait(records, purchase_unit_gpus=8, period="this week")

    assert advice.gpu_class == "H100"
    assert advice.hours == pytest.approx(1000 / H)
    assert advice.held is not None and advice.bursts == ()
    assert advice.held.short_peak_gpus == 10.0 and advice.held.short_p95_gpus == 3.0
    assert advice.held.gpu_hours == pytest.approx((95 * 3 + 5 * 10) * 10 / H)
    assert advice.held.reserve_gpus == 8  # 3 GPUs, rounded up to one purchase of 8
    assert advice.sentence == "Production waited 17 min this week on H100: reserve 8 more H100 GPUs"


@pytest.mark.parametrize(
    ("unit", "p95", "expected"), [(1, 3.0, 3), (1, 3.2, 4), (8, 8.0, 8), (8, 8.5, 16), (4, 0.3, 4)]
)
def test_the_reserve_is_the_p95_rounded_up_to_whole_purchases(unit, p95, expected) -> None:
    (advice,) = advise_production_wait([held(0.0, p95)], purchase_unit_gpus=unit, period="this week")
    assert advice.held is not None and advice.held.reserve_gpus == expected


def test_the_reserve_counts_only_what_the_class_was_short_of() -> None:
    # 4 GPUs waited in every cycle, but the class was short of 1 in 19 cycles of 20, and of none in the last.
    records = [held(i * 10.0, 4.0, short=1.0) for i in range(19)] + [held(190.0, 4.0, short=0.0)]
    (advice,) = advise_production_wait(records, purchase_unit_gpus=1, period="this week")
    assert advice.held is not None
    assert (advice.held.peak_gpus, advice.held.short_peak_gpus, advice.held.short_p95_gpus) == (4.0, 1.0, 1.0)
    assert advice.held.reserve_gpus == 1


def test_a_wait_with_room_on_the_class_advises_no_purchase() -> None:
    (advice,) = advise_production_wait([held(0.0, 2.0, short=0.0)], purchase_unit_gpus=8, period="this week")
    assert advice.held is not None and advice.held.reserve_gpus == 0
    assert advice.sentence == (
        "Production waited 10 s this week on H100: reserve no more H100 GPUs: the class had room for production "
        "at the p95 (MIG-split or scattered GPUs kept it waiting)"
    )


def test_burst_wait_says_which_teams_limit_to_raise_and_to_what() -> None:
    # nlp held 4 H100 GPUs of production at its limit of 4 on H100, and 2 more waited: it needed 6. vision's
    # overall limit refused 1 GPU when it needed 6.5 under it: 7 in whole GPUs.
    records = [burst(i * 10.0, 2.0, need=6.0) for i in range(10)] + [
        burst(0.0, 1.0, need=6.5, team="vision", scope="any")
    ]

    (advice,) = advise_production_wait(
        records,
        purchase_unit_gpus=8,
        period="this week",
        burst_limits={("nlp", "H100"): 4.0, ("nlp", "any"): 100.0, ("vision", "any"): 6.0},
    )

    assert advice.held is None and advice.hours == pytest.approx(100 / H)
    nlp, vision = advice.bursts
    assert (nlp.team, nlp.scope, nlp.peak_gpus, nlp.need_p95_gpus, nlp.limit_gpus, nlp.raise_to_gpus) == (
        "nlp",
        "H100",
        2.0,
        6.0,
        4.0,
        6,
    )
    assert (vision.team, vision.scope, vision.limit_gpus, vision.raise_to_gpus) == ("vision", "any", 6.0, 7)
    assert advice.sentence == (
        "Production waited 2 min this week on H100: raise team nlp's burst on H100 from 4 to 6 GPUs, "
        "or raise team vision's overall burst from 6 to 7 GPUs"
    )


def test_held_and_burst_on_one_class_share_its_hours_and_its_sentence() -> None:
    records = [held(0.0, 1.0), burst(0.0, 2.0, need=10.0, scope="any"), burst(10.0, 2.0, need=9.0, scope="any")]
    records.append(held(20.0, 1.5, seconds=20.0))

    (advice,) = advise_production_wait(
        records, purchase_unit_gpus=1, period="this week", burst_limits={("nlp", "any"): 8.0}
    )

    assert advice.hours == pytest.approx(40 / H)  # three cycles, one of them 20 s: a cycle counts once
    assert advice.held is not None and advice.held.reserve_gpus == 2
    assert advice.sentence == (
        "Production waited 40 s this week on H100: reserve 2 more H100 GPUs, "
        "or raise team nlp's overall burst from 8 to 10 GPUs"
    )


@pytest.mark.parametrize(
    ("limits", "clause"),
    [
        ({}, "team nlp has no burst limit on H100 now (removed since): nothing to raise"),
        (
            {("nlp", "H100"): 6.0},
            "team nlp's burst on H100 is 6 GPUs now, enough for the p95 of its production (5 GPUs)",
        ),
        ({("nlp", "H100"): 4.5}, "raise team nlp's burst on H100 from 4.5 to 5 GPUs"),
    ],
)
def test_the_limit_in_force_now_decides_what_is_said(limits, clause) -> None:
    (advice,) = advise_production_wait(
        [burst(0.0, 1.0, need=4.2)], purchase_unit_gpus=1, period="this week", burst_limits=limits
    )
    assert advice.sentence.endswith(": " + clause)


@pytest.mark.parametrize(
    ("record", "unit", "message"),
    [
        (WaitRecord(at=0.0, gpu_class="H100", cause="late", team="", gpus=1.0, seconds=10.0), 1, "cause 'late'"),
        (WaitRecord(at=0.0, gpu_class="H100", cause="burst", team="", gpus=1.0, seconds=10.0), 1, "names no team"),
        (burst(0.0, 1.0, need=2.0, scope=""), 1, "team nlp names no scope"),
        (burst(0.0, 1.0, need=-2.0), 1, "GPUs ≥ 0"),
        (WaitRecord(at=0.0, gpu_class="", cause="held", team="", gpus=1.0, seconds=10.0), 1, "no GPU class"),
        (WaitRecord(at=0.0, gpu_class="H100", cause="held", team="", gpus=-1.0, seconds=10.0), 1, "GPUs ≥ 0"),
        (held(0.0, 1.0, short=math.nan), 1, "GPUs ≥ 0"),
        (WaitRecord(at=0.0, gpu_class="H100", cause="held", team="", gpus=1.0, seconds=0.0), 1, "seconds above 0"),
        (WaitRecord(at=0.0, gpu_class="H100", cause="held", team="", gpus=1.0, seconds=math.inf), 1, "seconds above 0"),
        (held(0.0, 1.0), 0, "purchase unit must be 1 to 64"),
    ],
)
def test_bad_records_and_units_are_refused_with_what_to_fix(record, unit, message) -> None:
    with pytest.raises(AdvisorInputError, match=message):
        advise_production_wait([record], purchase_unit_gpus=unit, period="this week")
