"""A seeded fleet and team, and a clock the simulated fleet reads, for the scheduler app's services."""

from __future__ import annotations

import pytest

from tests.scheduler.loop_helpers import Clock, fleet_seed, team_seed


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def team(db):
    fleet_seed()
    return team_seed()
