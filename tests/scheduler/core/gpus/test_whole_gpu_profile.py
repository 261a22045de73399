"""A MIG demand for the profile that takes every compute slice holds the whole GPU either way: an idle MIG-off
GPU serves it now, at any priority, instead of a reconfiguration (placement.fallback.whole_gpu_slots); and for
production, a MIG-off GPU an eviction frees does too, before any reconfiguration (planning.steps.preempt_whole_gpu)."""

from __future__ import annotations

from scheduler.core import Policy, plan_cycle
from scheduler.core.model.snapshot import Request, Slot
from scheduler.core.model.vocabulary import EvictionReason, JobKind, Priority
from scheduler.core.placement.fallback import as_whole_gpus, whole_gpu_options
from tests.scheduler.properties.builders import A100, A100_40, NOW, job, node, running, snapshot, state_of, team

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


def test_the_whole_gpu_options_are_those_of_a_profile_that_takes_every_compute_slice() -> None:
    state = state_of([node("a", A100, 1), node("b", A100_40, 1), node("c", A100, 1, mig="all-1g.10gb")])
    assert state.index is not None
    big = job("big", mig="7g.80gb", kind=JobKind.INFERENCE)
    options = whole_gpu_options(state.index, big, POLICY)
    assert {o.model for o in options} == {A100}  # 7g.80gb exists on the 80 GB model only
    assert all(o.demand.gpus == 1 and o.demand.mig_profile is None for o in options)
    assert whole_gpu_options(state.index, job("small", mig="3g.40gb", kind=JobKind.INFERENCE), POLICY) == ()
    assert whole_gpu_options(state.index, job("w", gpus=1), POLICY) == ()  # no MIG demand at all


def test_as_whole_gpus_changes_the_request_alone() -> None:
    big = job("big", "t", mig="7g.80gb", kind=JobKind.INFERENCE, priority=Priority.PRODUCTION, replicas=2)
    seen = as_whole_gpus(big)
    assert seen.request == Request(gpus=1)
    assert (seen.id, seen.team, seen.priority, seen.replicas, seen.kind) == (big.id, "t", big.priority, 2, big.kind)


def test_production_evicts_lower_work_from_a_mig_off_gpu_rather_than_change_a_layout() -> None:
    # GPU 0 in 1g.10gb instances with one held, GPU 1 MIG off and held by another team's firm low training.
    prod = job("p", "svc", mig="7g.80gb", kind=JobKind.INFERENCE, priority=Priority.PRODUCTION, preemptible=False)
    small = job("small", "lab", mig="1g.10gb", kind=JobKind.INFERENCE, priority=Priority.LOW)
    train = job("train", "lab", gpus=1, priority=Priority.LOW, preemptible=False)
    world = snapshot(
        [node("a", A100, 2, mig=["all-1g.10gb", ""])],
        [prod],
        [team("svc", guaranteed=1), team("lab", guaranteed=2)],
        [running(small, ((Slot("a", 0, "1g.10gb", 0),),)), running(train, ((Slot("a", 1),),))],
    )
    plan = plan_cycle(world, POLICY, NOW)
    assert [(e.job, e.reason) for e in plan.evictions] == [("train", EvictionReason.PRODUCTION)]
    assert [(b.job, b.slots) for b in plan.binds] == [("p", ((Slot("a", 1),),))]
    assert not plan.reconfigurations
    assert plan == plan_cycle(world, POLICY, NOW, speedups=False)
