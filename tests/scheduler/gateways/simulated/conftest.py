"""The simulated fleet's tests: a seeded fleet and team (the clock: tests/scheduler/conftest.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.scheduler.loop_helpers import fleet_seed, team_seed


@pytest.fixture
def team(db: Any) -> Any:
    fleet_seed()
    return team_seed()
