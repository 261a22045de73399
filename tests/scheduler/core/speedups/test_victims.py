"""Per-cycle memories behind preemption: team candidate lists (victims.py, which must equal the plain rule
``rules.eviction.team_candidates``), the resumable borrowed fill and the state's record of evicted running jobs
(fairshare.py, cluster_state.py), the share Δ memo (placement/mix.py)."""

from __future__ import annotations

import random

import pytest

from scheduler.core import Policy, Snapshot, plan_cycle
from scheduler.core.decisions.preemption import candidates
from scheduler.core.gpus.units import UNITS_PER_GPU
from scheduler.core.model.snapshot import Running, Team
from scheduler.core.model.vocabulary import Priority
from scheduler.core.placement.mix import DemandMix
from scheduler.core.rules.eviction import fresh_until, is_fresh, lost_work, preference, team_candidates
from scheduler.core.rules.fairshare import FairShare
from scheduler.core.speedups.fairshare import RememberingFairShare
from scheduler.core.speedups.memo import Memo
from scheduler.core.speedups.victims import Victims
from tests.scheduler.core.decisions.test_preemption import NOW, POLICY, job, node, on, ones, run, team, world


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
    state, _ = world(nodes, teams, running)
    fs = RememberingFairShare(teams, state, POLICY, Memo())
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
    # The fills did resume: the same running tuple again starts past its first checkpoint.
    assert fs._resume.start("b", fs.running_jobs("b"))[0] > 0


def test_share_deltas_are_forgotten_when_the_mix_changes() -> None:
    mix = DemandMix(Memo())
    memo = mix.share_deltas("A100-SXM4-80GB", 300)
    memo[700] = 5
    assert mix.share_deltas("A100-SXM4-80GB", 300) is memo
    mix.add_share("A100-SXM4-80GB", 500)
    assert mix.share_deltas("A100-SXM4-80GB", 300) == {}


def test_freshness_and_lost_work_are_the_rules_own() -> None:
    started = run(job("v", "b", gpus=2), on("n1", 0, 1), started_at=NOW - 299)
    assert is_fresh(started, POLICY, NOW) and not is_fresh(started, POLICY, NOW + 1)
    assert fresh_until(started, POLICY) == NOW + 1
    # Lost work: seconds since the last checkpoint (or the start) times GPU-equivalents, never negative.
    assert lost_work(started, 2 * UNITS_PER_GPU, NOW) == 299 * 2
    assert lost_work(run(job("c", "b"), on("n1", 0), started_at=0, checkpoint_at=NOW - 10), UNITS_PER_GPU, NOW) == 10
    assert lost_work(run(job("e", "b"), on("n1", 0), started_at=50, checkpoint_at=10), UNITS_PER_GPU, NOW) == NOW - 50
    assert lost_work(run(job("f", "b"), on("n1", 0), started_at=NOW + 5), UNITS_PER_GPU, NOW) == 0
    # The order: preemptible before not, borrowed before not, lower priority, less lost, later start, id.
    low = job("low", "b", priority=Priority.LOW, preemptible=True)
    keys = [
        preference(low, True, 5.0, 10.0),
        preference(low, True, 5.0, 0.0),
        preference(low, True, 9.0, 10.0),
        preference(job("hi", "b", priority=Priority.HIGH, preemptible=True), True, 0.0, 10.0),
        preference(low, False, 0.0, 10.0),
        preference(job("firm", "b", priority=Priority.LOW), True, 0.0, 10.0),
    ]
    assert keys == sorted(keys)


def _mixed_world() -> tuple[list[Running], list[Team]]:
    """Three teams' running work of every priority, preemptible or not, fresh or not, checkpointed or not."""
    rng = random.Random(11)
    priorities = [Priority.LOW, Priority.NORMAL, Priority.HIGH, Priority.PRODUCTION]
    running = []
    for i in range(36):
        the_team = "abc"[i % 3]
        gpus = 1 + i % 2
        started = NOW - rng.choice([10.0, 299.0, 300.0, 4000.0])
        checkpoint = rng.choice([None, started - 50.0, started + 5.0])
        the_job = job(f"{the_team}{i:02}", the_team, gpus=gpus, priority=rng.choice(priorities), preemptible=i % 4 != 0)
        running.append(run(the_job, on(f"n{i // 4}", *[2 * (i % 4) + g for g in range(gpus)]), started, checkpoint))
    teams = [team("a", {"any": 4}), team("b", {"any": 2}), team("c", {"any": 6})]
    return running, teams


def test_the_cached_team_lists_equal_the_plain_rule_through_evictions() -> None:
    running, teams = _mixed_world()
    state, fs = world([node(f"n{i}") for i in range(9)], teams, running)
    cache = Victims(state, fs, POLICY, NOW)
    pendings = [
        job("p", "a", priority=Priority.PRODUCTION),
        job("r", "a"),
        job("h", "b", priority=Priority.HIGH, preemptible=True),
        job("l", "c", priority=Priority.LOW, gpus=2),
    ]
    rng = random.Random(5)
    placed = sorted(state.running)
    for _ in range(25):
        victim = rng.choice(placed)
        if victim in state.placed:
            state.remove(victim)
        else:
            state.place(state.running[victim].job, state.running[victim].slots)
        fs.changed(state.running[victim].job.team)
        for pending in pendings:
            for allow in (True, False):
                for the_team in "abc":
                    plain = team_candidates(state, fs, POLICY, NOW, the_team, pending, allow)
                    assert cache.of_team(the_team, pending, allow) == plain


def test_with_the_speedups_off_the_cycle_asks_the_plain_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object) -> None:
        raise AssertionError("the speed-up was asked with the speed-ups off")

    monkeypatch.setattr(Victims, "of_team", refuse)
    running, teams = _mixed_world()
    pending = (job("p", "a", priority=Priority.PRODUCTION, gpus=8), job("r", "a", gpus=2))
    snapshot = Snapshot(
        nodes=tuple(node(f"n{i}") for i in range(9)), teams=tuple(teams), running=tuple(running), pending=pending
    )
    plan = plan_cycle(snapshot, Policy(min_runtime_s=300.0), NOW, speedups=False)
    assert plan.evictions, "the snapshot must exercise preemption, or the check proves little"
