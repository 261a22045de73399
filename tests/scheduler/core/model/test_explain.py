"""Explanations (docs/scheduling-rules.md, 7): a reason a person understands and an ETA for every pending job."""

from __future__ import annotations

import pytest

from scheduler.core.model.demand import Demand
from scheduler.core.model.explain import (
    PROFILE_DEPTH,
    Blocker,
    EtaEstimator,
    ahead_text,
    demand_units,
    need_text,
    reason_text,
    standing_text,
)
from scheduler.core.model.snapshot import Job, Slot
from scheduler.core.model.tables import FORGET, Tables
from scheduler.core.model.vocabulary import BlockerKind
from scheduler.core.speedups.memo import Memo
from tests.scheduler.properties.builders import A100, A100_40, H100, NOW, job, node, running, state_of, whole

GPU = 7000


@pytest.mark.parametrize(
    ("the_job", "demand", "models", "expected"),
    [
        (job("j", gpus=4), Demand.whole(4), [H100], "4 H100 GPUs"),
        (job("j", gpus=1), Demand.whole(1), [H100, A100], "1 GPU"),
        (job("j", gpus=1, gpu_model=H100), Demand.whole(1), [H100], f"1 {H100} GPU"),
        (job("j", gpus=4, replicas=2), Demand.whole(4), [A100, A100_40], "8 A100 GPUs (2 replicas × 4, all at once)"),
        (job("j", mig="1g.10gb"), Demand.mig("1g.10gb"), [A100], "a 1g.10gb MIG instance"),
        (job("j", mig="1g.10gb", replicas=3), Demand.mig("1g.10gb"), [A100], "3 × 1g.10gb MIG instances (all at once)"),
        (job("j", milli=250), Demand.share(250), [H100], "a 250-milli share of a time-sliced H100 GPU"),
        (
            job("j", milli=250, replicas=2),
            Demand.share(250),
            [],
            "2 × 250-milli shares of time-sliced GPUs (all at once)",
        ),
        (job("j", gpus=2, replicas=3), None, [], "3 replicas of GPU capacity"),
        (job("j", gpus=2, gpu_model="A100"), None, [], "1 replica of A100 GPU capacity"),
    ],
)
def test_need_text(the_job: Job, demand: Demand | None, models: list[str], expected: str) -> None:
    assert need_text(the_job, demand, models) == expected


@pytest.mark.parametrize(("ahead", "expected"), [(0, "next in line"), (1, "1 job ahead"), (3, "3 jobs ahead")])
def test_ahead_text(ahead: int, expected: str) -> None:
    assert ahead_text(ahead) == expected


@pytest.mark.parametrize(
    ("guarantee", "held", "under", "expected"),
    [
        (0, 0, False, "team has no guaranteed quota"),
        (4 * GPU, GPU, True, "team within its guarantee"),
        (4 * GPU, 4 * GPU, False, "team at its guarantee"),
        (4 * GPU, 6 * GPU, False, "team above its guarantee"),
    ],
)
def test_standing_text(guarantee: int, held: int, under: bool, expected: str) -> None:
    assert standing_text(guarantee, held, under) == expected


@pytest.mark.parametrize(
    ("blocker", "expected"),
    [
        (Blocker(BlockerKind.CAPACITY), "waiting for 4 H100 GPUs; team above its guarantee; 3 jobs ahead"),
        (
            Blocker(BlockerKind.QUOTA, "team nlp would hold 6 GPUs, above its guarantee of 4"),
            "waiting for 4 H100 GPUs within quota: team nlp would hold 6 GPUs, above its guarantee of 4; "
            "team above its guarantee; 3 jobs ahead",
        ),
        (
            Blocker(BlockerKind.RECONFIGURING, "node a GPU 1", NOW + 299.6),
            "waiting for 4 H100 GPUs; MIG reconfiguration under way on node a GPU 1, ready in 300 s; "
            "team above its guarantee; 3 jobs ahead",
        ),
        (
            Blocker(BlockerKind.RECONFIGURING, "node a GPU 1"),
            "waiting for 4 H100 GPUs; MIG reconfiguration under way on node a GPU 1; team above its guarantee; "
            "3 jobs ahead",
        ),
        (
            Blocker(BlockerKind.NOT_READY),
            "waiting for 4 H100 GPUs; no node that could run it is ready (cordoned, draining or reconfiguring); "
            "team above its guarantee; 3 jobs ahead",
        ),
    ],
)
def test_reason_text(blocker: Blocker, expected: str) -> None:
    assert reason_text("4 H100 GPUs", blocker, "team above its guarantee", 3, NOW) == expected


@pytest.mark.parametrize(
    ("demand", "model", "units"),
    [
        (Demand.whole(2), H100, 2 * GPU),
        (Demand.mig("3g.40gb"), A100, 3000),
        (Demand.mig("1g.10gb"), A100, 1000),
        (Demand.share(250), H100, 1750),
    ],
)
def test_demand_units(demand: Demand, model: str, units: int) -> None:
    assert demand_units(demand, model) == units


def _estimator(tables: Tables = FORGET) -> EtaEstimator:
    a = running(job("a", "x", gpus=4), (whole("n", 0, 1, 2, 3),), started_at=NOW - 300)
    b = running(job("b", "y", gpus=2), (whole("n", 4, 5),), started_at=NOW - 100)
    c = running(job("c", "y", gpus=1), (whole("n", 6),), started_at=NOW - 100)  # a reservation hold, say
    m = running(job("m", "x", mig="3g.40gb"), ((Slot("g", 0, "3g.40gb", 4),),), started_at=NOW - 100)
    state = state_of([node("n"), node("g", A100, 1, mig="all-3g.40gb")], [a, b, c, m])
    ends = {"a": NOW + 300, "b": NOW + 7100, "m": NOW + 50}
    return EtaEstimator(state, NOW, {H100: 1 * GPU}, ends.__getitem__, lambda job_id: job_id == "c", tables)


@pytest.mark.parametrize(
    ("models", "units", "expected"),
    [
        ((H100,), 1 * GPU, 0.0),  # free now
        ((H100,), 5 * GPU, 300.0),  # 1 free + 4 released when "a" ends
        ((H100,), 7 * GPU, 7100.0),
        ((H100,), 8 * GPU, None),  # "c" holds its GPU for nothing the estimate counts: never 8
        ((A100,), 3000, 50.0),  # the MIG slice that "m" frees
        ((A100, H100), 7 * GPU + 3000, 7100.0),  # a pool of two models
    ],
)
def test_capacity_eta_of_a_single_job(models: tuple[str, ...], units: int, expected: float | None) -> None:
    assert _estimator().capacity_eta(models, units, 600.0) == expected


# The plain estimator, and the cycle's with the speed-ups on: its pools remember where a start was first possible.
@pytest.mark.parametrize("tables", [FORGET, Memo()], ids=["plain", "remembering"])
def test_capacity_eta_replays_the_queue_with_backfill(tables: Tables) -> None:
    estimator = _estimator(tables)
    # 1 GPU free now; "a" gives 4 back at +300, "b" 2 at +7100.
    assert estimator.capacity_eta((H100,), 2 * GPU, 100.0) == 300.0  # waits for "a"; holds 2 from 300 to 400
    assert estimator.capacity_eta((H100,), 1 * GPU, 300.0) == 0.0  # backfills the hole before it
    assert estimator.capacity_eta((H100,), 1 * GPU, 301.0) == 300.0  # 3 free from 300: beside the first job
    assert estimator.capacity_eta((H100,), 3 * GPU, 50.0) == 400.0  # 2 free from 300 to 400: after it
    assert estimator.capacity_eta((H100,), 99 * GPU, 50.0) is None  # can never start: holds nothing up
    assert estimator.capacity_eta((H100,), 5 * GPU, 7000.0) == 601.0  # 5 free from 601 on (7 from 7100)
    assert estimator.capacity_eta((H100,), 2 * GPU, 60.0, start_at=NOW + 50) == 50.0  # a reservation's start
    assert estimator.capacity_eta((H100,), 1 * GPU, 10.0) == 300.0  # nothing free before "a" ends now


def test_a_pool_gives_a_time_to_its_first_jobs_only() -> None:
    estimator = _estimator()
    for _ in range(PROFILE_DEPTH):
        assert estimator.capacity_eta((H100,), 1, 1.0) is not None
    assert estimator.capacity_eta((H100,), 1, 1.0) is None
    assert estimator.capacity_eta((H100, A100), 1, 1.0) == 0.0  # another pool counts its own


def test_work_past_its_expected_end_counts_as_ending_now() -> None:
    late = running(job("a", gpus=8, duration_s=60), (whole("n", *range(8)),), started_at=NOW - 3600)
    estimator = EtaEstimator(state_of([node("n")], [late]), NOW, {}, lambda job_id: NOW - 3540, lambda _: False)
    assert estimator.capacity_eta((H100,), 8 * GPU, 60.0) == 0.0
