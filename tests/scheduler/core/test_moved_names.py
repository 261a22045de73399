"""The apps still import fair share and limits by their old module names; those re-export the rules' own
objects (no copy that could drift)."""

from __future__ import annotations

import scheduler.core.fairshare as old_fairshare
import scheduler.core.limits as old_limits
from scheduler.core.rules import fairshare, limits


def test_old_names_are_the_rules_objects() -> None:
    for name in old_fairshare.__all__:
        assert getattr(old_fairshare, name) is getattr(fairshare, name)
    for name in old_limits.__all__:
        assert getattr(old_limits, name) is getattr(limits, name)
