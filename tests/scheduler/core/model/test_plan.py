"""Plan.is_empty: a plan with nothing to apply; explanations alone change nothing in the cluster."""

from __future__ import annotations

import pytest

from scheduler.core.model.plan import Bind, Evict, Plan, Reconfigure, Reject, Waiting
from scheduler.core.model.snapshot import Slot


@pytest.mark.parametrize(
    ("plan", "empty"),
    [
        (Plan(), True),
        (Plan(waiting=(Waiting("j", 1, 1, "waiting for 1 GPU"),)), True),
        (Plan(evictions=(Evict("v", "priority", "j"),)), False),
        (Plan(reconfigurations=(Reconfigure("n", 0, (), (("7g.80gb", 0),), 300.0),)), False),
        (Plan(binds=(Bind("j", ((Slot("n", 0),),)),)), False),
        (Plan(rejections=(Reject("j", "too big"),)), False),
    ],
)
def test_is_empty_only_without_operations(plan: Plan, empty: bool) -> None:
    assert plan.is_empty is empty
