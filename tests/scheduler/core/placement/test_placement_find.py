"""find_slots's contract: all replicas or none, the state left as found, failures
remembered only while they stay true; and the live index it relies on stays exact."""

from __future__ import annotations

import copy

import pytest

from scheduler.core.model.cluster_state import ClusterState
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Slot
from scheduler.core.placement import CapacityIndex, IndexedClusterState, find_slots, index_of
from scheduler.core.placement.index import discard_sorted, node_ready
from scheduler.core.placement.options import options_for
from tests.scheduler.properties.builders import A100, NOW, job, node, running, snapshot, state_of, whole

POLICY = Policy()


def index_view(index: CapacityIndex) -> dict[str, object]:
    """Everything the index keeps, in comparable form (a deep copy), once pending changes are filed."""
    index.flush()
    return copy.deepcopy(
        {
            "free": index.free,
            "buckets": {g: {k: v for k, v in b.items() if v} for g, b in index.buckets.items()},
            "group_free": index.group_free,
            "mig": {k: {s: v for s, v in by.items() if v} for k, by in index.mig.items() if any(by.values())},
            "shares": index.shares,
            "share_keys": index.share_keys,
            "leaf_hist": index.leaf_hist,
            "spine_hist": index.spine_hist,
            "leaf_free": index.leaf_free,
            "spine_free": index.spine_free,
            "cpu": index.cpu_used,
            "mem": index.mem_used,
        }
    )


def assert_index_exact(state: IndexedClusterState) -> None:
    assert state.index is not None
    assert index_view(state.index) == index_view(CapacityIndex(state, state.now))


def _mixed_nodes() -> list:
    return [
        node("a", leaf="L", spine="S", cpu_milli=64_000),
        node("b", leaf="L", spine="S", sharing=True),
        node("m", A100, 2, mig="all-balanced", leaf="M"),
    ]


def test_find_slots_leaves_the_state_as_it_found_it() -> None:
    state = state_of(_mixed_nodes())
    before = index_view(state.index)  # type: ignore[arg-type]
    for the_job in (
        job("w", gpus=4, replicas=3),
        job("m", mig="1g.10gb", replicas=3),
        job("s", milli=400, replicas=3),
        job("x", gpus=8, replicas=9),
    ):
        find_slots(state, the_job, POLICY)
    assert not state.placed and state.team_units("t") == {"any": 0}
    assert sorted(state.jobs) == []
    assert index_view(state.index) == before  # type: ignore[arg-type]
    assert_index_exact(state)


def test_a_failure_is_remembered_until_capacity_is_freed() -> None:
    held = running(job("r", gpus=8), (whole("a", *range(8)),))
    state = state_of([node("a")], [held])
    big = job("big", gpus=8)
    assert find_slots(state, big, POLICY) is None
    assert state.index is not None and state.index.failed
    statement = state.begin()
    state.remove("r")
    assert find_slots(state, big, POLICY) is not None
    statement.rollback()
    assert find_slots(state, big, POLICY) is None
    assert_index_exact(state)


def test_a_failure_seen_inside_a_rolled_back_statement_is_not_trusted_after_it() -> None:
    state = state_of([node("a")])
    statement = state.begin()
    state.place(job("r", gpus=8), (whole("a", *range(8)),))
    assert find_slots(state, job("j", gpus=4), POLICY) is None
    statement.rollback()
    assert find_slots(state, job("k", gpus=4), POLICY) is not None


def test_a_committed_inner_statement_is_undone_with_the_outer_one() -> None:
    state = state_of([node("a")])
    outer = state.begin()
    inner = state.begin()
    state.place(job("r", gpus=2), (whole("a", 0, 1),))
    inner.commit()
    assert "r" in state.placed
    outer.rollback()
    assert "r" not in state.placed and state.gpus[("a", 0)].idle
    assert_index_exact(state)


def test_reconfigurations_are_indexed_and_undone() -> None:
    state = state_of([node("m", A100, 1, mig="all-balanced")])
    statement = state.begin()
    state.set_layout("m", 0, (("7g.80gb", 0),))
    assert_index_exact(state)
    assert find_slots(state, job("j", mig="7g.80gb"), POLICY) is not None
    statement.rollback()
    assert find_slots(state, job("j", mig="7g.80gb"), POLICY) is None
    assert_index_exact(state)
    state.place(job("r", mig="1g.10gb"), ((Slot("m", 0, "1g.10gb", 0),),))
    with pytest.raises(ValueError, match="busy"):
        state.set_layout("m", 0, ())


def test_the_index_follows_every_change() -> None:
    state = state_of(_mixed_nodes(), [running(job("c", gpus=1, cpu_milli=1000), (whole("a", 0),))])
    jobs = [
        job("w", gpus=2, replicas=2, cpu_milli=500),
        job("m", mig="1g.10gb", replicas=2),
        job("s", milli=300, replicas=2),
        job("v", gpus=1),
    ]
    for the_job in jobs:
        slots = find_slots(state, the_job, POLICY)
        assert slots is not None
        state.place(the_job, slots)
        assert_index_exact(state)
    statement = state.begin()
    state.remove("w")
    state.remove("s")
    assert_index_exact(state)
    statement.rollback()
    assert_index_exact(state)
    state.remove("m")
    assert_index_exact(state)


def test_a_retired_node_takes_nothing_new() -> None:
    state = state_of([node("a", leaf="L", sharing=True), node("m", A100, 1, mig="all-balanced", leaf="L")])
    index = state.index
    assert index is not None
    index.retire("a")
    index.retire("m")
    index.retire("m")  # twice: nothing more to do
    assert find_slots(state, job("j"), POLICY) is None
    assert find_slots(state, job("k", mig="1g.10gb"), POLICY) is None
    assert find_slots(state, job("l", milli=100), POLICY) is None
    assert index.group_free == {group: 0 for group in index.groups}
    assert not any(index.mig.values()) and not any(index.shares.values())


def test_a_plain_cluster_state_gets_a_fresh_index() -> None:
    plain = ClusterState(snapshot([node("a", reconfiguring_until=NOW - 1), node("b", reconfiguring_until=NOW + 1)]))
    assert find_slots(plain, job("j", gpus=8), POLICY, now=NOW)[0][0].node == "a"  # type: ignore[index]
    # Without a time, a node with a change recorded counts as busy.
    assert find_slots(plain, job("j", gpus=8), POLICY) is None
    assert index_of(plain)[1] is False
    slots = find_slots(plain, job("g", gpus=2, replicas=2), POLICY, now=NOW)
    assert slots is not None and {s.node for r in slots for s in r} == {"a"}


def test_plain_state_mig_gangs_see_their_own_tentative_replicas() -> None:
    plain = ClusterState(snapshot([node("m", A100, 1, mig="all-3g.40gb")]))
    assert find_slots(plain, job("g", mig="3g.40gb", replicas=2), POLICY, now=NOW) is not None
    assert find_slots(plain, job("g", mig="3g.40gb", replicas=3), POLICY, now=NOW) is None
    assert not plain.placed


def test_no_replicas_no_slots() -> None:
    assert find_slots(state_of([node("a")]), job("j", replicas=0), POLICY) is None


def test_no_matching_node_no_options() -> None:
    state = state_of([node("a", schedulable=False)])
    assert options_for(state.index, job("j"), POLICY) == ()  # type: ignore[arg-type]
    assert find_slots(state, job("j"), POLICY) is None


@pytest.mark.parametrize(
    ("values", "value", "expected"), [([1, 3, 5], 3, [1, 5]), ([1, 3, 5], 4, [1, 3, 5]), ([], 1, [])]
)
def test_discard_sorted(values: list[int], value: int, expected: list[int]) -> None:
    discard_sorted(values, value)
    assert values == expected


@pytest.mark.parametrize(
    ("changes", "now", "ready"),
    [
        ({}, None, True),
        ({"schedulable": False}, NOW, False),
        ({"reconfiguring_until": NOW}, NOW, True),
        ({"reconfiguring_until": NOW}, None, False),
        ({"reconfiguring_until": NOW + 1}, NOW, False),
    ],
)
def test_node_ready(changes: dict[str, object], now: float | None, ready: bool) -> None:
    state = ClusterState(snapshot([node("a", **changes)]))
    assert node_ready(state, "a", now) is ready
