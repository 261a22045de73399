"""Fair share, the order of pending work (docs/scheduling-rules.md, 3): a team whose next job fits within its guarantee
is served before any borrower, and what lies above the guarantees is split by weight (the borrowed share)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.core import plan_cycle
from scheduler.core.gpus.units import UNITS_PER_GPU
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, ModelProfile, Request, Snapshot
from scheduler.core.model.vocabulary import JobKind, Priority
from tests.scheduler.core.decisions.test_preemption import H100, job, node, on, run, team, world

G = UNITS_PER_GPU
NODES = [node("a1"), node("h1", model=H100)]  # 8 A100 + 8 H100


@pytest.mark.parametrize(
    ("held", "asks", "fits"),
    [
        (1, 1, True),  # 1 + 1 ≤ 2
        (1, 2, False),  # 1 + 2 > 2: under the guarantee, but this job would borrow
        (0, 2, True),
        (2, 1, False),
    ],
)
def test_the_next_job_must_fit_within_the_guarantee(held: int, asks: int, fits: bool) -> None:
    running = [run(job(f"r{i}", "t"), on("a1", i)) for i in range(held)]
    _, fair = world(NODES, [team("t", {"any": 2})], running)
    assert fair.fits_guarantee("t", job("next", "t", gpus=asks)) is fits


def test_a_class_guarantee_bounds_a_job_pinned_to_that_class() -> None:
    running = [run(job("r", "t"), on("h1", 0))]
    _, fair = world(NODES, [team("t", {"any": 4, "H100": 1})], running)
    assert not fair.fits_guarantee("t", job("h", "t", gpu_model="H100"))  # 1 + 1 > the H100 guarantee of 1
    assert fair.fits_guarantee("t", job("a", "t", gpu_model="A100"))  # A100 is bounded by the overall 4 only
    assert fair.fits_guarantee("t", job("any", "t"))


def test_need_units_are_the_fewest_any_model_of_the_cluster_offers() -> None:
    _, fair = world(NODES, [team("t")])
    assert fair.need_units(job("g", "t", gpus=2, replicas=3)) == 6 * G
    small = Job(id="m", team="t", request=Request(model=ModelProfile(params_b=7)), kind=JobKind.INFERENCE)
    assert fair.need_units(small) == G // 7  # a 1g slice somewhere on the cluster: one compute slice
    assert fair.need_units(small) == G // 7  # remembered per request, kind, constraint and replicas
    nowhere = Job(id="x", team="t", request=Request(mig_profile="1g.10gb"), gpu_model="H200")
    assert fair.need_units(nowhere) == 1  # no model of the cluster serves it: counted as more than nothing


def test_the_borrowed_share_counts_only_what_lies_above_the_guarantee() -> None:
    running = [run(job(f"r{i}", "t", preemptible=True), on("a1", i)) for i in range(5)]
    running += [run(job("h", "u", preemptible=True), on("h1", 0, 1, 2))]
    _, fair = world(NODES, [team("t", {"any": 2}), team("u", {"any": 4, "H100": 1}), team("idle")], running)
    assert fair.borrowed_share("t") == pytest.approx(3 / 16)  # 3 GPUs above 2, over the 16 of the cluster
    assert fair.borrowed_share("u") == pytest.approx(2 / 8)  # within 4 overall, 2 above its H100 1 of 8 H100s
    assert fair.borrowed_share("idle") == 0.0


def test_a_cluster_without_gpus_has_no_borrowed_share() -> None:
    _, fair = world([node("cpu", gpus=0)], [team("t")])
    assert fair.total_capacity == 0
    fair.state.usage["t"]["A100"] = G  # as if it held one: no capacity to measure it against
    assert fair.borrowed_share("t") == 0.0


# -- within a team: a job resuming after an infrastructure loss --------------------------------------------


def test_a_resuming_job_goes_first_within_its_priority_ahead_of_rank_and_submit_time() -> None:
    _, fair = world(NODES, [team("t", {"any": 4})])
    pending = [
        job("ranked", "t", rank=-5, submitted_at=1),
        job("early", "t", submitted_at=0),
        job("resumes", "t", submitted_at=9, rank=3, resumes=True),
        job("high", "t", priority=Priority.HIGH, submitted_at=10),
        job("low-resumes", "t", priority=Priority.LOW, resumes=True),
    ]
    assert [j.id for j in fair.order(pending, 0.0)] == ["high", "resumes", "ranked", "early", "low-resumes"]


def test_without_fairness_a_resuming_job_still_goes_first_within_its_priority() -> None:
    _, fair = world(NODES, [team("t"), team("u")], policy=Policy(fairness=False))
    pending = [job("early", "u", submitted_at=0), job("resumes", "t", submitted_at=5, resumes=True)]
    assert [j.id for j in fair.order(pending, 0.0)] == ["resumes", "early"]


def test_the_engine_binds_the_resuming_job_when_only_one_fits() -> None:
    one_gpu = Snapshot(
        nodes=(node("a1", gpus=1),),
        teams=(team("t", {"any": 1}),),
        pending=(job("first", "t", submitted_at=0), job("lost-its-node", "t", submitted_at=50, resumes=True)),
    )
    assert [bind.job for bind in plan_cycle(one_gpu, Policy(), 100.0).binds] == ["lost-its-node"]
    plain = replace(one_gpu, pending=tuple(replace(j, resumes=False) for j in one_gpu.pending))
    assert [bind.job for bind in plan_cycle(plain, Policy(), 100.0).binds] == ["first"]
