"""The state a cycle leaves (scheduler.core.planning.carry): each part of a plan carried as the loop records it."""

from __future__ import annotations

from scheduler.core import Job, Plan, Preemption, Request, Running, Slot, Snapshot, Team, carried
from scheduler.core.model.plan import Bind, Evict, Move, Reconfigure, Reject
from scheduler.core.model.snapshot import Node
from scheduler.core.model.vocabulary import EvictionReason

A100 = "A100-SXM4-80GB"
AT = 50_000.0
LAYOUT = (("3g.40gb", 0), ("3g.40gb", 4))


def _job(job_id: str) -> Job:
    return Job(id=job_id, team="t", request=Request(gpus=1))


def _snapshot() -> Snapshot:
    return Snapshot(
        nodes=(Node("n1", A100, 2), Node("n2", A100, 2), Node("n3", A100, 1, reconfiguring_until=AT + 900)),
        teams=(Team(name="t"),),
        running=(
            Running(job=_job("old"), slots=((Slot("n1", 0),),), started_at=AT - 600),
            Running(job=_job("moving"), slots=((Slot("n1", 1),),), started_at=AT - 600, moved_at=(AT - 100,)),
        ),
        pending=(_job("a"), _job("b"), _job("c")),
        preemptions=(Preemption(victim="x", by="y", at=AT - 30),),
    )


def test_nothing_planned_leaves_the_snapshot_as_it_was() -> None:
    assert carried(_snapshot(), Plan(), AT) == _snapshot()


def test_binds_run_evictions_requeue_rejections_leave_and_moves_hold_both_placements() -> None:
    plan = Plan(
        evictions=(Evict(job="old", reason=EvictionReason.PRIORITY, by="a"), Evict("c0", EvictionReason.BACKFILL)),
        binds=(Bind(job="a", slots=((Slot("n1", 0),),)),),
        rejections=(Reject(job="b", reason="too big"),),
        moves=(Move(job="moving", slots=((Slot("n2", 1),),), released=((Slot("n1", 1),),)),),
    )
    state = carried(_snapshot(), plan, AT)
    assert [r.job.id for r in state.running] == ["moving", "a"]
    moving, bound = state.running
    assert moving.slots == ((Slot("n2", 1),),) and moving.moving_from == ((Slot("n1", 1),),)
    assert moving.moved_at == (AT - 100, AT)
    assert bound.slots == ((Slot("n1", 0),),) and bound.started_at == AT
    assert [job.id for job in state.pending] == ["old", "c"]  # the victim is pending again; b was rejected
    assert state.preemptions[-1] == Preemption(victim="old", by="a", at=AT)  # only an eviction made for a job
    assert len(state.preemptions) == 2


def test_a_reconfiguration_sets_its_layout_and_closes_the_node_until_it_is_ready() -> None:
    plan = Plan(
        reconfigurations=(
            Reconfigure(node="n2", gpu=1, old=(), new=LAYOUT, ready_at=AT + 300),
            Reconfigure(node="n2", gpu=0, old=(), new=LAYOUT, ready_at=AT + 310),
            Reconfigure(node="n3", gpu=0, old=(), new=LAYOUT, ready_at=AT + 300),
        )
    )
    nodes = {node.name: node for node in carried(_snapshot(), plan, AT).nodes}
    assert nodes["n2"].mig == (LAYOUT, LAYOUT) and nodes["n2"].reconfiguring_until == AT + 310
    assert nodes["n3"].reconfiguring_until == AT + 900  # a change already under way ends later
    assert nodes["n1"] == _snapshot().nodes[0]
