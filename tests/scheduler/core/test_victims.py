"""Per-cycle memories behind preemption: team candidate lists (victims.py), the resumable borrowed fill and
the state's record of evicted running jobs (fairshare.py, capacity.py), the share Δ memo (placement/mix.py)."""

from __future__ import annotations

import random

from scheduler.core.placement.mix import DemandMix
from scheduler.core.preemption import candidates
from scheduler.core.rules.fairshare import FairShare
from scheduler.core.speedups.victims import Victims
from scheduler.core.vocabulary import Priority
from tests.scheduler.core.test_preemption import NOW, POLICY, job, node, on, ones, run, team, world


def _ids(found: list) -> list[str]:  # type: ignore[type-arg]
    return [c.job.id for c in found]


def test_a_team_list_is_reused_until_the_team_loses_or_regains_a_job() -> None:
    state, fs = world([node("n1"), node("n2")], [team("a", {"any": 2}), team("b", {"any": 2})], ones("b", "n1", 8))
    cache = Victims(state, fs, POLICY, NOW)
    pending = job("p", "a", priority=Priority.PRODUCTION)
    first = cache.of_team("b", pending, allow_reclaim=True)
    assert cache.of_team("b", pending, allow_reclaim=True) is first  # nothing changed: the same list
    statement = state.begin()
    state.remove("b7")
    after = cache.of_team("b", pending, allow_reclaim=True)
    assert "b7" in _ids(first) and "b7" not in _ids(after)  # a stale list would still offer b7
    statement.rollback()
    assert sorted(_ids(cache.of_team("b", pending, allow_reclaim=True))) == sorted(_ids(first))
    # Another team not over its guarantee is out of reach of anything but production.
    assert cache.of_team("a", job("q", "b"), allow_reclaim=True) == []


def test_candidates_with_a_shared_cache_equal_fresh_ones_through_evictions() -> None:
    running = (
        ones("b", "n1", 8)
        + ones("c", "n2", 6)
        + [run(job("a-low", "a", priority=Priority.LOW, preemptible=True), on("n2", 7))]
    )
    state, fs = world(
        [node("n1"), node("n2")], [team("a", {"any": 4}), team("b", {"any": 2}), team("c", {"any": 2})], running
    )
    cache = Victims(state, fs, POLICY, NOW)
    pendings = [job("p", "a", priority=Priority.PRODUCTION), job("r", "a"), job("h", "a", priority=Priority.HIGH)]
    rng = random.Random(7)
    placed = sorted(state.running)
    for _ in range(30):
        victim = rng.choice(placed)
        if victim in state.placed:
            state.remove(victim)
        else:
            state.place(state.running[victim].job, state.running[victim].slots)
        for pending in pendings:
            for allow in (True, False):
                shared = candidates(state, pending, fs, POLICY, NOW, (), allow, cache)
                fresh = candidates(state, pending, fs, POLICY, NOW, (), allow)
                assert shared == fresh


def test_the_borrowed_fill_resumes_exactly_where_the_tuples_agree() -> None:
    teams = [team("b", {"any": 40, "A100": 30})]
    running = [
        run(
            job(f"b{i:03}", "b", gpus=1 + i % 3, preemptible=i % 2 == 0),
            on(f"n{i:03}", *range(1 + i % 3)),
            started_at=float(i),
        )
        for i in range(150)
    ]
    nodes = [node(f"n{i:03}", gpus=4) for i in range(150)]
    state, fs = world(nodes, teams, running)
    rng = random.Random(3)
    for _ in range(40):
        victim = rng.choice(sorted(state.running))
        if victim in state.placed:
            state.remove(victim)
        else:
            state.place(state.running[victim].job, state.running[victim].slots)
        resumed = fs.borrowed("b")
        fresh = FairShare(teams, state, POLICY).borrowed("b")
        assert resumed == fresh
        assert sorted(state.running_gone["b"]) == sorted(set(state.running) - set(state.placed))


def test_share_deltas_are_forgotten_when_the_mix_changes() -> None:
    mix = DemandMix()
    memo = mix.share_deltas("A100-SXM4-80GB", 300)
    memo[700] = 5
    assert mix.share_deltas("A100-SXM4-80GB", 300) is memo
    mix.add_share("A100-SXM4-80GB", 500)
    assert mix.share_deltas("A100-SXM4-80GB", 300) == {}
