"""Explanations (docs/scheduling-rules.md, 7): a reason a person understands and an ETA for every pending job."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest

from scheduler.core.model.cluster_state import Gpu
from scheduler.core.model.demand import Demand
from scheduler.core.model.explain import (
    PROFILE_DEPTH,
    SHARE,
    WHOLE,
    Blocker,
    EtaEstimator,
    _Profile,
    ahead_text,
    demand_shape,
    demand_units,
    need_text,
    reason_text,
    standing_text,
    supply,
)
from scheduler.core.model.snapshot import Job, Node, Running, Slot
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
            Blocker(BlockerKind.CAPACITY, "no preemption tried for it this cycle"),
            "waiting for 4 H100 GPUs; no preemption tried for it this cycle; team above its guarantee; 3 jobs ahead",
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
    cordoned = replace(node("off"), schedulable=False)
    state = state_of([node("n"), node("g", A100, 1, mig="all-3g.40gb"), cordoned], [a, b, c, m])
    ends = {"a": NOW + 300, "b": NOW + 7100, "m": NOW + 50}
    ready = {"n": NOW, "g": NOW}
    return EtaEstimator(state, NOW, ready, ends.__getitem__, lambda job_id: job_id == "c", 300.0, 10.0, tables)


@pytest.mark.parametrize(
    ("models", "shape", "units", "expected"),
    [
        ((H100,), WHOLE, 2 * GPU, 0.0),  # free now: GPU 7, and GPU 6, whose hold counts free
        ((H100,), WHOLE, 6 * GPU, 300.0),  # 2 free + 4 released when "a" ends
        ((H100,), WHOLE, 8 * GPU, 7100.0),
        ((H100,), WHOLE, 9 * GPU, None),  # the cordoned node's GPUs never count
        ((A100,), "3g.40gb", 3000, 0.0),  # the free instance of its profile
        ((A100,), "3g.40gb", 6000, 50.0),  # and the one "m" frees
        ((A100,), "3g.40gb", 7000, 350.0),  # the last slice once the GPU is empty (+50) and changed (+300)
        ((A100,), "1g.10gb", 1000, 350.0),  # no such instance there: the GPU must be changed first
        ((A100,), WHOLE, GPU, 350.0),  # MIG must be turned off first
        ((A100, H100), WHOLE, 9 * GPU, 7100.0),  # a pool of two models
    ],
)
def test_capacity_eta_of_a_single_job(models: tuple[str, ...], shape: str, units: int, expected: float | None) -> None:
    assert _estimator().capacity_eta(models, shape, units, 600.0) == expected


def test_a_job_blocked_now_starts_at_the_next_change_of_its_pool() -> None:
    # 2 GPUs are free now, yet the cycle could not place it (its gang does not fit one node, say): not now.
    assert _estimator().capacity_eta((H100,), WHOLE, 2 * GPU, 600.0, later=True) == 300.0
    assert _estimator().capacity_eta((A100,), "3g.40gb", 3000, 600.0, later=True) == 50.0


# The plain estimator, and the cycle's with the speed-ups on: its pools remember where a start was first possible.
@pytest.mark.parametrize("tables", [FORGET, Memo()], ids=["plain", "remembering"])
def test_capacity_eta_replays_the_queue_with_backfill(tables: Tables) -> None:
    estimator = _estimator(tables)
    # 2 GPUs free now; "a" gives 4 back at +300, "b" 2 at +7100.
    assert estimator.capacity_eta((H100,), WHOLE, 3 * GPU, 100.0) == 300.0  # waits for "a"; holds 3 to 400
    assert estimator.capacity_eta((H100,), WHOLE, 2 * GPU, 300.0) == 0.0  # backfills the hole before it
    assert estimator.capacity_eta((H100,), WHOLE, 1 * GPU, 1.0) == 300.0  # nothing free before "a" ends
    assert estimator.capacity_eta((H100,), WHOLE, 3 * GPU, 50.0) == 301.0  # 2 free from 300 to 301: after it
    assert estimator.capacity_eta((H100,), WHOLE, 99 * GPU, 50.0) is None  # can never start: holds nothing up
    assert estimator.capacity_eta((H100,), WHOLE, 1 * GPU, 60.0, later=True) == 351.0  # none free from 301 to 351
    assert estimator.capacity_eta((H100,), WHOLE, 2 * GPU, 60.0, start_at=NOW + 50) == 50.0  # a reservation's start
    assert estimator.capacity_eta((H100,), WHOLE, 2 * GPU, 10.0, claim=False) == 351.0  # asked only: takes nothing
    assert estimator.capacity_eta((H100,), WHOLE, 2 * GPU, 10.0) == 351.0
    assert estimator.capacity_eta((H100,), WHOLE, 2 * GPU, 10.0) == 361.0


def test_the_jobs_on_some_gpu_models_get_a_time_for_the_first_ones_only() -> None:
    estimator = _estimator()
    assert estimator.capacity_eta((H100,), "1g.10gb", 1, 1.0) == 310.0  # an idle H100, once changed next cycle
    assert estimator.capacity_eta((H100,), WHOLE, 1, 1.0, claim=False) == 0.0  # asking answers nobody
    for _ in range(PROFILE_DEPTH - 1):
        assert estimator.capacity_eta((H100,), WHOLE, 1, 1.0) is not None
    assert estimator.capacity_eta((H100,), WHOLE, 1, 1.0) is None
    assert estimator.capacity_eta((H100,), "1g.10gb", 1, 1.0) is None  # another shape on the same models too
    assert estimator.capacity_eta((H100, A100), WHOLE, 1, 1.0) == 0.0  # other models count their own


def test_work_past_its_expected_end_counts_as_ending_now() -> None:
    late = running(job("a", gpus=8, duration_s=60), (whole("n", *range(8)),), started_at=NOW - 3600)
    estimator = EtaEstimator(
        state_of([node("n")], [late]), NOW, {"n": NOW}, lambda job_id: NOW - 3540, lambda _: False, 300.0, 10.0
    )
    assert estimator.capacity_eta((H100,), WHOLE, 8 * GPU, 60.0) == 0.0


def _gpu(the_node: Node, placed: Sequence[Running] = (), index: int = 0) -> Gpu:
    return state_of([the_node], placed).gpus[(the_node.name, index)]


def _changed(empty: float) -> float:
    return max(empty, NOW + 10) + 300


@pytest.mark.parametrize(
    ("gpu", "shape", "holders", "expected"),
    [
        # MIG off: whole work once it is empty; a profile that takes all 7 slices as well, another after a change
        (_gpu(node("n", A100, 1)), WHOLE, {}, [(NOW, GPU)]),
        (_gpu(node("n", A100, 1)), "7g.80gb", {}, [(NOW, GPU)]),
        (_gpu(node("n", A100, 1)), "1g.10gb", {}, [(NOW + 310, GPU)]),
        (_gpu(node("n", H100, 1)), "1g.10gb", {}, [(NOW + 310, GPU)]),
        # MIG on: its profile's instances as they free, the rest once empty and changed
        (
            _gpu(node("n", A100, 1, mig="all-balanced")),
            "1g.10gb",
            {},
            [(NOW, 1000), (NOW, 1000), (NOW + 310, 5000)],
        ),
        (
            _gpu(
                node("n", A100, 1, mig="all-balanced"),
                [running(job("i", mig="1g.10gb"), ((Slot("n", 0, "1g.10gb", 1),),))],
            ),
            "1g.10gb",
            {"i": NOW + 900},
            [(NOW, 1000), (NOW + 900, 1000), (NOW + 1200, 5000)],
        ),
        (_gpu(node("n", A100, 1, mig="all-7g.80gb")), "7g.80gb", {}, [(NOW, GPU)]),
        (_gpu(node("n", A100_40, 1, mig="all-balanced")), "7g.80gb", {}, [(NOW + 310, GPU)]),  # not on this model
        (_gpu(node("n", A100, 1, mig="all-3g.40gb")), WHOLE, {}, [(NOW + 310, GPU)]),
        (_gpu(node("n", A100, 1, mig="all-3g.40gb")), SHARE, {}, [(NOW + 310, GPU)]),
        # Shares: what the others leave of a GPU with MIG off, and each share as it ends
        (
            _gpu(node("n", sharing=True), [running(job("s", milli=250), ((Slot("n", 0, milli=250),),))]),
            SHARE,
            {"s": NOW + 60},
            [(NOW, GPU - 1750), (NOW + 60, 1750)],
        ),
        (
            _gpu(node("n", sharing=True), [running(job("s", milli=250), ((Slot("n", 0, milli=250),),))]),
            SHARE,
            {},  # a hold: it counts free
            [(NOW, GPU)],
        ),
        (
            _gpu(node("n", H100, 1), [running(job("w", gpus=1), (whole("n", 0),))]),
            SHARE,
            {"w": NOW + 60},
            [(NOW + 60, GPU)],
        ),
    ],
)
def test_supply(gpu: Gpu, shape: str, holders: dict[str, float], expected: list[tuple[float, int]]) -> None:
    assert supply(gpu, shape, NOW, holders, _changed) == expected


@pytest.mark.parametrize(
    ("demand", "shape"),
    [(Demand.whole(2), WHOLE), (Demand.mig("3g.40gb"), "3g.40gb"), (Demand.share(250), SHARE)],
)
def test_demand_shape(demand: Demand, shape: str) -> None:
    assert demand_shape(demand) == shape


def test_a_later_start_on_a_pool_where_nothing_frees_after_now_is_none() -> None:
    """Found by Hypothesis (tests/scheduler/core/speedups/test_focus.py, a random small cluster): a job that could
    not start now, on a pool whose GPUs are all free now and none frees later, has no start to tell — the scan
    ran off the profile's end (IndexError) and the job was rejected as an internal error."""
    pool = _Profile(0.0, [(0.0, 4)], FORGET)
    assert pool.start(2, 100.0, later=True) is None
    assert pool.start(2, 100.0) == 0.0  # now is not ruled out: it starts now
