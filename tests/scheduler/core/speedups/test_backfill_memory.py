"""Backfill remembers that the choice found no slots with a hold lifted (reservation.Reservations.backfill, Speed):
asked again only once capacity is freed, for a job of another placement shape, or — when the quota refused what
fitted — for a job of another team; with the memo off, every time. The plans with and without it are compared by
test_speedups."""

from __future__ import annotations

from scheduler.core import Policy
from scheduler.core.decisions.choose import Choice
from scheduler.core.decisions.reservation import Reservations
from scheduler.core.model.snapshot import Job, Slot
from scheduler.core.model.tables import FORGET, Tables
from scheduler.core.placement import IndexedClusterState
from scheduler.core.placement.options import options_for
from scheduler.core.rules.limits import Admission
from scheduler.core.speedups import Memo
from tests.scheduler.core.decisions.test_reservation import _busy
from tests.scheduler.properties.builders import H100, NOW, job, node, snapshot, team

POLICY = Policy()
FITTED = ((Slot("a", 6),),)  # what a refused choice ranked first


class Counting:
    """A choice that finds nothing (``best`` None), or finds ``FITTED`` and is refused by the quota."""

    def __init__(self, refused: bool = False) -> None:
        self.refused = refused
        self.calls = 0

    def __call__(self) -> Choice:
        self.calls += 1
        if self.refused:
            return Choice(None, FITTED, Admission(False, False, "over quota"))
        return Choice(None, None, None)


def held(tables: Tables) -> tuple[IndexedClusterState, Reservations]:
    """Node a: six GPUs busy for 300 s, two idle and held for an 8-GPU job of team t."""
    state = IndexedClusterState(snapshot([node("a", H100)], (), [team("t", guaranteed=8)], _busy(300)), NOW)
    assert state.index is not None
    reservations = Reservations(state, state.index, POLICY, NOW, lambda job, holder: NOW + 300, lambda s: None, tables)
    big = job("big", "t", gpus=8)
    assert reservations.reserve(big, options_for(state.index, big, POLICY)) is not None
    assert reservations.made[0].held
    return state, reservations


def asks(reservations: Reservations, later: Job, choose: Counting) -> int:
    before = choose.calls
    assert reservations.backfill(later, 1.0, choose, lambda slots: False) is None
    return choose.calls - before


def test_a_choice_that_fitted_nothing_is_not_asked_again_until_capacity_is_freed() -> None:
    state, reservations = held(Memo())
    choose, small = Counting(), job("small", "u", gpus=4)
    assert asks(reservations, small, choose) == 1
    assert asks(reservations, job("alike", "v", gpus=4), choose) == 0  # another team, the same placement shape
    assert asks(reservations, job("other", "u", gpus=3), choose) == 1  # another shape
    state.remove("a0")  # capacity freed
    assert asks(reservations, small, choose) == 1


def test_a_choice_the_quota_refused_is_asked_again_for_another_team() -> None:
    _, reservations = held(Memo())
    refused = Counting(refused=True)
    assert asks(reservations, job("small", "u", gpus=1), refused) == 1
    assert asks(reservations, job("same", "u", gpus=1), refused) == 0
    assert asks(reservations, job("team", "v", gpus=1), refused) == 1


def test_without_the_memo_every_backfill_asks() -> None:
    for tables in (FORGET, Memo(False)):
        _, reservations = held(tables)
        choose = Counting()
        assert [asks(reservations, job("small", "u", gpus=4), choose) for _ in range(3)] == [1, 1, 1]
