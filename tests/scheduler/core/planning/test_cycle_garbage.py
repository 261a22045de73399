"""A cycle leaves no reference cycles behind: its working state is freed by reference counting as the plan is
returned (:meth:`scheduler.core.planning.run.Run.close`), not left to the caller's cyclic collector."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator

import pytest

from scheduler.core import Plan, Snapshot, plan_cycle
from scheduler.core.model.policy import Policy
from scheduler.core.planning.cycle import plan_for
from scheduler.core.planning.run import RUN_ATTRIBUTES, Run
from scheduler.sim.bench.synthetic import NOW, ClusterShape, synthetic_snapshot

# Busy enough to preempt, reserve, reconfigure and explain: every working object of a cycle is built.
SNAPSHOT = synthetic_snapshot(ClusterShape(nodes=40, pending=400, seed=42))


@pytest.fixture
def collector_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _cyclic_garbage(plan: Callable[[], Plan]) -> tuple[Plan, int]:
    """``plan``'s plan, made with the process's static caches warm, and the cyclic garbage it left (a process's
    first layout enumeration leaves a few objects once: scheduler.core.sizing.layouts' recursive walk)."""
    plan()
    gc.collect()
    made = plan()
    return made, gc.collect()


@pytest.mark.parametrize("speedups", [True, False])
@pytest.mark.usefixtures("collector_off")
def test_a_cycle_leaves_no_cyclic_garbage(speedups: bool) -> None:
    plan, garbage = _cyclic_garbage(lambda: plan_cycle(SNAPSHOT, Policy(), NOW, speedups=speedups))
    assert plan.binds and plan.evictions and plan.waiting  # the cycle did build what it tears down
    assert garbage == 0


@pytest.mark.usefixtures("collector_off")
def test_a_focused_cycle_stopped_early_leaves_none_either() -> None:
    job = SNAPSHOT.pending[0]
    plan, garbage = _cyclic_garbage(lambda: plan_for(SNAPSHOT, Policy(), NOW, job.id))
    assert any(b.job == job.id for b in plan.binds) or any(w.job == job.id for w in plan.waiting)
    assert garbage == 0


def test_the_snapshot_is_busy_enough() -> None:
    assert isinstance(SNAPSHOT, Snapshot) and SNAPSHOT.running and len(SNAPSHOT.pending) == 400


def test_close_drops_every_attribute_of_the_run() -> None:
    """``Run.close`` drops the attributes ``RUN_ATTRIBUTES`` names (a compiled Run has no ``__dict__`` to clear,
    and may delete only those ``Run.__deletable__`` names): both must name every one, or a new attribute would
    outlive the cycle."""
    assert sorted(RUN_ATTRIBUTES) == sorted(Run.__deletable__)
    made: list[Run] = []
    original = Run.close

    def close(run: Run) -> None:
        assert set(vars(run)) == set(RUN_ATTRIBUTES)
        made.append(run)
        original(run)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Run, "close", close)
        plan_cycle(SNAPSHOT, Policy(), NOW)
    assert made and all(not vars(run) for run in made)
