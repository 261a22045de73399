"""The plan digest tool: a refactor proves it changed no decision by leaving these digests alone."""

from __future__ import annotations

import pytest

from scheduler.core import Evict, Plan, Reject, Withdraw
from scheduler.core.model.vocabulary import EvictionReason
from scheduler.sim.bench import digest


def test_an_enum_and_its_value_print_alike_but_a_changed_decision_does_not() -> None:
    as_enum = Plan(evictions=(Evict(job="a", reason=EvictionReason.RECLAIM, by="b"),))
    as_text = Plan(evictions=(Evict(job="a", reason="reclaim", by="b"),))  # type: ignore[arg-type]  # the old loose string
    other = Plan(evictions=(Evict(job="a", reason=EvictionReason.PRIORITY, by="b"),))
    assert digest.canonical(as_enum) == digest.canonical(as_text)
    assert digest.canonical(as_enum) != digest.canonical(other)


def test_parts_added_to_the_plan_count_only_when_they_hold_something() -> None:
    plan = Plan(rejections=(Reject(job="a", reason="r"),))
    before = (
        "Plan(evictions=(), reconfigurations=(), binds=(), rejections=(Reject(job='a', reason='r')), waiting=(), "
        "moves=())"
    )
    assert digest.canonical(plan) == before  # as it printed before provisions, withdrawals and releases existed
    withdrawn = Plan(withdrawals=(Withdraw(request="r1", job="a", reason="gone"),))
    assert "withdrawals=(Withdraw(" in digest.canonical(withdrawn)


def test_the_scenario_family_hashes_every_plan_and_the_speedups_change_none() -> None:
    first = sorted(digest.SCENARIOS.glob("*.json"))[:2]
    fast = list(digest.scenarios(plain=False, paths=first))
    plain = list(digest.scenarios(plain=True, paths=first))
    assert [label for label, _, _ in fast] == [f"scenario/{path.stem}" for path in first]
    assert all(cycles > 0 for _, _, cycles in fast)
    assert fast == plain


def test_compare_fails_at_the_first_cycle_whose_plans_differ(monkeypatch) -> None:
    first = sorted(digest.SCENARIOS.glob("*.json"))[:1]
    assert list(digest.scenarios(plain=False, paths=first, compare=True))  # equal plans: it runs through

    def unequal(snapshot, policy, now, *, speedups=True):
        return Plan(waiting=()) if speedups else Plan(rejections=(Reject(job="x", reason="differs"),))

    monkeypatch.setattr(digest, "plan_cycle", unequal)
    with pytest.raises(digest.PlansDiffer, match="differ at t="):
        list(digest.scenarios(plain=False, paths=first, compare=True))


def test_the_command_exits_1_naming_the_cycle(monkeypatch, capsys) -> None:
    def unequal(snapshot, policy, now, *, speedups=True):
        return Plan() if speedups else Plan(rejections=(Reject(job="x", reason="differs"),))

    monkeypatch.setattr(digest, "plan_cycle", unequal)
    assert digest.main(["--only", "scenario", "--compare"]) == 1
    assert "differ at t=" in capsys.readouterr().err
