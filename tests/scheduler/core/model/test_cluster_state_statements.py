"""Statements: tentative changes roll back exactly, including those of a committed nested statement."""

from __future__ import annotations

from scheduler.core.model.cluster_state import ClusterState
from scheduler.core.model.snapshot import Job, Node, Request, Slot, Snapshot


def _state() -> ClusterState:
    return ClusterState(Snapshot(nodes=(Node(name="n1", gpu_model="A100-SXM4-80GB", gpu_count=2),), teams=()))


def test_rollback_undoes_a_placement() -> None:
    state = _state()
    job = Job(id="j", team="t", request=Request(gpus=1))
    statement = state.begin()
    state.place(job, ((Slot("n1", 0),),))
    assert not state.slot_free(Slot("n1", 0))
    statement.rollback()
    assert state.slot_free(Slot("n1", 0))
    assert state.team_units("t") == {"any": 0}


def test_outer_rollback_undoes_a_committed_inner_statement() -> None:
    state = _state()
    outer = state.begin()
    inner = state.begin()
    state.place(Job(id="j", team="t", request=Request(gpus=1)), ((Slot("n1", 1),),))
    inner.commit()
    assert not state.slot_free(Slot("n1", 1))
    outer.rollback()
    assert state.slot_free(Slot("n1", 1))
    assert "j" not in state.placed
