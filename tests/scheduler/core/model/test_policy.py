"""Policy.from_mapping: settings and scenario mappings become a Policy; unknown keys are named."""

from __future__ import annotations

import pytest

from scheduler.core.model.policy import Policy


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({}, Policy()),
        ({"cycle_s": 5.0, "fairness": False}, Policy(cycle_s=5.0, fairness=False)),
        (
            {"mig": False, "reconfiguration_hysteresis_cycles": 1},
            Policy(mig=False, reconfiguration_hysteresis_cycles=1),
        ),
    ],
)
def test_known_keys_build_the_policy(values: dict[str, object], expected: Policy) -> None:
    assert Policy.from_mapping(values) == expected


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"cycle": 5}, "unknown policy keys: cycle;"),
        ({"zeta": 1, "alpha": 2, "cycle_s": 3.0}, "unknown policy keys: alpha, zeta;"),  # sorted, known ones aside
    ],
)
def test_unknown_keys_are_an_error_that_names_them_and_lists_the_known(values: dict[str, object], named: str) -> None:
    with pytest.raises(ValueError) as raised:
        Policy.from_mapping(values)
    message = str(raised.value)
    assert message.startswith(named)
    known = (
        "known: consolidation_hysteresis_cycles, consolidation_interval_s, consolidation_reconfigures, cycle_s, "
        "default_runtime_s, fairness, "
        "memory_safety_margin, mig, mig_reconfigure_s, min_runtime_s, moves_per_cycle, moves_per_job_per_day"
    )
    assert known in message
