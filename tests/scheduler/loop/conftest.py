"""Fixtures of the loop's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.scheduler.loop.provisioning_helpers import plans


@pytest.fixture
def hand_decided() -> Iterator[None]:
    """Every cycle of the test plans without the engine's own provisioning decisions
    (:func:`tests.scheduler.loop.provisioning_helpers.plans`): the loop's side is tested on decisions made by hand."""
    with plans(lambda _snapshot, plan: plan):
        yield
