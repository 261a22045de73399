"""The queue between cycles (scheduler.core.planning.queue): the order the next cycle takes pending jobs in, and a
waiting
reason told again for a new position (explain.reposition)."""

from __future__ import annotations

import pytest

from scheduler.core import QueuePlace, plan_cycle, queue_order, reposition
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Snapshot
from scheduler.core.model.vocabulary import Priority
from tests.scheduler.core.decisions.test_preemption import job, node, on, run, team

POLICY = Policy()
TEAMS = (team("a", {"any": 4}), team("b", {"any": 4}, weight=2.0))


def _snapshot(*, schedulable: bool) -> Snapshot:
    nodes = (node("n1", gpus=8, schedulable=schedulable),)
    running = (run(job("r1", "a"), on("n1", 0, 1)),)  # team a holds 2 GPUs: b is served first among equals
    pending = (
        job("a1", "a", rank=1, submitted_at=1.0),
        job("a2", "a", rank=0, submitted_at=2.0),  # the lead's rank puts it before a1
        job("a3", "a", priority=Priority.HIGH, submitted_at=3.0),
        job("b1", "b", submitted_at=4.0),
        job("b2", "b", gpus=2, submitted_at=5.0),
        job("huge", "b", gpus=64, submitted_at=6.0),  # no node has 64 GPUs: the cycle rejects it
    )
    return Snapshot(nodes=nodes, teams=TEAMS, running=running, pending=pending)


def test_the_order_is_the_one_a_cycle_takes_while_nothing_binds() -> None:
    snapshot = _snapshot(schedulable=False)  # a closed node: every job of the cycle waits, in its order
    plan = plan_cycle(snapshot, POLICY, 100.0)
    expected = tuple(QueuePlace(w.job, w.position, w.team_position) for w in plan.waiting)
    assert queue_order(snapshot, POLICY, 100.0) == expected
    assert [w.job for w in plan.waiting if w.job.startswith("a")] == ["a3", "a2", "a1"]  # priority, then rank


def test_a_job_the_cycle_would_reject_has_no_place() -> None:
    places = queue_order(_snapshot(schedulable=True), POLICY, 100.0)
    assert "huge" not in {place.job for place in places}
    assert [place.position for place in places] == list(range(1, len(places) + 1))
    by_team = {place.job: place.team_position for place in places}
    assert (by_team["a3"], by_team["a2"], by_team["a1"], by_team["b1"], by_team["b2"]) == (1, 2, 3, 1, 2)


@pytest.mark.parametrize(
    ("reason", "ahead", "expected"),
    [
        (
            "waiting for 4 H100 GPUs; team above its guarantee; 3 jobs ahead",
            0,
            "waiting for 4 H100 GPUs; team above its guarantee; next in line",
        ),
        (
            "waiting for 1 GPU; team within its guarantee; next in line",
            2,
            "waiting for 1 GPU; team within its guarantee; 2 jobs ahead",
        ),
        (
            "waiting for 1 GPU; team within its guarantee; 1 job ahead",
            1,
            "waiting for 1 GPU; team within its guarantee; 1 job ahead",
        ),
        ("cancelled by ana", 3, "cancelled by ana"),  # not a waiting reason: unchanged
        ("waiting; for nothing", 3, "waiting; for nothing"),
    ],
)
def test_reposition(reason: str, ahead: int, expected: str) -> None:
    assert reposition(reason, ahead) == expected
