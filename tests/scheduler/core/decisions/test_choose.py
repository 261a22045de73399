"""Where a job goes, quota included (choose.py): the best placement, else the best one the quota admits."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.core import plan_cycle
from scheduler.core.decisions.choose import Choice, choose
from scheduler.core.model.snapshot import Job, Node, Request, Running, Slot, Snapshot, Team
from scheduler.core.model.vocabulary import JobKind, Priority
from scheduler.core.placement import IndexedClusterState, find_slots
from scheduler.core.rules.fairshare import FairShare
from scheduler.core.speedups.trial import TrialPlacement
from tests.scheduler.core.speedups.test_firstfit import A100, A100_40, NOW, POLICY, mig_running

# 12 GiB: a 3g.20gb (3,000 units) on the reserved 40 GB GPU, ranked first (tier); a 1g.20gb (1,000) on the
# on-demand 80 GB one.
SIZED = Job(id="p", team="a", request=Request(memory_gib=12.0), kind=JobKind.INFERENCE, priority=Priority.HIGH)
NODES = (
    Node("r40", A100_40, 1, tier="reserved", mig=((("3g.20gb", 0), ("3g.20gb", 4)),)),
    Node("d80", A100, 1, tier="on-demand", mig=((("1g.20gb", 0), ("3g.40gb", 4)),)),
)


def snapshot(held_by_a: int, pending: tuple[Job, ...] = ()) -> Snapshot:
    """Team a (guarantee 1 GPU = 7,000 units, no burst) holds ``held_by_a`` 1g.10gb instances elsewhere."""
    filler = Node("f", A100, 1, tier="spot", mig=(tuple(("1g.10gb", s) for s in range(7)),))
    running: list[Running] = [mig_running(f"a{i}", "a", "f", "1g.10gb", i) for i in range(held_by_a)]
    teams = (Team("a", guaranteed=(("any", 1.0),)),)
    return Snapshot(nodes=(*NODES, filler), teams=teams, running=tuple(running), pending=pending)


def chosen(held_by_a: int, job: Job = SIZED) -> tuple[IndexedClusterState, Choice]:
    world = snapshot(held_by_a)
    state = IndexedClusterState(world, NOW)
    return state, choose(state, FairShare(world.teams, state, POLICY), job, POLICY)


def test_the_best_placement_when_the_quota_takes_it() -> None:
    _, choice = chosen(held_by_a=0)
    assert choice.slots == choice.best == ((Slot("r40", 0, mig_profile="3g.20gb", mig_start=0),),)
    assert choice.refused is None


def test_the_best_placement_the_quota_admits_when_it_refuses_the_best() -> None:
    _, choice = chosen(held_by_a=5)  # 5,000 held: a 3g (8,000) is refused, a 1g (6,000) admitted
    assert choice.best == ((Slot("r40", 0, mig_profile="3g.20gb", mig_start=0),),)
    assert choice.slots == ((Slot("d80", 0, mig_profile="1g.20gb", mig_start=0),),)
    assert choice.refused is not None and "above its guarantee" in choice.refused.reason


def test_nothing_when_the_quota_admits_no_placement() -> None:
    _, choice = chosen(held_by_a=7)
    assert choice.slots is None and choice.best is not None and choice.refused is not None


def test_nothing_when_nothing_fits() -> None:
    _, choice = chosen(held_by_a=0, job=replace(SIZED, request=Request(gpus=1)))  # no whole GPU is free
    assert choice == Choice(None, None, None)


def test_a_gang_keeps_the_first_answer() -> None:
    gang = replace(SIZED, replicas=2)
    state, choice = chosen(held_by_a=5, job=gang)
    assert choice.best is not None and choice.slots is None and choice.refused is not None
    with pytest.raises(AssertionError, match="one replica"):
        find_slots(state, gang, POLICY, allowed=frozenset())


def test_the_cycle_binds_the_admitted_placement() -> None:
    plan = plan_cycle(snapshot(5, pending=(SIZED,)), POLICY, NOW)
    assert [(b.job, b.slots) for b in plan.binds] == [("p", ((Slot("d80", 0, mig_profile="1g.20gb", mig_start=0),),))]
    assert not plan.evictions


def test_a_search_keeps_the_placement_it_found_while_it_is_free_and_admitted() -> None:
    """trial.py, keeps rule 3: with a mix of admitted and refused holdings, a victim put back elsewhere needs no
    trial while the placement found is still free and its holding still admitted at the team's usage."""
    world = snapshot(5)
    state = IndexedClusterState(world, NOW)
    fairness = FairShare(world.teams, state, POLICY)
    trial = TrialPlacement(state, state.index, fairness, SIZED, POLICY)  # type: ignore[arg-type]
    slots = trial()
    assert slots == ((Slot("d80", 0, mig_profile="1g.20gb", mig_start=0),),)
    own = [replace(SIZED, id=f"back{i}", request=Request(mig_profile="1g.10gb")) for i in (5, 6)]
    state.place(own[0], ((Slot("f", 0, mig_profile="1g.10gb", mig_start=5),),))  # 6,000: the 1g still admitted
    assert trial.keeps(own[0], state.placed["back5"], slots) and trial() == slots
    state.place(own[1], ((Slot("f", 0, mig_profile="1g.10gb", mig_start=6),),))  # 7,000: nothing admitted
    assert not trial.keeps(own[1], state.placed["back6"], slots) and trial() is None
