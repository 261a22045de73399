"""The clock the scheduler's Django tests move by hand (the simulated fleet and the loop read it).

The engine's own tests (tests/scheduler/core) run without Django (``-p no:django``): nothing Django is imported
here until a test asks for the fixture.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.scheduler.loop_helpers import Clock


@pytest.fixture
def clock() -> Clock:
    from tests.scheduler.loop_helpers import Clock

    return Clock()
