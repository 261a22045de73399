"""A MIG demand for the profile that takes every compute slice holds the whole GPU either way: an idle MIG-off
GPU serves it now, at any priority, instead of a reconfiguration (placement.fallback.whole_gpu_slots)."""

from __future__ import annotations

from scheduler.core import Policy, plan_cycle
from scheduler.core.model.vocabulary import JobKind, Priority
from tests.scheduler.properties.builders import A100, NOW, job, node, snapshot, team

POLICY = Policy()


def test_a_full_gpu_profile_takes_an_idle_gpu_with_mig_off_at_any_priority() -> None:
    jobs = [job("big", "t", mig="7g.80gb", kind=JobKind.INFERENCE, priority=Priority.HIGH, preemptible=False)]
    plan = plan_cycle(snapshot([node("a", A100, 1)], jobs, [team("t", guaranteed=1)]), POLICY, NOW)
    assert [(b.job, b.slots[0][0].mig_profile) for b in plan.binds] == [("big", None)]
    assert not plan.reconfigurations


def test_a_smaller_profile_does_not_and_waits_for_a_reconfiguration() -> None:
    jobs = [job("small", "t", mig="3g.40gb", kind=JobKind.INFERENCE, preemptible=False)]
    plan = plan_cycle(snapshot([node("a", A100, 1)], jobs, [team("t", guaranteed=1)]), POLICY, NOW)
    assert not plan.binds
    assert plan.waiting[0].job == "small"


def test_the_quota_still_decides() -> None:
    jobs = [job("big", "t", mig="7g.80gb", kind=JobKind.INFERENCE, preemptible=False)]
    plan = plan_cycle(snapshot([node("a", A100, 1)], jobs, [team("t", guaranteed=0.5)]), POLICY, NOW)
    assert not plan.binds and plan.waiting[0].blocker == "quota"


def test_production_prefers_a_free_larger_instance_to_an_idle_gpu_of_the_same_oversize() -> None:
    # A 4g.40gb production job: a free 7g.80gb instance and an idle MIG-off GPU are oversized alike (3 slices,
    # 40 GB); the fallback keeps the first in GPU order, the instance.
    jobs = [job("p", "t", mig="4g.40gb", kind=JobKind.INFERENCE, priority=Priority.PRODUCTION, preemptible=False)]
    nodes = [node("a", A100, 2, mig=["all-7g.80gb", ""])]
    plan = plan_cycle(snapshot(nodes, jobs, [team("t", guaranteed=2)]), POLICY, NOW)
    assert [(b.job, b.slots[0][0].gpu, b.slots[0][0].mig_profile) for b in plan.binds] == [("p", 0, "7g.80gb")]
