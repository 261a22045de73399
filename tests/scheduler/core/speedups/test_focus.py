"""A cycle planned for one job's answer (:func:`~scheduler.core.planning.cycle.plan_for`,
:mod:`scheduler.core.speedups.focus`) gives that job the answer of the whole plan: the same bind, rejection or
waiting entry (position, reason, ETA, blocker), the same evictions made for it, and — when it waits, so the
cycle ran through — the same binds, evictions and reconfigurations; and the preview, planned so, answers as the
preview planned whole with the speed-ups off. On synthetic clusters, on every cycle of the scenario suite, and on
random small clusters."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from scheduler.core import Job, Plan, Policy, Request, Snapshot, plan_cycle, preview
from scheduler.core.model.vocabulary import BlockerKind, JobKind, Priority
from scheduler.core.planning.cycle import plan_for
from scheduler.sim import load_scenario, replay
from scheduler.sim.bench.synthetic import NOW, ClusterShape, synthetic_snapshot
from tests.scheduler.properties.builders import NOW as SMALL_NOW
from tests.scheduler.properties.test_cycle_properties import snapshots

SCENARIOS = sorted((Path(__file__).parents[2] / "scenarios").glob("*.json"))

# What a submit page asks about: a whole GPU, a gang, a slice, a memory size, production inference.
ASKED = (
    Job(id="asked", team="", request=Request(gpus=1)),
    Job(id="asked", team="", request=Request(gpus=8), replicas=2),
    Job(id="asked", team="", request=Request(mig_profile="1g.10gb"), kind=JobKind.INFERENCE),
    Job(id="asked", team="", request=Request(memory_gib=18.0), kind=JobKind.INFERENCE),
    Job(id="asked", team="", request=Request(gpus=1), kind=JobKind.INFERENCE, priority=Priority.PRODUCTION),
)


def _answer(plan: Plan, job_id: str) -> tuple[object, ...]:
    """What a plan says of ``job_id``: its bind, rejection and waiting entry, and the evictions made for it."""
    return (
        [b for b in plan.binds if b.job == job_id],
        [r for r in plan.rejections if r.job == job_id],
        [w for w in plan.waiting if w.job == job_id],
        [e for e in plan.evictions if e.by == job_id],
    )


def assert_focused_as_whole(snapshot: Snapshot, policy: Policy, now: float, job_ids: list[str]) -> Plan:
    """Every one of ``job_ids`` gets from its focused plan what the whole plan says of it; returns the whole plan."""
    whole = plan_cycle(snapshot, policy, now)  # equal to the plain rules' plan: test_speedups
    for job_id in job_ids:
        focused = plan_for(snapshot, policy, now, job_id)
        assert _answer(focused, job_id) == _answer(whole, job_id), job_id
        if any(w.job == job_id for w in whole.waiting):  # it waits: the cycle ran through
            assert focused.binds == whole.binds and focused.evictions == whole.evictions
            assert focused.reconfigurations == whole.reconfigurations
    return whole


def assert_previews_alike(snapshot: Snapshot, policy: Policy, now: float) -> None:
    for team in sorted({t.name for t in snapshot.teams})[:2]:
        for asked in ASKED:
            job = replace(asked, team=team)
            fast = preview(snapshot, job, policy, now)
            assert fast == preview(snapshot, job, policy, now, speedups=False), (team, asked)


@pytest.mark.parametrize(
    "shape", [ClusterShape(24, 300, seed=1, teams=4), ClusterShape(16, 400, seed=2, teams=3, gpus_per_node=4)]
)
def test_a_focused_plan_answers_for_its_job_as_the_whole_plan(shape: ClusterShape) -> None:
    snapshot = synthetic_snapshot(shape)
    ids = sorted(job.id for job in snapshot.pending)
    whole = assert_focused_as_whole(snapshot, Policy(), NOW, ids[:: max(1, len(ids) // 40)])
    assert whole.binds and whole.waiting and whole.evictions, "the shape must bind, evict and leave work waiting"


def test_a_job_deep_in_a_long_queue_is_explained_after_only_the_jobs_that_reach_its_answer() -> None:
    """Past the replay's depth on its GPU models (or with no ETA to give), the jobs before it are only counted;
    its answer is still the whole plan's, for the last waiting jobs, blocked by capacity or by quota alike."""
    snapshot = synthetic_snapshot(ClusterShape(8, 1500, seed=4, teams=3))
    whole = plan_cycle(snapshot, Policy(), NOW)
    deep = whole.waiting[-40:]
    assert {w.blocker for w in deep} >= {BlockerKind.CAPACITY, BlockerKind.QUOTA}, "both kinds must be checked"
    assert any(w.eta_s is None for w in deep if w.blocker == BlockerKind.CAPACITY), "the depth must be reached"
    for waiting in deep:
        focused = plan_for(snapshot, Policy(), NOW, waiting.job)
        assert _answer(focused, waiting.job) == _answer(whole, waiting.job)
        assert len(focused.waiting) < waiting.position / 2, "the jobs before it were counted, not explained"


@pytest.mark.parametrize(
    "shape", [ClusterShape(16, 150, seed=1, teams=4), ClusterShape(12, 200, seed=2, teams=3, gpus_per_node=4)]
)
def test_a_preview_answers_as_the_preview_planned_whole(shape: ClusterShape) -> None:
    assert_previews_alike(synthetic_snapshot(shape), Policy(), NOW)


@pytest.mark.slow  # some scenarios run hundreds of cycles: `make test` runs it, the inner loop does not
@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_every_cycle_of_a_scenario_answers_each_job_as_the_whole_plan(path: Path) -> None:
    cycles = 0

    def checking(snapshot: Snapshot, policy: Policy, now: float) -> Plan:
        nonlocal cycles
        cycles += 1
        if cycles % 3 != 1:  # every third cycle: some scenarios run hundreds
            return plan_cycle(snapshot, policy, now)
        ids = sorted(job.id for job in snapshot.pending)
        whole = assert_focused_as_whole(snapshot, policy, now, ids[:: max(1, len(ids) // 4)])
        if cycles % 30 == 1:  # each preview plans up to hysteresis + 3 cycles, twice
            assert_previews_alike(snapshot, policy, now)
        return whole

    replay(load_scenario(path), checking)
    assert cycles


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_random_small_clusters_answer_each_job_as_the_whole_plan(snapshot: Snapshot) -> None:
    assert_focused_as_whole(snapshot, Policy(), SMALL_NOW, [job.id for job in snapshot.pending])
    assert_previews_alike(snapshot, Policy(), SMALL_NOW)
