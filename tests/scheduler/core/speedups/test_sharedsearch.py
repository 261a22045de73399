"""The reservation search shared per key and submit-time band (:mod:`scheduler.core.speedups.sharedsearch`) finds
what the plain search finds: the same start and GPUs for every job of a key at every submit time, through evictions,
holds and their undo; the bound it files a running job under agrees with the backfill ground's time tests; and whole
steady cycles plan the same with the speed-ups on and off."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from scheduler.core import Policy, plan_cycle
from scheduler.core.decisions.reservation import Reservations
from scheduler.core.model.demand import DemandKind
from scheduler.core.model.snapshot import Job, Request, Running
from scheduler.core.model.vocabulary import PRIORITY_INDEX, BlockerKind, Priority
from scheduler.core.placement.options import options_for
from scheduler.core.rules.eviction import yields_to
from scheduler.core.speedups.sharedsearch import SharedSearches, submit_bound
from scheduler.sim.bench.synthetic import NOW, ClusterShape
from tests.scheduler.core.speedups.test_freetimes import _run, steady

PRIORITIES = (Priority.LOW, Priority.NORMAL, Priority.HIGH, Priority.PRODUCTION)


@pytest.mark.parametrize("fairness", [True, False], ids=["fair-share", "plain-order"])
@pytest.mark.parametrize("seed", [5, 9])
def test_every_search_finds_what_the_plain_search_finds_for_every_submit_time(fairness: bool, seed: int) -> None:
    snapshot = steady(ClusterShape(40, 700, seed=seed, teams=4))
    policy = Policy(reservation_depth=1000, fairness=fairness)
    run, pending = _run(snapshot, policy)
    shared = run.reservations
    assert isinstance(shared, SharedSearches)
    rng = random.Random(seed)
    placed = sorted(run.state.running)
    # Submit times at and around the running work's starts and submissions: the bounds the bands lie between.
    entries = run.state.running.values()
    times = sorted({e.started_at for e in entries} | {e.job.submitted_at for e in entries})
    compared = 0
    answers: set[object] = set()
    for step in range(90):
        job = rng.choice(pending)
        options = options_for(run.index, job, policy)
        if step % 11 == 0 and options:
            shared.reserve(job, options)  # holds GPUs, and later searches skip the ones it took
        statement = run.state.begin() if step % 3 == 0 else None
        if step % 5 == 0:
            for victim in rng.sample(placed, 3):
                if victim in run.state.placed:
                    run.state.remove(victim)
        by_model: dict[str, tuple[int, list[str]]] = {}
        for option in options:
            if option.demand.kind == DemandKind.WHOLE:
                _, names = by_model.setdefault(option.model, (option.demand.gpus, []))
                names.extend(run.index.groups.get(option.group, ()))
        priority = rng.choice(PRIORITIES)
        for per_replica, names in by_model.values():
            ordered = sorted(set(names))
            for _ in range(6):  # one key, several submit times: shared answers and fresh ones
                asked = replace(job, priority=priority, submitted_at=rng.choice(times) + rng.choice((-1.0, 0.0, 1.0)))
                expected = Reservations._earliest(shared, asked, ordered, per_replica)
                assert shared._earliest(asked, ordered, per_replica) == expected
                answers.add(expected)
                compared += 1
        if statement is not None:
            statement.rollback()
    assert compared > 200 and len(answers) > 10, "many searches, with many answers, must be compared"


def test_the_bound_agrees_with_the_backfill_grounds_time_tests() -> None:
    rng = random.Random(3)
    for _ in range(2000):
        victim = Job(
            id="v",
            team=rng.choice(("a", "b")),
            request=Request(gpus=1),
            priority=rng.choice(PRIORITIES),
            preemptible=rng.random() < 0.7,
            submitted_at=float(rng.randrange(0, 100)),
        )
        entry = Running(job=victim, slots=(), started_at=float(rng.randrange(0, 100)))
        job = Job(id="j", team="a", request=Request(gpus=1), priority=rng.choice(PRIORITIES))
        borrowed = rng.random() < 0.5
        widest = yields_to(replace(job, submitted_at=float("-inf")), entry, borrowed)
        bound = submit_bound(entry, PRIORITY_INDEX[job.priority])
        for submitted in (float(rng.randrange(-5, 105)), entry.started_at, victim.submitted_at):
            asked = replace(job, submitted_at=submitted)
            assert yields_to(asked, entry, borrowed) == (widest and bound is not None and submitted < bound)


@pytest.mark.parametrize(
    "policy",
    [Policy(reservation_depth=8), Policy(reservation_depth=40), Policy(reservation_depth=40, fairness=False)],
    ids=["depth-8", "depth-40", "depth-40-plain-order"],
)
def test_a_steady_cycle_reserves_the_same_with_and_without_shared_searches(policy: Policy) -> None:
    snapshot = steady(ClusterShape(40, 700, seed=5, teams=4))
    fast = plan_cycle(snapshot, policy, NOW + 10)
    assert fast == plan_cycle(snapshot, policy, NOW + 10, speedups=False)
    assert sum(w.blocker == BlockerKind.RESERVED for w in fast.waiting) > 4, "reservations must be made"
