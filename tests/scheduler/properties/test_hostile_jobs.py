"""Hostile jobs straight in a snapshot (RELIABILITY.md): huge, NaN, infinite, zero and negative numbers, the kind no
edge lets through but a hand-written row or a bug could. Each is rejected with a reason, and every other job's
plan is exactly what it would have been without them."""

from __future__ import annotations

import math
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from scheduler.core import Plan, plan_cycle
from scheduler.core.model.snapshot import Job, ModelProfile, Request, Snapshot
from scheduler.core.model.vocabulary import JobKind, Priority
from tests.scheduler.properties.builders import NOW
from tests.scheduler.properties.test_cycle_properties import POLICY, SETTINGS, TEAMS, snapshots

HUGE_INTS = st.sampled_from([0, -1, -(10**6), 2**63, 10**30, 10**400])
BAD_FLOATS = st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -5.0, 1e308])
BAD_MEMORY = BAD_FLOATS | st.just(0.001)  # below the 0.01 GiB the ledger can write
BAD_PARAMS = st.sampled_from([math.nan, math.inf, 0.0, -1.0, 1e300, 10**400])


@st.composite
def hostile_requests(draw: st.DrawFn) -> Request:
    way = draw(st.sampled_from(("gpus", "milli", "memory", "params", "context", "batch")))
    if way == "gpus":
        return Request(gpus=draw(HUGE_INTS))
    if way == "milli":
        return Request(gpu_milli=draw(HUGE_INTS))
    if way == "memory":
        return Request(memory_gib=draw(BAD_MEMORY))
    if way == "params":
        return Request(model=ModelProfile(params_b=draw(BAD_PARAMS)))
    if way == "context":
        return Request(model=ModelProfile(params_b=7.0, context=draw(HUGE_INTS)))
    return Request(model=ModelProfile(params_b=7.0, batch=draw(HUGE_INTS)))


@st.composite
def hostile_jobs(draw: st.DrawFn, index: int) -> Job:
    """A job with at least one number outside its bound: a hostile request, or a sane one with a hostile
    count, duration, interval or rank."""
    fields: dict[str, object] = {}
    if draw(st.booleans()):
        request = draw(hostile_requests())
    else:
        request = Request(gpus=1)
        key = draw(st.sampled_from(("replicas", "duration_s", "checkpoint_interval_s", "rank")))
        fields[key] = draw(HUGE_INTS.filter(lambda v: abs(v) > 2**31) if key == "rank" else HUGE_INTS | BAD_FLOATS)
    return Job(
        id=f"zz-hostile-{index}",
        team=draw(st.sampled_from(TEAMS)),
        request=request,
        kind=draw(st.sampled_from(list(JobKind))),
        priority=draw(st.sampled_from(list(Priority))),
        **fields,  # type: ignore[arg-type]
    )


@st.composite
def with_hostile_jobs(draw: st.DrawFn) -> tuple[Snapshot, list[Job]]:
    snapshot = draw(snapshots())
    hostile = [draw(hostile_jobs(i)) for i in range(draw(st.integers(1, 4)))]
    return snapshot, hostile


def _others(plan: Plan, hostile: set[str]) -> Plan:
    return Plan(
        evictions=plan.evictions,
        reconfigurations=plan.reconfigurations,
        binds=plan.binds,
        rejections=tuple(r for r in plan.rejections if r.job not in hostile),
        waiting=plan.waiting,
    )


@SETTINGS
@given(with_hostile_jobs())
def test_hostile_jobs_are_rejected_alone_and_change_no_other_plan(world: tuple[Snapshot, list[Job]]) -> None:
    snapshot, hostile = world
    clean = plan_cycle(snapshot, POLICY, NOW)
    poisoned = replace(snapshot, pending=(*snapshot.pending, *hostile))
    plan = plan_cycle(poisoned, POLICY, NOW)
    ids = {job.id for job in hostile}
    reasons = {r.job: r.reason for r in plan.rejections if r.job in ids}
    assert set(reasons) == ids
    assert all(reason.startswith("invalid request: ") for reason in reasons.values()), reasons
    assert _others(plan, ids) == clean
