"""The plan digest tool: a refactor proves it changed no decision by leaving these digests alone."""

from __future__ import annotations

from scheduler.core import Evict, Plan
from scheduler.core.vocabulary import EvictionReason
from scheduler.sim.bench import digest


def test_an_enum_and_its_value_print_alike_but_a_changed_decision_does_not() -> None:
    as_enum = Plan(evictions=(Evict(job="a", reason=EvictionReason.RECLAIM, by="b"),))
    as_text = Plan(evictions=(Evict(job="a", reason="reclaim", by="b"),))  # type: ignore[arg-type]  # the old loose string
    other = Plan(evictions=(Evict(job="a", reason=EvictionReason.PRIORITY, by="b"),))
    assert digest.canonical(as_enum) == digest.canonical(as_text)
    assert digest.canonical(as_enum) != digest.canonical(other)


def test_the_scenario_family_hashes_every_plan_and_the_speedups_change_none() -> None:
    first = sorted(digest.SCENARIOS.glob("*.json"))[:2]
    fast = list(digest.scenarios(plain=False, paths=first))
    plain = list(digest.scenarios(plain=True, paths=first))
    assert [label for label, _, _ in fast] == [f"scenario/{path.stem}" for path in first]
    assert all(cycles > 0 for _, _, cycles in fast)
    assert fast == plain
