"""plan_cycle branches the scenario tests of test_cycle.py leave out: a production retry that itself evicts,
and the explanation of a job no ready node can take whose first cluster model cannot serve it."""

from __future__ import annotations

from scheduler.core import Evict, Policy, Preemption, plan_cycle
from scheduler.core.model.vocabulary import JobKind, Priority
from tests.scheduler.properties.builders import A100, A100_40, H100, NOW, job, node, running, snapshot, team, whole

POLICY = Policy()
H200 = "H200-SXM-141GB"


def test_a_production_retry_that_evicts_gives_the_victims_team_its_turn_too() -> None:
    # p1 (team a, H100 only) and p2 (team c, H200 only) are production, taken first, and both blocked (production
    # may go above the guarantee, up to the burst limit):
    # - p1: team a holds 3 GPUs at its burst limit of 3; its A100 jobs cannot make room on an H100;
    # - p2: team c holds rc (1 GPU) at its burst limit of 1, and rc recently evicted p2 (no ping-pong).
    # Then x (team b, under its guarantee) reclaims ra3, team a's borrowed job: p1 gets another turn and
    # evicts rc on the H100 — an eviction *during* the retry — so team c's blocked p2 gets its turn as well
    # and binds on the idle H200.
    production = {"priority": Priority.PRODUCTION, "preemptible": False, "kind": JobKind.INFERENCE}
    ra1 = running(job("ra1", "a", gpus=1, preemptible=False), (whole("na", 0),))
    ra3 = running(job("ra3", "a", gpus=2, preemptible=True), (whole("na", 1, 2),))
    rc = running(job("rc", "c", gpus=1, preemptible=False), (whole("nh", 0),))
    p1 = job("p1", "a", gpus=1, gpu_model="H100", **production)  # type: ignore[arg-type]
    p2 = job("p2", "c", gpus=1, gpu_model="H200", **production)  # type: ignore[arg-type]
    x = job("x", "b", gpus=1, preemptible=False, gpu_model="A100")
    world = snapshot(
        [node("na", A100, 3), node("nh", H100, 1), node("n2", H200, 1)],
        [p1, p2, x],
        [team("a", guaranteed=2, burst=3), team("b", guaranteed=1), team("c", guaranteed=1, burst=1)],
        [ra1, ra3, rc],
        preemptions=(Preemption(victim="p2", by="rc", at=NOW - 60),),
    )
    plan = plan_cycle(world, POLICY, NOW)
    assert plan.evictions == (Evict("ra3", "reclaim", "x"), Evict("rc", "production", "p1"))
    assert [b.job for b in plan.binds] == ["x", "p1", "p2"]
    assert {b.job: b.slots[0][0].node for b in plan.binds} == {"x": "na", "p1": "nh", "p2": "n2"}
    assert plan.waiting == ()


def test_a_job_no_ready_node_can_take_is_explained_with_the_first_model_that_serves_it() -> None:
    # 1g.20gb exists on the A100 80GB only; the (ready) A100 40GB comes first by name and cannot serve it.
    j = job("j", mig="1g.20gb", kind=JobKind.INFERENCE)
    nodes = [node("a", A100_40, 1), node("b", A100, 1, schedulable=False)]
    plan = plan_cycle(snapshot(nodes, [j], [team(guaranteed=8)]), POLICY, NOW)
    assert not plan.rejections and not plan.binds and not plan.reconfigurations
    (waiting,) = plan.waiting
    assert waiting.reason == (
        "waiting for a 1g.20gb MIG instance; no node that could run it is ready (cordoned, draining or "
        "reconfiguring); team within its guarantee; next in line"
    )
    assert waiting.eta_s is None
