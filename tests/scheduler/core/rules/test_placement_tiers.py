"""Tier routing: which capacity tiers a job may use, most preferred first."""

from __future__ import annotations

import pytest

from scheduler.core.model.vocabulary import CapacityTier, JobKind, JobTier, Priority
from scheduler.core.rules.tiers import allowed_tiers, tier_rank
from tests.scheduler.properties.builders import job

R, OD, S = CapacityTier.RESERVED, CapacityTier.ON_DEMAND, CapacityTier.SPOT


@pytest.mark.parametrize(
    ("tier", "priority", "expected"),
    [
        (JobTier.ANY, Priority.NORMAL, (R, OD, S)),
        (JobTier.ANY, Priority.PRODUCTION, (R, OD)),
        (JobTier.SPOT_OK, Priority.LOW, (S, R, OD)),
        (JobTier.SPOT_OK, Priority.PRODUCTION, (R, OD)),
        (JobTier.RESERVED_ONLY, Priority.HIGH, (R,)),
        (JobTier.RESERVED_ONLY, Priority.PRODUCTION, (R,)),
    ],
)
def test_allowed_tiers(tier: JobTier, priority: Priority, expected: tuple[CapacityTier, ...]) -> None:
    the_job = job("j", tier=tier, priority=priority, kind=JobKind.INFERENCE)
    assert allowed_tiers(the_job) == expected
    assert tier_rank(the_job) == {t.value: i for i, t in enumerate(expected)}
