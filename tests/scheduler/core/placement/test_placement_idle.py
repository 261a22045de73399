"""Idle classes (speedups/idle.py): kept by the capacity index as the cycle places, evicts and reconfigures,
always equal to a fresh scan, and giving reconfiguration the same answer as a scan of every node. The index keeps
them only when the cycle's switch gives it a tracker (speedups/switch.py)."""

from __future__ import annotations

from collections import defaultdict

from scheduler.core.model.cluster_state import ClusterState
from scheduler.core.model.demand import Demand
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Request
from scheduler.core.model.vocabulary import JobKind
from scheduler.core.placement import IndexedClusterState
from scheduler.core.rules.reconfiguration import IdleKey, idle_key, plan_reconfiguration
from scheduler.core.speedups.memo import Memo
from scheduler.core.speedups.switch import indexed_state
from scheduler.sim.bench.synthetic import NOW, ClusterShape, synthetic_snapshot

SHAPE = ClusterShape(64, 200, seed=3)


def scanned(state: IndexedClusterState) -> dict[IdleKey, list[int]]:
    assert state.index is not None
    found: dict[IdleKey, list[int]] = defaultdict(list)
    for ordinal, name in enumerate(state.index.node_names):
        if name in state.index.group_of and (key := idle_key(state, name)) is not None:
            found[key].append(ordinal)
    return dict(found)


def kept(state: IndexedClusterState) -> dict[IdleKey, list[int]]:
    assert state.index is not None and state.index.idle is not None
    state.index.flush()
    return {key: list(members) for key, members in state.index.idle.classes.items()}


def test_the_classes_follow_every_change() -> None:
    snapshot = synthetic_snapshot(SHAPE)
    state = indexed_state(snapshot, NOW, Memo())
    assert state.index is not None
    assert kept(state) == scanned(state)
    cordoned = {node.name for node in snapshot.nodes if not node.schedulable}
    victims = [r for r in snapshot.running if any(s.node in cordoned for rep in r.slots for s in rep)][:3]
    victims += list(snapshot.running[:40])
    statement = state.begin()
    for running in victims:  # evictions, some on cordoned nodes (not ready: never in a class)
        state.remove(running.job.id)
    assert kept(state) == scanned(state)
    idle_mig = next(g for g in state.gpus.values() if g.layout and g.idle and g.node.name in state.index.group_of)
    state.set_layout(idle_mig.node.name, idle_mig.index, (("7g.80gb", 0),))
    assert kept(state) == scanned(state)
    state.index.retire(idle_mig.node.name)
    assert kept(state) == scanned(state)
    statement.rollback()
    assert kept(state) == scanned(state)


def test_reconfiguration_answers_the_same_from_the_classes_and_from_a_scan() -> None:
    snapshot = synthetic_snapshot(SHAPE)
    indexed, plain = indexed_state(snapshot, NOW, Memo()), ClusterState(snapshot)
    assert indexed.index is not None and indexed.index.idle is not None  # the kept classes answer, not a scan
    policy = Policy(reconfiguration_hysteresis_cycles=0)
    changed = 0
    for profile in ("1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb", "1g.5gb"):
        job = Job(id="p", team="team00", request=Request(mig_profile=profile), kind=JobKind.INFERENCE)
        demand = [(job, Demand.mig(profile))]
        whole = [(Job(id="w", team="team00", request=Request(gpus=2)), Demand.whole(2))]
        for exclude in ((), ("n00000", "n00001")):
            changes = plan_reconfiguration(indexed, demand, policy, NOW, exclude=exclude)
            assert changes == plan_reconfiguration(plain, demand, policy, NOW, exclude=exclude)
            changed += bool(changes)
            assert plan_reconfiguration(indexed, [], policy, NOW, pending_whole=whole, exclude=exclude) == (
                plan_reconfiguration(plain, [], policy, NOW, pending_whole=whole, exclude=exclude)
            )
    assert changed >= 4, "most demands must find a change, or the comparison proves little"


def test_the_index_keeps_no_classes_with_the_speedups_off() -> None:
    for state in (
        IndexedClusterState(synthetic_snapshot(SHAPE), NOW),
        indexed_state(synthetic_snapshot(SHAPE), NOW, Memo(False)),
    ):
        assert state.index is not None and state.index.idle is None  # reconfiguration scans every node
