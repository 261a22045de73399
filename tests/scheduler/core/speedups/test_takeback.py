"""Take-back's candidates kept per key (:mod:`scheduler.core.speedups.takeback`) are the rule's: the same candidates,
in the same order, for every job and submit time, through evictions and their undo; and whole steady cycles, where
take-back evicts backfilled work, plan the same with the speed-ups on and off."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace

import pytest

from scheduler.core import Policy, plan_cycle
from scheduler.core.model.vocabulary import EvictionReason, Priority
from scheduler.core.rules.eviction import backfill_candidates
from scheduler.core.speedups.memo import Memo
from scheduler.core.speedups.switch import take_back_candidates
from scheduler.core.speedups.takeback import KeptBackfillCandidates
from scheduler.sim.bench.synthetic import NOW, ClusterShape
from tests.scheduler.core.speedups.test_freetimes import _run, steady

PRIORITIES = (Priority.LOW, Priority.NORMAL, Priority.HIGH)


@pytest.mark.parametrize("fairness", [True, False], ids=["fair-share", "plain-order"])
def test_the_kept_candidates_are_the_rules_for_every_submit_time_through_changes(fairness: bool) -> None:
    snapshot = steady(ClusterShape(40, 700, seed=5, teams=4))
    policy = Policy(fairness=fairness)
    run, pending = _run(snapshot, policy)
    kept = KeptBackfillCandidates(run.index, Memo())
    rng = random.Random(7)
    placed = sorted(run.state.running)
    starts = sorted({entry.started_at for entry in run.state.running.values()})
    sizes: Counter[int] = Counter()
    for step in range(150):
        job = rng.choice(pending)
        # Submit times around the running work's starts, so that the same key sees different candidates.
        job = replace(job, submitted_at=rng.choice(starts) + rng.choice((-1.0, 0.0, 1.0)))
        job = replace(job, priority=rng.choice(PRIORITIES), preemptible=rng.random() < 0.5)
        statement = run.state.begin() if step % 4 == 0 else None
        if step % 2 == 0:
            for victim in rng.sample(placed, 2):
                if victim in run.state.placed:
                    run.state.remove(victim)
        for submitted in (job.submitted_at, job.submitted_at - 600.0):
            asked = replace(job, submitted_at=submitted)
            expected = backfill_candidates(run.state, run.fairness, policy, run.now, asked, frozenset())
            assert kept(run.state, run.fairness, policy, run.now, asked, frozenset()) == expected
            sizes[len(expected)] += 1
        if statement is not None:
            statement.rollback()
    assert len(sizes) > 5, "pools of many sizes must be compared, or the comparison proves little"


def test_a_job_with_spared_jobs_asks_the_rule_itself() -> None:
    snapshot = steady(ClusterShape(30, 500, seed=11, teams=2))
    policy = Policy()
    run, pending = _run(snapshot, policy)
    kept = KeptBackfillCandidates(run.index, Memo())
    compared = 0
    for job in pending[:40]:
        expected = backfill_candidates(run.state, run.fairness, policy, run.now, job, frozenset())
        if not expected:
            continue
        spared = frozenset({expected[0].job.id})
        found = kept(run.state, run.fairness, policy, run.now, job, spared)
        assert found == backfill_candidates(run.state, run.fairness, policy, run.now, job, spared)
        assert expected[0].job.id not in {c.job.id for c in found}
        compared += 1
    assert compared, "some job must have candidates to spare"


def test_the_switch_builds_the_rule_off_and_the_kept_candidates_on() -> None:
    snapshot = steady(ClusterShape(8, 40, seed=1))
    for enabled in (False, True):
        memo = Memo(enabled)
        run, _ = _run(snapshot, Policy())
        built = take_back_candidates(run.state, memo)
        assert isinstance(built, KeptBackfillCandidates) if enabled else built is backfill_candidates


@pytest.mark.parametrize(
    "shape",
    [ClusterShape(60, 900, seed=3), ClusterShape(30, 500, seed=11, teams=2), ClusterShape(40, 700, seed=5, teams=4)],
    ids=lambda s: f"{s.nodes}-{s.pending}-t{s.teams}",
)
@pytest.mark.parametrize("policy", [Policy(), Policy(reservation_depth=8), Policy(reservation_depth=8, fairness=False)])
def test_a_steady_cycle_takes_back_the_same_with_and_without_kept_candidates(
    shape: ClusterShape, policy: Policy
) -> None:
    snapshot = steady(shape)
    fast = plan_cycle(snapshot, policy, NOW + 10)
    assert fast == plan_cycle(snapshot, policy, NOW + 10, speedups=False)
    assert fast.evictions, "a steady cycle that evicts nothing proves little here"


def test_the_steady_cycles_compared_take_work_back() -> None:
    """The comparison above proves something only if take-back evicts in those cycles (its ``backfill`` ground)."""
    plan = plan_cycle(steady(ClusterShape(60, 900, seed=3)), Policy(reservation_depth=8), NOW + 10)
    reasons = Counter(e.reason for e in plan.evictions)
    assert reasons[EvictionReason.BACKFILL] > 0
