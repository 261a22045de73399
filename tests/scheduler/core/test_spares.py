"""Spare MIG instances for production (placement.spares): one free instance per profile running production
holds is kept for production; a missing one is cut from an idle GPU with the node budget left."""

from __future__ import annotations

from dataclasses import replace

from scheduler.core import Policy, plan_cycle
from scheduler.core.placement import IndexedClusterState
from scheduler.core.placement.spares import SPARE, missing_spares, production_pairs, spare_slots
from scheduler.core.state import Preemption, Slot
from scheduler.core.vocabulary import CapacityTier, JobKind, Priority
from tests.scheduler.properties.builders import A100, NOW, job, node, running, snapshot, team

POLICY = Policy()
PROD = {"kind": JobKind.INFERENCE, "priority": Priority.PRODUCTION, "preemptible": False}


def _serving(slot: Slot, name: str = "svc") -> list:
    return [running(job(name, "t", mig=slot.mig_profile, **PROD), ((slot,),), started_at=NOW - 100)]


def test_lower_work_does_not_take_the_spare_and_production_would() -> None:
    # a100 "m" cut in two 3g.40gb; production holds one: the other is its spare
    nodes = [node("m", A100, 1, mig="all-3g.40gb")]
    held = _serving(Slot("m", 0, "3g.40gb", 0))
    lower = job("low", "t", mig="3g.40gb", kind=JobKind.INFERENCE, priority=Priority.HIGH, preemptible=False)
    plan = plan_cycle(snapshot(nodes, [lower], [team("t", guaranteed=8)], held), POLICY, NOW)
    assert not plan.binds and plan.waiting[0].job == "low"
    prod = job("p", "t", mig="3g.40gb", **PROD)
    plan = plan_cycle(snapshot(nodes, [prod, lower], [team("t", guaranteed=8)], held), POLICY, NOW)
    assert [b.job for b in plan.binds] == ["p"]


def test_no_production_no_spare() -> None:
    nodes = [node("m", A100, 1, mig="all-3g.40gb")]
    lower = job("low", "t", mig="3g.40gb", kind=JobKind.INFERENCE, preemptible=False)
    plan = plan_cycle(snapshot(nodes, [lower], [team("t", guaranteed=8)]), POLICY, NOW)
    assert [b.job for b in plan.binds] == ["low"]


def test_a_missing_spare_is_cut_from_an_idle_gpu() -> None:
    # production holds the only 3g.40gb there is; GPU 0 of "idle" is idle with MIG off
    nodes = [node("m", A100, 1, mig="all-3g.40gb"), node("idle", A100, 1)]
    held = _serving(Slot("m", 0, "3g.40gb", 0)) + _serving(Slot("m", 0, "3g.40gb", 4), "svc2")
    plan = plan_cycle(snapshot(nodes, [], [team("t", guaranteed=8)], held), POLICY, NOW)
    assert [(c.node, any(p == "3g.40gb" for p, _ in c.new)) for c in plan.reconfigurations] == [("idle", True)]


def test_spares_are_never_on_spot_and_a_held_one_counts_as_offered() -> None:
    nodes = [node("m", A100, 1, mig="all-3g.40gb"), node("s", A100, 1, mig="all-3g.40gb", tier=CapacityTier.SPOT)]
    held = _serving(Slot("m", 0, "3g.40gb", 0))
    state = IndexedClusterState(snapshot(nodes, [], [team("t", guaranteed=8)], held), NOW)
    assert state.index is not None
    pairs = production_pairs(state)
    assert pairs == [(A100, "3g.40gb")]
    slots = spare_slots(state, state.index, pairs)
    assert slots == ((Slot("m", 0, mig_profile="3g.40gb", mig_start=4),),)
    assert missing_spares(state, state.index, NOW) == []
    state.place(job(f"{SPARE}:held", SPARE, mig="3g.40gb"), slots)
    assert missing_spares(state, state.index, NOW) == []  # held, not missing


def test_production_retried_after_an_eviction_takes_the_held_spare() -> None:
    # Team a (guarantee = burst = 1 GPU) runs a 3g.40gb service and borrowed preemptible work on "w" that
    # evicted its next production service a minute ago (so no ping-pong back): that service is refused by the
    # burst limit at its turn. Team b's job then reclaims "w"; a's usage drops, its service gets another turn,
    # and takes the 3g.40gb instance held as the spare meanwhile.
    nodes = [node("m", A100, 1, mig="all-3g.40gb"), node("w", A100, 1)]
    serving = running(job("svc", "a", mig="3g.40gb", **PROD), ((Slot("m", 0, "3g.40gb", 0),),), NOW - 3600)
    borrowed = running(job("bw", "a", gpus=1), ((Slot("w", 0),),), NOW - 3600)
    prod = job("p", "a", mig="3g.40gb", **PROD)
    other = job("b1", "b", gpus=1, preemptible=False)
    teams = [team("a", guaranteed=1, burst=1), team("b", guaranteed=1)]
    pingpong = (Preemption(victim="p", by="bw", at=NOW - 60),)
    plan = plan_cycle(snapshot(nodes, [prod, other], teams, [serving, borrowed], preemptions=pingpong), POLICY, NOW)
    assert sorted(b.job for b in plan.binds) == ["b1", "p"]
    assert [(e.job, e.by) for e in plan.evictions] == [("bw", "b1")]
    assert [b.slots for b in plan.binds if b.job == "p"] == [((Slot("m", 0, "3g.40gb", 4),),)]


def _retry_world(profile: str) -> tuple[list[str], list]:
    """As above, with two GPUs cut `all-balanced` on "m": production runs a 3g.40gb and a 2g.20gb on GPU 0, so
    GPU 1 holds one spare of each; the production job retried after the reclaim asks for ``profile``."""
    nodes = [node("m", A100, 2, mig="all-balanced"), node("w", A100, 1)]
    serving = [
        running(job("s3", "a", mig="3g.40gb", **PROD), ((Slot("m", 0, "3g.40gb", 4),),), NOW - 3600),
        running(job("s2", "a", mig="2g.20gb", **PROD), ((Slot("m", 0, "2g.20gb", 2),),), NOW - 3600),
    ]
    borrowed = running(job("bw", "a", gpus=1), ((Slot("w", 0),),), NOW - 3600)
    prod = job("p", "a", mig=profile, **PROD)
    other = job("b1", "b", gpus=1, preemptible=False)
    teams = [team("a", guaranteed=1, burst=2), team("b", guaranteed=1)]
    pingpong = (Preemption(victim="p", by="bw", at=NOW - 60),)
    plan = plan_cycle(snapshot(nodes, [prod, other], teams, [*serving, borrowed], preemptions=pingpong), POLICY, NOW)
    return sorted(b.job for b in plan.binds), [b.slots for b in plan.binds if b.job == "p"]


def test_the_spares_it_does_not_take_stay_held() -> None:
    assert _retry_world("3g.40gb") == (["b1", "p"], [((Slot("m", 1, "3g.40gb", 4),),)])


def test_a_spare_of_another_profile_does_not_serve_it() -> None:
    assert _retry_world("4g.40gb")[0] == ["b1"]


def test_no_spare_for_a_large_profile() -> None:
    # production holds a 3g.40gb on "m" and a 4g.40gb on "x": only the small one gets a spare
    nodes = [node("m", A100, 1, mig="all-balanced"), replace(node("x", A100, 1), mig=((("4g.40gb", 0),),))]
    held = _serving(Slot("m", 0, "3g.40gb", 4))
    big = running(job("big", "t", mig="4g.40gb", **PROD), ((Slot("x", 0, "4g.40gb", 0),),), NOW - 100)
    state = IndexedClusterState(snapshot(nodes, [], [team("t", guaranteed=8)], [*held, big]), NOW)
    assert production_pairs(state) == [(A100, "3g.40gb")]
