"""The Kubernetes gateway's tests: the clock the MIG flow and Event tests move by hand."""

from __future__ import annotations

import pytest

from tests.scheduler.kube_emulator import ManualClock


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()
