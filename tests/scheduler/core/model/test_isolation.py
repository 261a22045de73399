"""Isolation (scheduler.core.model.isolation): a job whose evaluation raises is rejected alone, and the other jobs'
plans are those they would have had without it."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import pytest

from scheduler.core import Plan, Policy, Reject, plan_cycle
from scheduler.core.model.isolation import Evaluating, JobFailed
from scheduler.core.model.snapshot import Job, Snapshot
from scheduler.core.model.vocabulary import JobKind
from scheduler.core.planning import cycle as cycle_module
from scheduler.core.planning import steps as steps_module
from tests.scheduler.properties.builders import A100, H100, NOW, job, node, snapshot, team

POLICY = Policy()


def _world(pending: Sequence[Job]) -> Snapshot:
    nodes = [node("h1", H100, 8), node("h2", H100, 4), node("a1", A100, 2, mig="all-1g.10gb")]
    return snapshot(nodes, pending, [team("t", guaranteed=100), team("u", guaranteed=100)])


JOBS = [
    job("a", gpus=2),
    job("b", "u", gpus=1),
    job("c", mig="1g.10gb", kind=JobKind.INFERENCE),
    job("d", gpus=4),
    job("e", "u", gpus=8),  # waits: an explanation is written for it
]
WAITS = job("zz-poison", gpus=8, kind=JobKind.INFERENCE)  # its own shape, and it waits
BINDS = job("zz-poison", gpus=3)  # its own shape, and it would bind


def _without(plan: Plan, job_id: str) -> Plan:
    return Plan(
        evictions=plan.evictions,
        reconfigurations=plan.reconfigurations,
        binds=plan.binds,
        rejections=tuple(r for r in plan.rejections if r.job != job_id),
        waiting=plan.waiting,
    )


def _poison(monkeypatch: pytest.MonkeyPatch, target: str, name: str, bad: set[str]) -> None:
    """Make ``target.name`` raise for the jobs in ``bad`` (its first argument that is a Job decides)."""
    real = getattr(target, name)

    def failing(*args: object, **kwargs: object) -> object:
        for arg in args:
            if isinstance(arg, Job) and arg.id in bad:
                raise OverflowError("(34, 'Numerical result out of range')")
        return real(*args, **kwargs)

    monkeypatch.setattr(target, name, failing)


@pytest.mark.parametrize(
    ("module", "name", "poison"),
    [
        ("scheduler.core.planning.steps", "choose_placement", BINDS),  # its turn in fair order
        ("scheduler.core.planning.cycle", "need_text", WAITS),  # its explanation
        ("scheduler.core.placement.mix", "options_for", BINDS),  # the demand mix, before any turn
        ("scheduler.core.placement.reconfigurations", "options_for", WAITS),  # the reconfiguration pass
        (
            "scheduler.core.decisions.screening",
            "never_runs_reason",
            BINDS,
        ),  # the screen: rejected without a second pass
    ],
)
def test_a_job_that_raises_is_rejected_alone_and_the_rest_is_planned_as_without_it(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, module: str, name: str, poison: Job
) -> None:
    clean = plan_cycle(_world(JOBS), POLICY, NOW)
    _poison(monkeypatch, __import__(module, fromlist=[name]), name, {"zz-poison"})
    with caplog.at_level(logging.ERROR, logger="scheduler.core"):
        plan = plan_cycle(_world([*JOBS, poison]), POLICY, NOW)
    rejected = {r.job: r.reason for r in plan.rejections}
    assert rejected["zz-poison"].startswith("internal error evaluating this job: OverflowError")
    assert _without(plan, "zz-poison") == clean
    assert clean.binds and clean.waiting  # the comparison is of a real plan
    assert any("zz-poison" in record.getMessage() and record.exc_info for record in caplog.records)


def test_copies_of_one_bad_request_are_rejected_by_shape_after_the_second(monkeypatch: pytest.MonkeyPatch) -> None:
    copies = [job(f"zz-{i}", gpus=3) for i in range(6)]
    clean = plan_cycle(_world(JOBS), POLICY, NOW)
    calls: list[str] = []
    real = cycle_module._plan

    def counting(snap: Snapshot, policy: Policy, now: float, *rest: Any) -> Plan:
        calls.append("pass")
        return real(snap, policy, now, *rest)

    monkeypatch.setattr(cycle_module, "_plan", counting)
    _poison(monkeypatch, steps_module, "choose_placement", {c.id for c in copies})
    plan = plan_cycle(_world([*JOBS, *copies]), POLICY, NOW)
    assert {r.job for r in plan.rejections} == {c.id for c in copies} | {r.job for r in clean.rejections}
    assert len(calls) == 3  # the first copy alone, then every copy of its shape, then the plan
    for copy in copies:
        plan = _without(plan, copy.id)
    assert plan == clean


def test_an_error_not_of_a_pending_job_is_the_engines_and_is_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(snap: Snapshot, policy: Policy, now: float, *rest: Any) -> Plan:
        raise JobFailed("no-such-job", ZeroDivisionError("engine bug"))

    monkeypatch.setattr(cycle_module, "_plan", broken)
    with pytest.raises(ZeroDivisionError, match="engine bug"):
        plan_cycle(_world(JOBS), POLICY, NOW)


def test_a_job_failing_again_without_itself_is_not_retried_for_ever(monkeypatch: pytest.MonkeyPatch) -> None:
    def always(snap: Snapshot, policy: Policy, now: float, *rest: Any) -> Plan:
        raise JobFailed("a", ValueError("still"))

    monkeypatch.setattr(cycle_module, "_plan", always)
    with pytest.raises(ValueError, match="still"):
        plan_cycle(_world(JOBS), POLICY, NOW)


def test_evaluating_names_the_innermost_job_and_lets_interrupts_through() -> None:
    with pytest.raises(JobFailed) as caught, Evaluating("outer"), Evaluating("inner"):
        raise KeyError("x")
    assert caught.value.job_id == "inner" and isinstance(caught.value.cause, KeyError)
    with pytest.raises(KeyboardInterrupt), Evaluating("j"):
        raise KeyboardInterrupt
    with Evaluating("j"):
        pass


def test_a_failure_reason_is_one_short_line() -> None:
    reason = JobFailed("j", ValueError("x" * 1000)).reason
    assert len(reason) == 300 and reason.endswith("...")
    assert JobFailed("j", ValueError("short")).reason == "internal error evaluating this job: ValueError: short"


def test_a_job_outside_the_bounds_is_rejected_before_anything_evaluates_it() -> None:
    hostile = job("zz-huge", gpus=1)
    hostile = Job(id="zz-huge", team="t", request=hostile.request, duration_s=float("nan"))
    plan = plan_cycle(_world([*JOBS, hostile]), POLICY, NOW)
    assert Reject("zz-huge", "invalid request: duration_s must be a positive number, at most 31,536,000, got nan") in (
        plan.rejections
    )
