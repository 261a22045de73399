"""A seeded fleet and team for the scheduler app's services (the clock: tests/scheduler/conftest.py)."""

from __future__ import annotations

import pytest

from tests.scheduler.loop_helpers import fleet_seed, team_seed


@pytest.fixture
def team(db):
    fleet_seed()
    return team_seed()
