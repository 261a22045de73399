"""On-demand capacity for peaks (docs/scheduling-rules.md §9, scheduler/core/decisions/provisioning.py): who gets
nodes asked for, what is asked, budgets and ceilings, requests given up and nodes given back — each rule of the
module on a plan of the whole cycle."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest

from scheduler.core import (
    NodeCensus,
    NodeRequest,
    Offering,
    Plan,
    Policy,
    Provision,
    Provisioning,
    Release,
    Withdraw,
    carried,
    plan_cycle,
)
from scheduler.core.decisions import provisioning
from scheduler.core.model.plan import Waiting
from scheduler.core.model.snapshot import Job, Node, Running, Team
from scheduler.core.model.vocabulary import BlockerKind, CapacityTier, Fabric, JobTier, Priority
from scheduler.core.planning.cycle import plan_for
from tests.scheduler.properties.builders import A100, H100, NOW, job, node, running, snapshot, team, whole

POLICY = Policy()
H100_POOL = Offering(pool="h100", gpu_model=H100, gpu_count=8, price_per_gpu_hour=7.0, arrival_s=480, max_nodes=4)


def _full_reserved() -> tuple[list[Node], list[Running]]:
    """One reserved 8-GPU H100 node, every GPU busy for two hours with team u's firm work."""
    nodes = [node("r1", tier=CapacityTier.RESERVED)]
    busy = [
        running(
            job(f"busy{gpu}", "u", gpus=1, duration_s=7300, preemptible=False),
            (whole("r1", gpu),),
            started_at=NOW - 100,
        )
        for gpu in range(8)
    ]
    return nodes, busy


def _plan(
    pending: Sequence[Job],
    offerings: Sequence[Offering] = (H100_POOL,),
    *,
    requests: Sequence[NodeRequest] = (),
    failed: Sequence[tuple[str, float]] = (),
    idle_since: Sequence[tuple[str, float]] = (),
    budget: Sequence[tuple[str, float]] = (),
    extra_nodes: Sequence[Node] = (),
    extra_running: Sequence[Running] = (),
    teams: Sequence[Team] | None = None,
    policy: Policy = POLICY,
    speedups: bool = True,
) -> Plan:
    nodes, busy = _full_reserved()
    teams = [team("t", guaranteed=64), team("u", guaranteed=64)] if teams is None else teams
    pools = Provisioning(
        offerings=tuple(offerings),
        requests=tuple(requests),
        failed=tuple(failed),
        idle_since=tuple(idle_since),
        budget_gpu_hours=tuple(budget),
    )
    snap = snapshot([*nodes, *extra_nodes], pending, teams, [*busy, *extra_running], provisioning=pools)
    return plan_cycle(snap, policy, NOW, speedups=speedups)


def _waiting(plan: Plan, job_id: str) -> Waiting:
    return next(w for w in plan.waiting if w.job == job_id)


def test_a_job_that_would_wait_past_the_bound_gets_its_nodes_asked_all_at_once() -> None:
    plan = _plan([job("gang", gpus=8, replicas=2, preemptible=False)])
    assert plan.provisions == (
        Provision(
            job="gang",
            pool="h100",
            nodes=2,
            gpu_model=H100,
            gpus_per_node=8,
            placement_group=False,
            gpu_hours=pytest.approx(2 * 8 * (480 + POLICY.default_runtime_s + POLICY.release_idle_s) / 3600),
            arrives_at=NOW + 480,
            team="t",
        ),
    )
    told = _waiting(plan, "gang")
    assert told.blocker == BlockerKind.PROVISIONING
    assert told.eta_s == 480
    assert "asking pool h100 for 2 on-demand nodes, expected in 8 min" in told.reason
    assert told.reason.endswith("next in line")  # the place in line stays last (explain.reposition rewrites it)


def test_no_pools_leaves_the_plan_as_it_was() -> None:
    without = _plan([job("big", gpus=8, preemptible=False)], offerings=())
    assert without.provisions == () and without.withdrawals == () and without.releases == ()
    assert _waiting(without, "big").blocker in provisioning.ASKING_BLOCKERS


def test_a_job_whose_eta_is_within_the_bound_does_not_ask() -> None:
    plan = _plan([job("soon", gpus=8, preemptible=False)], policy=Policy(provision_wait_s=3 * 3600))
    assert plan.provisions == ()
    assert _waiting(plan, "soon").blocker != BlockerKind.PROVISIONING


@pytest.mark.parametrize(
    ("tier", "priority", "asks"),
    [
        (JobTier.ANY, Priority.NORMAL, True),
        (JobTier.SPOT_OK, Priority.NORMAL, True),
        (JobTier.RESERVED_ONLY, Priority.NORMAL, False),  # may not use on-demand at all
        (JobTier.RESERVED_ONLY, Priority.PRODUCTION, False),
    ],
)
def test_only_jobs_whose_tiers_allow_on_demand_ask(tier: JobTier, priority: Priority, asks: bool) -> None:
    plan = _plan([job("j", gpus=8, tier=tier, priority=priority, preemptible=False)])
    assert bool(plan.provisions) is asks


def test_a_quota_refusal_is_not_lifted_by_new_nodes() -> None:
    teams = [team("t", guaranteed=0, burst=0), team("u", guaranteed=64)]
    plan = _plan([job("over", gpus=8, preemptible=False)], teams=teams)
    assert plan.provisions == ()
    assert _waiting(plan, "over").blocker == BlockerKind.QUOTA


def test_production_takes_reserved_capacity_by_preemption_before_any_request() -> None:
    nodes = [node("r1", tier=CapacityTier.RESERVED)]
    cheap = [
        running(job(f"low{gpu}", "u", gpus=1, priority=Priority.LOW), (whole("r1", gpu),), started_at=NOW - 4000)
        for gpu in range(8)
    ]
    pools = Provisioning(offerings=(H100_POOL,))
    prod = job("prod", gpus=8, priority=Priority.PRODUCTION, kind="inference", preemptible=False)
    snap = snapshot(nodes, [prod], [team("t", guaranteed=64), team("u", guaranteed=64)], cheap, provisioning=pools)
    plan = plan_cycle(snap, POLICY, NOW)
    assert [b.job for b in plan.binds] == ["prod"]
    assert plan.provisions == ()


def test_capacity_already_coming_serves_the_next_jobs_before_more_is_asked() -> None:
    pending = [job(f"one{i}", gpus=1, preemptible=False, submitted_at=NOW - 100 + i) for i in range(9)]
    plan = _plan(pending)
    assert [(p.job, p.nodes) for p in plan.provisions] == [("one0", 1), ("one8", 1)]
    assert "already asked of pool h100 will take it" in _waiting(plan, "one3").reason
    assert all(_waiting(plan, f"one{i}").blocker == BlockerKind.PROVISIONING for i in range(9))


def test_a_request_in_flight_is_waited_for_and_its_spare_gpus_serve_others() -> None:
    asked = NodeRequest(id="r7", job="big", pool="h100", nodes=1, requested_at=NOW - 60, arrives_at=NOW + 420)
    pending = [job("big", gpus=4, preemptible=False), job("small", gpus=4, preemptible=False, submitted_at=NOW)]
    plan = _plan(pending, requests=[asked])
    assert plan.provisions == ()
    big, small = _waiting(plan, "big"), _waiting(plan, "small")
    assert big.eta_s == 420 and "1 on-demand node asked of pool h100 for it, expected in 7 min" in big.reason
    assert small.eta_s == 420 and small.blocker == BlockerKind.PROVISIONING


def test_a_request_in_flight_tells_its_job_what_the_autoscaler_says() -> None:
    said = "CapacityIsNotFound: Capacity is not found, CA will try to find it later."
    asked = NodeRequest(
        id="r7", job="big", pool="h100", nodes=1, requested_at=NOW - 60, arrives_at=NOW + 420, message=said
    )
    reason = _waiting(_plan([job("big", gpus=4, preemptible=False)], requests=[asked]), "big").reason
    assert f"1 on-demand node asked of pool h100 for it, expected in 7 min; the autoscaler: {said}" in reason


def test_the_cheapest_pool_that_serves_the_job_is_asked() -> None:
    dear = Offering(pool="dear", gpu_model=H100, gpu_count=8, price_per_gpu_hour=9.0, arrival_s=60, max_nodes=4)
    a100 = Offering(pool="a100", gpu_model=A100, gpu_count=8, price_per_gpu_hour=3.0, arrival_s=600, max_nodes=4)
    plan = _plan([job("any", gpus=8, preemptible=False)], offerings=[dear, H100_POOL, a100])
    assert [p.pool for p in plan.provisions] == ["a100"]
    pinned = _plan([job("h", gpus=8, preemptible=False, gpu_model="H100")], offerings=[dear, H100_POOL, a100])
    assert [p.pool for p in pinned.provisions] == ["h100"]


def test_a_gang_spanning_nodes_prefers_a_pool_with_one_placement_group() -> None:
    grouped = Offering(
        pool="grouped",
        gpu_model=H100,
        gpu_count=8,
        price_per_gpu_hour=8.0,
        arrival_s=600,
        max_nodes=8,
        fabric=Fabric.EFA,
        placement_group=True,
    )
    plan = _plan([job("gang", gpus=8, replicas=3, preemptible=False)], offerings=[H100_POOL, grouped])
    assert [(p.pool, p.nodes, p.placement_group) for p in plan.provisions] == [("grouped", 3, True)]


def test_a_pool_never_grows_past_its_ceiling() -> None:
    small = Offering(pool="small", gpu_model=H100, gpu_count=8, price_per_gpu_hour=7.0, arrival_s=480, max_nodes=2)
    have = node("small-1", pool="small")  # one node of the pool exists, busy
    its_work = running(job("w", "u", gpus=8, duration_s=7300, preemptible=False), (whole("small-1", *range(8)),))
    pending = [
        job("two", gpus=8, replicas=2, preemptible=False, submitted_at=NOW - 2),
        job("one", gpus=8, preemptible=False, submitted_at=NOW - 1),
    ]
    plan = _plan(
        pending, offerings=[small], extra_nodes=[have], extra_running=[its_work], policy=Policy(provision_wait_s=0)
    )
    assert [(p.job, p.nodes) for p in plan.provisions] == [("one", 1)]
    assert "pool small is at its ceiling of 2 nodes" in _waiting(plan, "two").reason


@pytest.mark.parametrize(
    ("budget", "asked", "words"),
    [
        ((("t", 1000.0), ("", 1000.0)), ["a", "b"], ""),
        (
            (("t", 40.0),),
            ["a"],
            "team t's on-demand budget has 14 GPU-hours left today, the 1 H100-SXM5-80GB node would take 26",
        ),
        ((("", 40.0),), ["a"], "the cluster's on-demand budget has 14 GPU-hours left today"),
        ((("t", 10.0), ("", 1000.0)), [], "team t's on-demand budget has 10 GPU-hours left today"),
    ],
)
def test_requests_are_charged_against_the_team_and_cluster_budgets(
    budget: tuple[tuple[str, float], ...], asked: list[str], words: str
) -> None:
    # Each request: 1 node × 8 GPUs × (8 min to arrive + a 3 h run + 10 min idle) = 26.4 GPU-hours.
    pending = [job(n, gpus=8, preemptible=False, duration_s=3 * 3600, submitted_at=NOW + i) for i, n in enumerate("ab")]
    plan = _plan(pending, budget=budget, policy=Policy(provision_wait_s=0))
    assert sorted(p.job for p in plan.provisions) == asked
    if words:
        refused = next(w for w in plan.waiting if w.job not in asked)
        assert words in refused.reason


def test_a_job_whose_request_failed_asks_again_only_after_the_retry_time() -> None:
    pending = [job("j", gpus=8, preemptible=False)]
    assert _plan(pending, failed=[("j", NOW - 60)]).provisions == ()
    assert _plan(pending, failed=[("j", NOW - 60), ("j", NOW - 5000)]).provisions == ()  # the latest failure counts
    assert [p.job for p in _plan(pending, failed=[("j", NOW - POLICY.provision_retry_s)]).provisions] == ["j"]


def test_a_request_whose_job_no_longer_waits_is_withdrawn() -> None:
    requests = [
        NodeRequest(id="r1", job="gone", pool="h100", nodes=1, requested_at=NOW - 60, arrives_at=NOW + 400),
        NodeRequest(id="r2", job="fits", pool="h100", nodes=1, requested_at=NOW - 60, arrives_at=NOW + 400),
        NodeRequest(id="r3", job="elsewhere", pool="h100", nodes=1, requested_at=NOW - 60, arrives_at=NOW + 400),
    ]
    free = node("od-free", tier=CapacityTier.ON_DEMAND)
    pending = [job("fits", gpus=8, preemptible=False)]
    plan = _plan(pending, requests=requests, extra_nodes=[free])
    assert [b.job for b in plan.binds] == ["fits"]
    assert plan.withdrawals == (
        Withdraw(request="r1", job="gone", reason="its job is no longer pending"),
        Withdraw(request="r2", job="fits", reason="its job started on other capacity"),
        Withdraw(request="r3", job="elsewhere", reason="its job is no longer pending"),
    )


def test_a_job_its_quota_refuses_keeps_its_request_and_is_told_its_quota() -> None:
    request = NodeRequest(id="r1", job="over", pool="h100", nodes=1, requested_at=NOW - 60, arrives_at=NOW + 400)
    teams = [team("t", guaranteed=0, burst=0), team("u", guaranteed=64)]
    plan = _plan([job("over", gpus=8, preemptible=False)], requests=[request], teams=teams)
    # A job that waits keeps its request whatever blocks it now: its quota may free before the nodes arrive. But
    # what it is told is its quota, with no start time: the nodes' arrival would not start it.
    assert plan.withdrawals == ()
    told = _waiting(plan, "over")
    assert told.blocker == BlockerKind.QUOTA and told.eta_s is None
    assert "on-demand" not in told.reason


def test_an_autoscaled_node_empty_past_the_idle_time_is_released_unless_it_takes_a_bind() -> None:
    idle = node("od-1", tier=CapacityTier.ON_DEMAND, pool="h100")
    idle2 = node("od-2", tier=CapacityTier.ON_DEMAND, pool="h100")
    fixed = node("fixed", tier=CapacityTier.ON_DEMAND)  # no pool: never released
    since = [("od-1", NOW - 700), ("od-2", NOW - 100), ("fixed", NOW - 9000), ("vanished", NOW - 9000)]
    plan = _plan([], extra_nodes=[idle, idle2, fixed], idle_since=since)
    assert plan.releases == (Release(node="od-1", pool="h100", idle_since=NOW - 700),)
    taken = _plan([job("j", gpus=8, preemptible=False)], extra_nodes=[idle], idle_since=[("od-1", NOW - 700)])
    assert [b.job for b in taken.binds] == ["j"] and taken.releases == ()


def test_a_job_only_a_pool_can_serve_waits_instead_of_being_rejected() -> None:
    a100_pool = Offering(pool="a100", gpu_model=A100, gpu_count=8, price_per_gpu_hour=3.0, arrival_s=600, max_nodes=2)
    plan = _plan([job("a", gpus=8, preemptible=False, gpu_model="A100")], offerings=[a100_pool])
    assert plan.rejections == ()
    assert [p.pool for p in plan.provisions] == ["a100"]
    too_big = _plan([job("b", gpus=8, replicas=3, preemptible=False, gpu_model="A100")], offerings=[a100_pool])
    assert [r.job for r in too_big.rejections] == ["b"]


def test_a_mig_demand_waits_for_the_arrival_and_a_reconfiguration() -> None:
    service = job("svc", memory_gib=10, kind="inference", preemptible=False, gpu_model=H100)
    plan = _plan([service], policy=Policy(provision_wait_s=0))
    told = _waiting(plan, "svc")
    assert told.blocker == BlockerKind.PROVISIONING
    assert told.eta_s == 480 + POLICY.mig_reconfigure_s


def test_a_focused_plan_answers_as_the_whole_plan_with_pools() -> None:
    pending = [job(f"j{i}", gpus=8, preemptible=False, submitted_at=NOW - 100 + i) for i in range(5)]
    nodes, busy = _full_reserved()
    pools = Provisioning(offerings=(H100_POOL,), budget_gpu_hours=(("t", 30.0),))
    snap = snapshot(nodes, pending, [team("t", guaranteed=64), team("u", guaranteed=64)], busy, provisioning=pools)
    whole_plan = plan_cycle(snap, POLICY, NOW)
    for pending_job in pending:
        focused = plan_for(snap, POLICY, NOW, pending_job.id)
        assert _waiting(focused, pending_job.id) == _waiting(whole_plan, pending_job.id)


def test_plans_are_equal_with_the_speedups_on_and_off() -> None:
    pending = [job(f"j{i}", gpus=1 + i % 8, replicas=1 + i % 2, preemptible=False) for i in range(12)]
    assert _plan(pending, speedups=True) == _plan(pending, speedups=False)


def test_the_rule_is_inactive_without_pools_requests_or_idle_nodes() -> None:
    nodes, busy = _full_reserved()
    assert not provisioning.active(snapshot(nodes, [], [], busy))
    assert provisioning.active(snapshot(nodes, [], [], busy, provisioning=Provisioning(idle_since=(("x", 0.0),))))


def test_a_waiting_entry_whose_job_is_not_pending_is_left_alone() -> None:
    nodes, busy = _full_reserved()
    snap = snapshot(nodes, [], [team("t")], busy, provisioning=Provisioning(offerings=(H100_POOL,)))
    stray = Waiting(job="stray", position=1, team_position=1, reason="r", blocker=BlockerKind.CAPACITY)
    asks = provisioning.decide(snap, POLICY, NOW, [stray], [])
    assert asks.waiting == (stray,) and asks.provisions == ()


def test_a_reason_of_another_form_gets_the_text_at_its_end() -> None:
    assert provisioning._inserted("short", "more") == "short; more"


def test_a_request_for_a_rejected_job_or_from_a_pool_gone_is_handled() -> None:
    requests = [
        NodeRequest(id="r1", job="huge", pool="h100", nodes=2, requested_at=NOW - 60, arrives_at=NOW + 400),
        NodeRequest(id="r2", job="j", pool="retired", nodes=1, requested_at=NOW - 60, arrives_at=NOW + 400),
    ]
    pending = [job("huge", gpus=9, preemptible=False), job("j", gpus=8, preemptible=False)]
    plan = _plan(pending, requests=requests)
    assert plan.withdrawals == (Withdraw(request="r1", job="huge", reason="its job was rejected"),)
    assert "asked of pool retired for it" in _waiting(plan, "j").reason  # its pool left the snapshot: still waited for


def test_a_job_no_pool_can_serve_does_not_ask() -> None:
    a100_work = running(
        job("w", "u", gpus=8, duration_s=9000, preemptible=False), (whole("a1", *range(8)),), started_at=NOW - 100
    )
    pinned = job("a", gpus=8, preemptible=False, gpu_model="A100")
    plan = _plan([pinned], extra_nodes=[node("a1", A100)], extra_running=[a100_work])
    told = _waiting(plan, "a")
    assert (
        plan.provisions == () and told.blocker in provisioning.ASKING_BLOCKERS and told.eta_s > POLICY.provision_wait_s
    )


def test_a_pool_at_its_ceiling_adds_nothing_to_the_census() -> None:
    full = Offering(pool="full", gpu_model=A100, gpu_count=8, price_per_gpu_hour=3.0, arrival_s=600, max_nodes=1)
    census = NodeCensus.of([node("f1", A100, pool="full")], [full])
    assert sum(count for _, count in census.kinds) == 1


def test_a_census_counted_elsewhere_is_the_census_of_the_nodes_and_what_the_pools_can_add() -> None:
    """NodeCensus.of_counts (a database's GROUP BY: what a submit judges a job against) counts the pools as
    NodeCensus.of does."""
    reserved = CapacityTier.RESERVED
    nodes = [node("a1", A100, tier=reserved), node("a2", A100, tier=reserved), node("h1", H100, pool="h100")]
    counts = [(A100, 8, "reserved", "tcp", 2), (H100, 8, "on-demand", "tcp", 1)]
    assert NodeCensus.of_counts(counts, {"h100": 1}, [H100_POOL]) == NodeCensus.of(nodes, [H100_POOL])
    assert sum(count for _, count in NodeCensus.of_counts(counts, {"h100": 1}, [H100_POOL]).kinds) == 6


def test_a_job_with_nodes_coming_holds_no_reservation_that_would_start_later() -> None:
    pending = [job("j", gpus=8, preemptible=False)]
    assert _waiting(_plan(pending, offerings=()), "j").blocker == BlockerKind.RESERVED  # GPUs free in 2 h
    coming = NodeRequest(id="r", job="j", pool="h100", nodes=1, requested_at=NOW - 60, arrives_at=NOW + 420)
    plan = _plan(pending, requests=[coming])
    told = _waiting(plan, "j")
    assert told.blocker == BlockerKind.PROVISIONING and told.eta_s == 420
    assert "reserved on" not in told.reason
    late = NodeRequest(id="r", job="j", pool="h100", nodes=1, requested_at=NOW - 60, arrives_at=NOW + 3 * 3600)
    assert "reserved on r1" in _waiting(_plan(pending, requests=[late]), "j").reason  # existing GPUs free first


def test_the_state_a_cycle_leaves_carries_its_requests_budgets_and_releases() -> None:
    idle = node("od-1", tier=CapacityTier.ON_DEMAND, pool="h100")
    nodes, busy = _full_reserved()
    stale = NodeRequest(id="r0", job="gone", pool="h100", nodes=1, requested_at=NOW - 60, arrives_at=NOW + 400)
    pools = Provisioning(
        offerings=(H100_POOL,),
        requests=(stale,),
        idle_since=(("od-1", NOW - 9000),),
        budget_gpu_hours=(("", 500.0), ("t", 100.0)),
    )
    teams = [team("t", guaranteed=64), team("u", guaranteed=64)]
    snap = snapshot(
        [*nodes, idle],
        [job("j", gpus=8, replicas=2, preemptible=False, gpu_model=H100)],
        teams,
        busy,
        provisioning=pools,
    )
    plan = plan_cycle(snap, POLICY, NOW)
    assert [p.job for p in plan.provisions] == ["j"] and [w.request for w in plan.withdrawals] == ["r0"]
    after = carried(snap, plan, NOW)
    charge = plan.provisions[0].gpu_hours
    assert after.provisioning.requests == (
        NodeRequest(id="j", job="j", pool="h100", nodes=2, requested_at=NOW, arrives_at=NOW + 480),
    )
    assert after.provisioning.budget_gpu_hours == (("", 500.0 - charge), ("t", 100.0 - charge))
    assert "od-1" not in {n.name for n in after.nodes} and after.provisioning.idle_since == ()
    assert carried(snap, replace(plan, provisions=(), withdrawals=(), releases=()), NOW).provisioning == pools
    cluster_only = replace(snap, provisioning=replace(pools, budget_gpu_hours=(("", 500.0),)))
    assert carried(cluster_only, plan, NOW).provisioning.budget_gpu_hours == (("", 500.0 - charge),)
