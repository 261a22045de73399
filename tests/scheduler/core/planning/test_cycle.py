"""plan_cycle: rejections, fair order, admission, preemption, reconfiguration and explanations wired
into one pure, deterministic cycle."""

from __future__ import annotations

import gc
import itertools
import random
from collections.abc import Sequence

import pytest

from scheduler.core import (
    Bind,
    Evict,
    NodeCensus,
    Plan,
    Policy,
    Preemption,
    Reject,
    Snapshot,
    plan_cycle,
    rejection_reason,
)
from scheduler.core.model.snapshot import Job, Node, Request, Running, Slot, Team
from scheduler.core.model.vocabulary import CapacityTier, JobKind, JobTier, Priority
from tests.scheduler.properties.apply import apply_plan
from tests.scheduler.properties.builders import A100, H100, NOW, job, node, running, snapshot, team, whole

POLICY = Policy()


def _plan(
    nodes: Sequence[Node],
    pending: Sequence[Job] = (),
    teams: Sequence[Team] | None = None,
    running_jobs: Sequence[Running] = (),
    **kwargs: object,
) -> Plan:
    teams = [team(guaranteed=1000)] if teams is None else teams
    return plan_cycle(snapshot(nodes, pending, teams, running_jobs, **kwargs), POLICY, NOW)


def _bound(plan: Plan) -> dict[str, list[str]]:
    return {b.job: sorted({s.node for r in b.slots for s in r}) for b in plan.binds}


# -- rejections ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("the_job", "reason"),
    [
        (job("j", replicas=0), "invalid request: replicas must be at least 1 and at most 512, got 0"),
        (job("j", gpu_model="H200"), "asks for H200 GPUs; the cluster has A100-SXM4-80GB, H100-SXM5-80GB"),
        (job("j", memory_gib=700), "needs 700.0 GiB per replica"),  # over 8 × 80 GB
        (job("j", mig="1g.5gb"), "MIG profile 1g.5gb exists on no GPU in the cluster"),
        (
            job("j", tier=JobTier.RESERVED_ONLY),
            "may run only on reserved capacity, and the cluster has no such node with GPUs it can use",
        ),
        (
            job("j", gpus=8, replicas=3),
            "needs 3 replicas of 8 GPUs at once; the cluster can hold at most 1 on the nodes it may use",
        ),
        (job("j", gpus=16), "no node in the cluster can hold one replica (16 GPUs)"),
        (job("j", milli=100), "asks for a 100-milli share of a time-sliced GPU, but no node in the cluster"),
        (
            job("j", gpus=1, cpu_milli=999_999),
            "needs 999999 milli-CPU and 0 MiB of host memory per replica; no node that has its GPUs has that much",
        ),
    ],
)
def test_what_can_never_run_is_rejected_with_a_reason(the_job: Job, reason: str) -> None:
    nodes = [node("h", H100, cpu_milli=64_000), node("a", A100, 8, tier=CapacityTier.SPOT, cpu_milli=64_000)]
    plan = _plan(nodes, [the_job])
    assert len(plan.rejections) == 1 and plan.rejections[0].job == "j"
    assert plan.rejections[0].reason.startswith(reason)
    assert not plan.binds and not plan.waiting


def test_a_gang_that_fits_only_when_nodes_come_back_is_not_rejected() -> None:
    plan = _plan([node("a", schedulable=False)], [job("j", gpus=8)])
    assert not plan.rejections
    assert plan.waiting[0].reason.startswith("waiting for 8 H100 GPUs; no node that could run it is ready")


# -- binding and order ---------------------------------------------------------------------------------------


def test_pending_jobs_bind_in_fair_order_until_capacity_runs_out() -> None:
    jobs = [
        job("late", gpus=4, submitted_at=20),
        job("early", gpus=4, submitted_at=10),
        job("prod", gpus=4, submitted_at=30, priority=Priority.PRODUCTION, kind=JobKind.INFERENCE),
    ]
    plan = _plan([node("a")], jobs)
    assert [b.job for b in plan.binds] == ["prod", "early"]
    assert [(w.job, w.position, w.team_position) for w in plan.waiting] == [("late", 1, 1)]


def test_running_or_duplicate_pending_ids_are_ignored() -> None:
    held = running(job("r", gpus=2), (whole("a", 0, 1),))
    plan = _plan([node("a")], [job("r", gpus=2), job("d", gpus=1), job("d", gpus=1)], running_jobs=[held])
    assert [b.job for b in plan.binds] == ["d"]
    assert not plan.waiting and not plan.rejections


def test_work_that_is_not_preemptible_runs_only_within_the_guarantee() -> None:
    jobs = [job("a", gpus=4, preemptible=False, submitted_at=1), job("b", gpus=4, preemptible=False, submitted_at=2)]
    plan = _plan([node("n")], jobs, teams=[team(guaranteed=4)])
    assert [b.job for b in plan.binds] == ["a"]
    (waiting,) = plan.waiting
    assert waiting.reason.startswith("waiting for 4 H100 GPUs within quota: team t would hold 8 GPUs")
    assert waiting.reason.endswith("; team at its guarantee; next in line")


def test_preemptible_work_borrows_idle_capacity() -> None:
    plan = _plan([node("n")], [job("b", gpus=8, preemptible=True)], teams=[team(guaranteed=0)])
    assert [b.job for b in plan.binds] == ["b"]


# -- preemption ----------------------------------------------------------------------------------------------


def test_a_team_under_its_guarantee_reclaims_borrowed_gpus_in_one_cycle() -> None:
    borrowed = running(job("b1", "other", gpus=8, preemptible=True), (whole("n", *range(8)),), started_at=0)
    plan = _plan(
        [node("n")],
        [job("mine", "t", gpus=4, preemptible=False)],
        teams=[team("t", guaranteed=4), team("other", guaranteed=0)],
        running_jobs=[borrowed],
    )
    assert plan.evictions == (Evict("b1", "reclaim", "mine"),)
    assert [b.job for b in plan.binds] == ["mine"]


def test_production_inference_preempts_lower_work_anywhere() -> None:
    low = running(job("low", "other", gpus=8, preemptible=False), (whole("n", *range(8)),), started_at=0)
    prod = job("p", "t", gpus=2, priority=Priority.PRODUCTION, kind=JobKind.INFERENCE, preemptible=False)
    plan = _plan([node("n")], [prod], teams=[team("t", guaranteed=8), team("other", guaranteed=8)], running_jobs=[low])
    assert plan.evictions == (Evict("low", "production", "p"),)
    assert _bound(plan) == {"p": ["n"]}


def test_no_eviction_when_it_would_not_make_room() -> None:
    low = running(job("low", gpus=1, priority=Priority.LOW), (whole("n", 0),), started_at=0)
    big = job("big", gpus=8, priority=Priority.HIGH, submitted_at=5)
    other = running(job("o", "x", gpus=7, preemptible=False), (whole("n", *range(1, 8)),), started_at=0)
    teams = [team("t", guaranteed=8), team("x", guaranteed=8)]
    plan = _plan([node("n")], [big], teams=teams, running_jobs=[low, other])
    assert not plan.evictions and not plan.binds
    assert plan.waiting[0].reason == (
        "waiting for 8 H100 GPUs; reserved on n: expected to start in about 10 s, when the work running there is "
        "expected to end (shorter jobs may use those GPUs until then); team within its guarantee; next in line"
    )


def test_a_recent_victim_cannot_preempt_its_preemptor_back() -> None:
    holder = running(job("p", gpus=8, priority=Priority.LOW), (whole("n", *range(8)),), started_at=0)
    victim = job("v", gpus=8, priority=Priority.HIGH)
    plan = _plan(
        [node("n")],
        [victim],
        running_jobs=[holder],
        preemptions=(Preemption(victim="v", by="p", at=NOW - 60),),
    )
    assert not plan.evictions
    later = plan_cycle(
        Snapshot(
            nodes=(node("n"),),
            teams=(team(guaranteed=1000),),
            running=(holder,),
            pending=(victim,),
            preemptions=(Preemption(victim="v", by="p", at=NOW - 60),),
        ),
        Policy(ping_pong_window_s=30),
        NOW,
    )
    assert later.evictions == (Evict("p", "priority", "v"),)


def test_failed_preemptions_are_remembered_per_shape_but_not_for_recent_victims() -> None:
    holder = running(job("h", "x", gpus=8, preemptible=False), (whole("n", *range(8)),), started_at=0)
    pending = [job(f"j{i}", gpus=8, submitted_at=i) for i in range(5)]
    plan = _plan(
        [node("n")],
        pending,
        teams=[team("t", guaranteed=8), team("x", guaranteed=8)],
        running_jobs=[holder],
        preemptions=(Preemption(victim="j3", by="zz", at=NOW - 1),),
    )
    assert not plan.evictions and len(plan.waiting) == 5


# -- MIG layouts ---------------------------------------------------------------------------------------------


def test_unplaced_mig_demand_gets_a_reconfiguration_and_is_told_so() -> None:
    pending = [job(f"i{i}", mig="1g.10gb", kind=JobKind.INFERENCE, submitted_at=0) for i in range(3)]
    plan = _plan([node("a", A100, 1, mig="all-3g.40gb")], pending)
    assert len(plan.reconfigurations) == 1
    change = plan.reconfigurations[0]
    assert change.node == "a" and change.ready_at == NOW + POLICY.mig_reconfigure_s
    assert sum(name == "1g.10gb" for name, _ in change.new) >= 3
    for waiting in plan.waiting:
        assert "MIG reconfiguration under way on node a GPU 0, ready in 300 s" in waiting.reason
        assert waiting.eta_s == POLICY.mig_reconfigure_s


def test_jobs_a_reconfiguration_does_not_serve_are_not_told_to_wait_for_it() -> None:
    busy = running(job("h", "x", gpus=1, preemptible=False), (whole("h", 0),), started_at=0)
    pending = [job(f"i{i}", mig="1g.10gb", kind=JobKind.INFERENCE) for i in range(3)]
    pending.append(job("other", mig="1g.10gb", gpu_model="H100", kind=JobKind.INFERENCE))
    plan = _plan(
        [node("a", A100, 1, mig="all-3g.40gb"), node("h", H100, 1)],
        pending,
        teams=[team("t", guaranteed=100), team("x", guaranteed=100)],
        running_jobs=[busy],
    )
    assert [c.node for c in plan.reconfigurations] == ["a"]
    reasons = {w.job: w.reason for w in plan.waiting}
    assert "MIG reconfiguration under way" in reasons["i0"]
    assert reasons["other"].startswith("waiting for a 1g.10gb MIG instance; team within its guarantee")


def test_production_mig_demand_drains_a_gpu_of_lower_work_and_re_cuts_it() -> None:
    low = running(job("low", "lab", mig="1g.10gb", priority=Priority.LOW), ((Slot("m", 0, "1g.10gb", 0),),))
    prod = job("p", "svc", mig="7g.80gb", priority=Priority.PRODUCTION, kind=JobKind.INFERENCE, preemptible=False)
    teams = [team("svc", guaranteed=1), team("lab", guaranteed=1)]
    plan = _plan([node("m", A100, 1, mig="all-1g.10gb")], [prod], teams=teams, running_jobs=[low])
    assert plan.evictions == (Evict("low", "repartition", "p"),)
    assert [(c.node, c.gpu, c.new) for c in plan.reconfigurations] == [("m", 0, (("7g.80gb", 0),))]
    assert "MIG reconfiguration under way on node m GPU 0" in plan.waiting[0].reason


@pytest.mark.parametrize(
    ("holder_priority", "prod_priority", "history"),
    [
        (Priority.PRODUCTION, Priority.PRODUCTION, ()),  # production is never moved
        (Priority.LOW, Priority.HIGH, ()),  # only production drains
        (Priority.LOW, Priority.PRODUCTION, (Preemption(victim="p", by="low", at=NOW - 60),)),  # no ping-pong
    ],
)
def test_what_may_not_be_drained(holder_priority: Priority, prod_priority: Priority, history: tuple) -> None:
    low = running(job("low", "lab", mig="1g.10gb", priority=holder_priority), ((Slot("m", 0, "1g.10gb", 0),),))
    prod = job("p", "svc", mig="7g.80gb", priority=prod_priority, kind=JobKind.INFERENCE, preemptible=False)
    teams = [team("svc", guaranteed=1), team("lab", guaranteed=1)]
    plan = _plan([node("m", A100, 1, mig="all-1g.10gb")], [prod], teams=teams, running_jobs=[low], preemptions=history)
    assert not plan.evictions and not plan.reconfigurations


def test_no_drain_when_a_reconfiguration_on_an_idle_gpu_serves_production() -> None:
    low = running(job("low", "lab", mig="1g.10gb", priority=Priority.LOW), ((Slot("m", 0, "1g.10gb", 0),),))
    prod = job("p", "svc", mig="7g.80gb", priority=Priority.PRODUCTION, kind=JobKind.INFERENCE, preemptible=False)
    teams = [team("svc", guaranteed=1), team("lab", guaranteed=1)]
    plan = _plan([node("m", A100, 2, mig="all-1g.10gb")], [prod], teams=teams, running_jobs=[low])
    assert not plan.evictions
    assert [(c.gpu, c.new) for c in plan.reconfigurations] == [(1, (("7g.80gb", 0),))]


def test_a_drain_that_reconfiguration_will_not_follow_is_rolled_back() -> None:
    # The job is too young for the hysteresis: reconfiguration plans nothing, so nothing is evicted.
    low = running(job("low", "lab", mig="1g.10gb", priority=Priority.LOW), ((Slot("m", 0, "1g.10gb", 0),),))
    prod = job("p", "svc", mig="7g.80gb", priority=Priority.PRODUCTION, kind=JobKind.INFERENCE, submitted_at=NOW - 1)
    teams = [team("svc", guaranteed=1), team("lab", guaranteed=1)]
    plan = _plan([node("m", A100, 1, mig="all-1g.10gb")], [prod], teams=teams, running_jobs=[low])
    assert not plan.evictions and not plan.reconfigurations


def test_production_gets_its_reconfiguration_before_lower_work_takes_the_idle_gpu() -> None:
    # The idle GPU offers no 3g.40gb nor anything larger (no fallback): production reconfigures it at once.
    prod = job("p", mig="3g.40gb", priority=Priority.PRODUCTION, kind=JobKind.INFERENCE, preemptible=False)
    low = job("low", mig="1g.10gb", kind=JobKind.INFERENCE, priority=Priority.LOW)
    plan = _plan([node("w", A100, 1, mig="all-1g.10gb")], [prod, low])
    assert [(c.node, c.gpu) for c in plan.reconfigurations] == [("w", 0)]
    assert not plan.binds  # "low" would have taken an instance of the idle GPU; the node is closed while it changes
    reasons = {w.job: w.reason for w in plan.waiting}
    assert "MIG reconfiguration under way on node w GPU 0" in reasons["p"]
    assert reasons["low"].startswith("waiting for a 1g.10gb MIG instance; ")


def test_production_takes_an_idle_whole_gpu_rather_than_wait_for_a_reconfiguration() -> None:
    prod = job("p", mig="7g.80gb", priority=Priority.PRODUCTION, kind=JobKind.INFERENCE, preemptible=False)
    plan = _plan([node("w", A100, 1)], [prod, job("low", gpus=1, priority=Priority.LOW)])
    assert not plan.reconfigurations and not plan.evictions
    assert [(b.job, b.slots) for b in plan.binds] == [("p", ((Slot("w", 0),),))]


def test_jobs_wait_for_an_instance_a_change_under_way_will_offer() -> None:
    # The snapshot shows a reconfiguring node's new layout: two free 3g instances, ready in 120 s.
    changing = node("m", A100, 1, mig="all-3g.40gb", reconfiguring_until=NOW + 120)
    pending = [
        job("p", mig="3g.40gb", priority=Priority.PRODUCTION, kind=JobKind.INFERENCE, preemptible=False),
        job("q", mig="3g.40gb", kind=JobKind.INFERENCE, submitted_at=1),
        job("r", mig="3g.40gb", kind=JobKind.INFERENCE, submitted_at=2),
    ]
    plan = _plan([changing, node("idle", A100, 1, mig="all-1g.10gb")], pending)  # no fallback for p
    rows = {w.job: (w.reason.split("; ")[1], w.eta_s) for w in plan.waiting}
    assert rows["p"] == ("MIG reconfiguration under way on node m GPU 0, ready in 120 s", 120.0)
    assert rows["q"] == ("MIG reconfiguration under way on node m GPU 0, ready in 120 s", 120.0)
    # Both instances are promised: "r" asks for a change of its own, on the idle GPU.
    assert [(c.node, c.gpu) for c in plan.reconfigurations] == [("idle", 0)]
    assert rows["r"][0].startswith("MIG reconfiguration under way on node idle GPU 0")


@pytest.mark.parametrize(
    ("profile", "changed"),
    [
        ("7g.80gb", {"p0": "a", "p1": "b"}),  # production does not wait for the one-node-a-cycle rule
        ("3g.40gb", {"p0": "a", "p1": "a"}),  # one change is cut for both
    ],
)
def test_every_production_job_gets_a_change_sharing_one_where_it_fits(profile: str, changed: dict[str, str]) -> None:
    # Idle GPUs of 1g.10gb instances only: no larger instance nor whole GPU to fall back on.
    pending = [
        job(f"p{i}", mig=profile, priority=Priority.PRODUCTION, kind=JobKind.INFERENCE, submitted_at=i)
        for i in range(2)
    ]
    nodes = [node(n, A100, 1, mig="all-1g.10gb") for n in "abc"]
    plan = _plan(nodes, [*pending, job("low", mig="1g.10gb", kind=JobKind.INFERENCE)])
    assert sorted({c.node for c in plan.reconfigurations}) == sorted(set(changed.values()))
    reasons = {w.job: w.reason for w in plan.waiting}
    for job_id, name in changed.items():
        assert f"MIG reconfiguration under way on node {name} GPU 0" in reasons[job_id]
    assert [b.job for b in plan.binds] == ["low"]
    assert plan.binds[0].slots[0][0].node not in set(changed.values())  # on a node nobody changes


def test_a_production_gang_gets_as_many_changes_as_its_replicas_need() -> None:
    gang = job("g", mig="3g.40gb", replicas=3, priority=Priority.PRODUCTION, kind=JobKind.INFERENCE)
    low = job("low", mig="1g.10gb", kind=JobKind.INFERENCE)
    world = snapshot([node(n, A100, 1, mig="all-1g.10gb") for n in "abc"], [gang, low], [team(guaranteed=1000)])
    plan = plan_cycle(world, POLICY, NOW)
    assert sorted(c.node for c in plan.reconfigurations) == ["a", "b"]  # two 3g per GPU: two GPUs
    assert [b.job for b in plan.binds] == ["low"]
    # Next cycle (same time): it waits for the changes under way, and nothing new is changed or evicted.
    again = plan_cycle(apply_plan(world, plan, NOW), POLICY, NOW)
    assert not again.reconfigurations and not again.evictions
    assert "MIG reconfiguration under way on node" in again.waiting[0].reason


def test_a_change_for_other_production_demand_is_not_mistaken_for_ones_own() -> None:
    # Asked with both demands, the reconfiguration rule would reconfigure an 80 GB GPU for the 3g gang; the 1g.5gb job
    # (40 GB parts only) asks again for itself alone and gets the 40 GB GPU.
    # No fallback: the 80 GB GPUs offer only 1g.10gb instances, and p0's quota admits a 1g.5gb but not the
    # whole idle 40 GB GPU.
    small = job("p0", "s", mig="1g.5gb", priority=Priority.PRODUCTION, kind=JobKind.INFERENCE, preemptible=False)
    gang = job("p1", mig="3g.40gb", replicas=3, priority=Priority.PRODUCTION, kind=JobKind.INFERENCE, submitted_at=1)
    nodes = [node("n0", A100, 1, mig="all-1g.10gb"), node("n1", A100, 1, mig="all-1g.10gb")]
    nodes.append(node("n2", "A100-SXM4-40GB", 1))
    plan = _plan(nodes, [small, gang], teams=[team(guaranteed=8), team("s", guaranteed=0.2)])
    assert sorted(c.node for c in plan.reconfigurations) == ["n0", "n1", "n2"]
    reasons = {w.job: w.reason for w in plan.waiting}
    assert "node n2 GPU 0" in reasons["p0"]


def test_production_blocked_by_its_quota_gets_another_turn_when_evictions_lower_it() -> None:
    over = running(job("r4", "c", gpus=4, priority=Priority.HIGH, preemptible=False), (whole("n0", 0, 1, 2, 3),))
    prod = running(job("rx", "x", gpus=4, priority=Priority.PRODUCTION), (whole("n0", 4, 5, 6, 7),))
    slice_job = job("p4", "c", mig="1g.10gb", priority=Priority.PRODUCTION, kind=JobKind.INFERENCE)
    big = job("p2", "a", gpus=4, priority=Priority.PRODUCTION, kind=JobKind.INFERENCE, submitted_at=1)
    teams = [team("a", guaranteed=8), team("c", guaranteed=1), team("x", guaranteed=8)]
    nodes = [node("n0", A100), node("n1", A100, 1)]
    plan = _plan(nodes, [slice_job, big, job("l", "a", gpus=1, submitted_at=2)], teams=teams, running_jobs=[over, prod])
    # p4 comes first but team c is over its quota; p2 then evicts r4 (team c), and p4 at once gets n1 reconfigured,
    # before "l" could take n1 (it does not start oversized on n1's idle GPU: no other idle GPU offers its way back).
    assert plan.evictions == (Evict("r4", "production", "p2"),)
    assert [c.node for c in plan.reconfigurations] == ["n1"]
    assert [b.job for b in plan.binds] == ["p2"]


def test_production_whole_gpu_work_asks_for_no_reconfiguration() -> None:
    held = running(job("h", "x", gpus=1, priority=Priority.PRODUCTION), (whole("a", 0),))
    prod = job("p", gpus=1, priority=Priority.PRODUCTION, kind=JobKind.INFERENCE)
    plan = _plan([node("a", A100, 1)], [prod], teams=[team(guaranteed=8), team("x", guaranteed=8)], running_jobs=[held])
    assert not plan.reconfigurations and not plan.evictions


def test_changes_under_way_serve_only_jobs_of_their_tier_and_model() -> None:
    spot = node("s", A100, 1, mig="all-7g.80gb", reconfiguring_until=NOW + 60, tier=CapacityTier.SPOT)
    other = node("h", H100, 1, mig="all-7g.80gb", reconfiguring_until=NOW + 60)
    full = node("a", A100, 1, mig="all-7g.80gb")
    held = running(job("x", "x", mig="7g.80gb", priority=Priority.PRODUCTION), ((Slot("a", 0, "7g.80gb", 0),),))
    prod = job("p", mig="7g.80gb", priority=Priority.PRODUCTION, kind=JobKind.INFERENCE, gpu_model="A100")
    plan = _plan([spot, other, full], [prod], teams=[team(guaranteed=8), team("x", guaranteed=8)], running_jobs=[held])
    assert plan.waiting[0].reason == "waiting for a 7g.80gb MIG instance; team within its guarantee; next in line"


def test_unplaced_whole_gpu_demand_may_turn_an_idle_mig_gpu_off() -> None:
    plan = _plan([node("a", A100, 1, mig="all-3g.40gb")], [job("w", gpus=1, submitted_at=0)])
    assert [(c.gpu, c.new) for c in plan.reconfigurations] == [(0, ())]
    assert "MIG reconfiguration under way" in plan.waiting[0].reason


# -- explanations --------------------------------------------------------------------------------------------


def test_every_pending_job_gets_positions_a_reason_and_an_eta() -> None:
    held = running(job("r", "x", gpus=8, duration_s=3600), (whole("n", *range(8)),), started_at=NOW - 600)
    pending = [job("a1", "a", gpus=4, submitted_at=1), job("a2", "a", gpus=4, submitted_at=2)]
    pending += [job("b1", "b", gpus=8, submitted_at=3)]
    plan = _plan(
        [node("n")],
        pending,
        teams=[team("a", guaranteed=0), team("b", guaranteed=8), team("x", guaranteed=8)],
        running_jobs=[held],
    )
    assert not plan.binds
    rows = [(w.job, w.position, w.team_position, w.eta_s) for w in plan.waiting]
    # a1 and a2 start after b1's expected run (the policy's default: b1 states no duration), one after another
    assert rows == [("b1", 1, 1, 3000.0), ("a1", 2, 1, 6600.0), ("a2", 3, 2, 6600.0)]
    assert plan.waiting[0].reason == (
        "waiting for 8 H100 GPUs; reserved on n: expected to start in about 50 min, when the work running there is "
        "expected to end (shorter jobs may use those GPUs until then); team within its guarantee; next in line"
    )
    assert plan.waiting[0].blocker == "reserved"
    assert plan.waiting[2].reason == "waiting for 4 H100 GPUs; team has no guaranteed quota; 2 jobs ahead"


def test_a_job_blocked_now_is_not_told_it_starts_now() -> None:
    # Two GPUs are free, one on each node: a replica of 2 GPUs fits on neither, so the cycle leaves it waiting. Its
    # start is when "x" frees a's second GPU, not now. (No reservations: the replay answers, not the reservation.)
    x = running(job("x", "t", gpus=1, duration_s=1200), (whole("a", 0),), started_at=NOW - 600)
    y = running(job("y", "t", gpus=1, duration_s=2400), (whole("b", 0),), started_at=NOW - 600)
    plan = plan_cycle(
        snapshot([node("a", H100, 2), node("b", H100, 2)], [job("g", "t", gpus=2)], [team("t")], [x, y]),
        Policy(reservation_depth=0),
        NOW,
    )
    assert not plan.binds
    assert [(w.job, w.blocker, w.eta_s) for w in plan.waiting] == [("g", "capacity", 600.0)]


def test_a_slice_waits_for_its_own_profile_or_an_empty_gpu_changed() -> None:
    # GPU 0 holds a free 3g.40gb and a busy one (its holder ends in 900 s); GPU 1 is busy whole for an hour. A
    # 1g.10gb job cannot use the free 3g.40gb: it waits until GPU 0 is empty and changed, not "now".
    m = running(job("m", "t", mig="3g.40gb", duration_s=1500), ((Slot("a", 0, "3g.40gb", 4),),), started_at=NOW - 600)
    w = running(job("w", "t", gpus=1, duration_s=4200), (whole("a", 1),), started_at=NOW - 600)
    pending = [job("s", "t", mig="1g.10gb", kind=JobKind.INFERENCE, submitted_at=NOW - 5)]
    plan = plan_cycle(
        snapshot([node("a", A100, 2, mig=["all-3g.40gb", ""])], pending, [team("t")], [m, w]), POLICY, NOW
    )
    assert [(v.job, v.blocker, v.eta_s) for v in plan.waiting] == [("s", "capacity", 900.0 + POLICY.mig_reconfigure_s)]


# -- determinism ---------------------------------------------------------------------------------------------


def _busy_snapshot() -> Snapshot:
    rng = random.Random(7)
    nodes = [
        node("d0", H100, leaf="L1", tier=CapacityTier.RESERVED),
        node("d1", H100, leaf="L1"),
        node("m0", A100, 2, mig="all-balanced", leaf="L2"),
        node("s0", H100, 2, sharing=True, tier=CapacityTier.SPOT),
    ]
    held = [
        running(job("r1", "x", gpus=4, duration_s=900), (whole("d1", 0, 1, 2, 3),), started_at=NOW - 400),
        running(job("r2", "y", mig="1g.10gb"), ((Slot("m0", 0, "1g.10gb", 0),),), started_at=NOW - 900),
    ]
    pending: list[Job] = []
    for i in range(30):
        request = rng.choice([{"gpus": 1}, {"gpus": 2}, {"gpus": 4, "replicas": 2}, {"mig": "1g.10gb"}, {"milli": 300}])
        pending.append(
            job(
                f"p{i:02d}",
                rng.choice(["x", "y", "z"]),
                preemptible=rng.random() < 0.5,
                priority=rng.choice(list(Priority)),
                submitted_at=rng.random() * 100,
                **request,  # type: ignore[arg-type]
            )
        )
    teams = [team("x", guaranteed=4), team("y", guaranteed=2, burst=6), team("z", guaranteed=0)]
    return snapshot(nodes, pending, teams, held)


def test_the_same_snapshot_in_any_tuple_order_gives_the_same_plan() -> None:
    base = _busy_snapshot()
    first = plan_cycle(base, POLICY, NOW)
    assert first.binds and first.waiting
    assert plan_cycle(base, POLICY, NOW) == first
    rng = random.Random(3)
    for _ in range(5):
        shuffled = Snapshot(
            nodes=tuple(rng.sample(base.nodes, len(base.nodes))),
            teams=tuple(rng.sample(base.teams, len(base.teams))),
            running=tuple(rng.sample(base.running, len(base.running))),
            pending=tuple(rng.sample(base.pending, len(base.pending))),
        )
        assert plan_cycle(shuffled, POLICY, NOW) == first


def test_plan_operations_are_frozen_values() -> None:
    plan = _plan([node("n")], [job("j")])
    assert isinstance(plan.binds[0], Bind)
    with pytest.raises(AttributeError):
        plan.binds[0].job = "x"  # type: ignore[misc]
    assert Reject("a", "b") == Reject("a", "b")
    assert list(itertools.chain(plan.binds)) == [Bind("j", ((Slot("n", 0),),))]


def test_the_cycle_leaves_the_garbage_collector_as_it_found_it() -> None:
    pending = (Job(id="p", team="t", request=Request(gpus=1)),)
    snapshot = Snapshot(nodes=(Node("n1", "A100-SXM4-80GB", 1),), teams=(Team("t"),), pending=pending)
    assert gc.isenabled()
    plan_cycle(snapshot, Policy(), 0.0)
    assert gc.isenabled()
    gc.disable()
    try:
        plan_cycle(snapshot, Policy(), 0.0)
        assert not gc.isenabled()  # a caller that turned it off keeps it off
    finally:
        gc.enable()


# -- production holds a bound node (placement/reconfigurations.py, hold_for) -------------------------------------------


def _held_world(second_gpu_busy: bool = False) -> Plan:
    """n1: GPU 0 in 1g.10gb instances, GPU 1 MIG off and idle (or held by team lab's job). Production p0 binds
    a 1g.10gb first; p1 and p2 want 3g.40gb instances, which only a change of GPU 1 could offer."""
    nodes = [node("n1", A100, 2, mig=["all-1g.10gb", ""], sharing=True)]
    svc = dict(kind=JobKind.INFERENCE, priority=Priority.PRODUCTION, preemptible=False)
    pending = [
        job("p0", "svc", mig="1g.10gb", **svc),  # type: ignore[arg-type]
        job("p1", "svc", mig="3g.40gb", **svc),  # type: ignore[arg-type]
        job("p2", "svc", mig="3g.40gb", **svc),  # type: ignore[arg-type]
        job("share", "lab", milli=500),
    ]
    held = [running(job("busy", "lab", gpus=1, priority=Priority.PRODUCTION), (whole("n1", 1),))]
    teams = [team("svc", guaranteed=2.0), team("lab", guaranteed=0.0, burst=2.0)]
    return _plan(nodes, pending, teams, held if second_gpu_busy else ())


def test_production_holds_a_node_bound_this_cycle_for_its_reconfiguration_next_cycle() -> None:
    plan = _held_world()
    assert [b.job for b in plan.binds] == ["p0"]  # the share does not start on the GPU p1 needs
    assert not plan.evictions and not plan.reconfigurations
    reasons = {w.job: w.reason for w in plan.waiting}
    assert "node n1 is held for its MIG reconfiguration next cycle" in reasons["p1"]
    assert "held" not in reasons["p2"]  # one change of GPU 1 offers one 3g.40gb: p2 waits for capacity
    assert {w.job: w.eta_s for w in plan.waiting}["p1"] == POLICY.cycle_s + POLICY.mig_reconfigure_s


def test_no_hold_when_no_change_of_a_bound_node_would_serve_production() -> None:
    plan = _held_world(second_gpu_busy=True)  # GPU 1 runs production work: nothing to change there
    assert [b.job for b in plan.binds] == ["p0"]
    assert all("held" not in w.reason for w in plan.waiting)


def test_rejection_reason_is_the_cycles_own_before_anything_is_written() -> None:
    nodes = [node("h", H100, cpu_milli=64_000)]
    for the_job in (job("j", gpus=16), job("j", memory_gib=700), job("j", gpus=0)):
        cycle = _plan(nodes, [the_job]).rejections[0].reason
        assert rejection_reason(the_job, nodes, POLICY) == cycle
        assert rejection_reason(the_job, NodeCensus.of(nodes), POLICY) == cycle  # the census, built once for many
    assert rejection_reason(job("j", gpus=8), nodes, POLICY) is None
    assert NodeCensus.of(nodes) and not NodeCensus.of([])  # truthy as the nodes it counts
