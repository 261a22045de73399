"""A gang's stage that found no leaf (spine, spread) is not asked again until capacity is freed
(placement/topology.py, Speed): with the index's tables remembering, every placement is the one the plain search
finds — through binds, which only lower the histograms, and through frees and rolled-back Statements, which move
or restore the ``freed`` token — and the remembered failures are in fact used."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable

import pytest

from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Request, Slots
from scheduler.core.model.tables import FORGET
from scheduler.core.placement import IndexedClusterState, find_slots, topology
from scheduler.core.speedups.memo import Memo
from scheduler.sim.bench.synthetic import NOW as SYNTHETIC_NOW
from scheduler.sim.bench.synthetic import ClusterShape, synthetic_snapshot
from tests.scheduler.properties.builders import NOW, job, node, running, snapshot, whole

POLICY = Policy()


def _gang(number: int, rng: random.Random) -> Job:
    gpus = rng.choice([1, 2, 4, 8, 8])
    return Job(id=f"g{number}", team="team00", request=Request(gpus=gpus), replicas=rng.choice([2, 3, 4, 6]))


@pytest.mark.parametrize("seed", [2, 3, 5, 7])
def test_gangs_are_placed_as_the_plain_search_places_them(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: Counter[str] = Counter()  # stage asks, per state
    stages = topology._STAGES

    def counted(name: str, stage: Callable[..., object]) -> Callable[..., object]:
        def ask(*args: object) -> object:
            asked[name] += 1
            return stage(*args)

        return ask

    cluster = synthetic_snapshot(ClusterShape(96, 0, seed=seed, teams=2, nodes_per_leaf=8, leaves_per_spine=3))
    fast = IndexedClusterState(cluster, SYNTHETIC_NOW, Memo())
    plain = IndexedClusterState(cluster, SYNTHETIC_NOW, FORGET)

    def place(state: IndexedClusterState, name: str, job: Job) -> Slots | None:
        monkeypatch.setattr(topology, "_STAGES", tuple(counted(name, stage) for stage in stages))
        try:
            return find_slots(state, job, POLICY)
        finally:
            monkeypatch.setattr(topology, "_STAGES", stages)

    rng = random.Random(seed)
    placed: list[Job] = []
    for number in range(160):
        job = _gang(number, rng)
        got = place(fast, "fast", job)
        assert got == place(plain, "plain", job), job
        if rng.random() < 0.15 and placed:  # capacity freed: the token moves, the stages are asked again
            gone = placed.pop(rng.randrange(len(placed)))
            fast.remove(gone.id)
            plain.remove(gone.id)
        elif rng.random() < 0.1 and placed:  # a Statement rolled back: the state and its tokens as they were
            for state in (fast, plain):
                statement = state.begin()
                state.remove(placed[0].id)
                statement.rollback()
        elif got is not None:
            fast.place(job, got)
            plain.place(job, got)
            placed.append(job)
    assert len(placed) > 10, "gangs must bind, or the comparison proves little"
    assert asked["fast"] < asked["plain"], f"a remembered failure must be used: {asked}"


def test_a_stage_that_failed_is_asked_again_once_capacity_is_freed() -> None:
    """Three leaves under three spines, one free node in each: a 2-node gang fails in the leaf and spine stages and
    spreads over a1 and b1; once c1's work ends, leaf r holds it whole — the remembered failures must not hide
    that."""
    nodes = [node("a1", leaf="p", spine="s1"), node("b1", leaf="q", spine="s2")]
    nodes += [node(name, leaf="r", spine="s3") for name in ("c1", "c2")]
    busy = [running(job("on-c1", "other", gpus=8), (whole("c1", *range(8)),))]
    gang = job("gang", "t", gpus=8, replicas=2)
    found = []
    for tables in (Memo(), FORGET):
        state = IndexedClusterState(snapshot(nodes, running_jobs=busy), NOW, tables)
        spread = find_slots(state, gang, POLICY)
        state.remove("on-c1")
        found.append((spread, find_slots(state, gang, POLICY)))
    (spread, in_leaf), plain = found
    assert spread is not None and {replica[0].node for replica in spread} == {"a1", "b1"}
    assert in_leaf is not None and {replica[0].node for replica in in_leaf} == {"c1", "c2"}
    assert found[0] == plain
