"""B2 metrics on hand-built run logs: true need, windows, lost work, waits, throughput."""

from __future__ import annotations

import pytest

from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, ModelProfile, Node, Request, Slot
from scheduler.core.model.vocabulary import JobKind, Priority
from scheduler.sim.metrics import percentile, replica_need, utilization_series, window_metrics
from scheduler.sim.records import RunLog
from scheduler.sim.report import ReplayResult

POLICY = Policy()
NODES = {"a": Node("a", "A100-SXM4-80GB", 4), "b": Node("b", "A100-SXM4-80GB", 4)}


def service(job_id: str, t: float = 0.0, **keys: object) -> Job:
    keys.setdefault("request", Request(memory_gib=10))
    return Job(job_id, "t", kind=JobKind.INFERENCE, submitted_at=t, **keys)  # type: ignore[arg-type]


def training(job_id: str, gpus: int, t: float = 0.0, **keys: object) -> Job:
    return Job(job_id, "t", Request(gpus=gpus), kind=JobKind.TRAINING, submitted_at=t, **keys)  # type: ignore[arg-type]


def result(*runs: RunLog, end: float = 1000.0, events: tuple = ()) -> ReplayResult:
    return ReplayResult("m", (), {}, events, {}, runs=runs, capacity=((0.0, 8),), end=end)


def test_true_need_of_the_request_forms() -> None:
    model = "A100-SXM4-80GB"
    assert replica_need(service("s"), model, POLICY) == pytest.approx(1 / 7)  # 10 GiB → 1g.20gb: one slice
    # 30 GiB: 2g.20gb holds 19 GiB, 3g.40gb 38 GiB → three slices
    assert replica_need(service("s", request=Request(memory_gib=30)), model, POLICY) == pytest.approx(3 / 7)
    assert replica_need(service("s", request=Request(memory_gib=150)), model, POLICY) == 2.0
    assert replica_need(service("s", request=Request(mig_profile="3g.40gb")), model, POLICY) == pytest.approx(3 / 7)
    assert replica_need(service("s", request=Request(gpu_milli=250)), model, POLICY) == 0.25
    assert replica_need(training("t", 4), model, POLICY) == 4.0
    seven_b = Request(model=ModelProfile(params_b=7, context=2048))
    assert replica_need(service("s", request=seven_b), model, POLICY) < 1
    trainer = Job("x", "t", Request(memory_gib=10), kind=JobKind.TRAINING)
    assert replica_need(trainer, model, POLICY) == 1.0  # training takes whole GPUs


def test_a_small_service_on_a_whole_gpu_counts_one_seventh() -> None:
    run = RunLog(service("s"), ((Slot("a", 0),),), 0.0, 1000.0, 1.0, "running")
    metrics = window_metrics(result(run), [run.job], NODES, POLICY, (0.0, 1000.0))
    assert metrics["allocation_ratio"] == pytest.approx(1 / 8, abs=1e-6)
    assert metrics["effective_utilization"] == pytest.approx(1 / 7 / 8, abs=1e-6)


def test_window_excludes_the_warmup_and_lost_work_is_taken_out() -> None:
    job = training("t", 2, checkpoint_interval_s=100)
    run = RunLog(job, ((Slot("a", 0), Slot("a", 1)),), 0.0, 600.0, 0.5, "evicted", lost_s=200.0)
    metrics = window_metrics(result(run), [job], NODES, POLICY, (200.0, 1000.0))
    # 2 GPUs × 400 s in the window, 200 s of it lost; capacity 8 × 800
    assert metrics["allocation_ratio"] == pytest.approx(800 / 6400, abs=1e-6)
    assert metrics["effective_utilization"] == pytest.approx((800 - 400) / 6400, abs=1e-6)
    # 2 GPUs × rate 0.5 × (400 − 200) s = 200 GPU-s in 800 s
    assert metrics["training_throughput"] == pytest.approx(200 / 3600 / (800 / 3600), abs=1e-4)
    assert metrics["distributed_speed"] == 0.5
    assert (metrics["evictions"], metrics["lost_gpu_hours"]) == (1, pytest.approx(400 / 3600, abs=1e-4))


def test_waits_per_class_count_the_still_waiting_and_leave_out_the_rejected() -> None:
    prod = service("p", t=100.0, priority=Priority.PRODUCTION)
    late = service("q", t=300.0, priority=Priority.PRODUCTION)
    rejected = training("r", 64, t=100.0)
    before = service("w", t=10.0, priority=Priority.PRODUCTION)  # submitted in the warm-up: not counted
    runs = (RunLog(prod, ((Slot("a", 0),),), 110.0, 1000.0, 1.0, "running"),)
    events = ({"t": 100, "type": "rejected", "job": "r"},)
    metrics = window_metrics(
        result(*runs, events=events), [prod, late, rejected, before], NODES, POLICY, (50.0, 1000.0)
    )
    assert metrics["queue_wait_s"]["production"] == {
        "p50": 10.0,
        "p95": 700.0,
        "max": 700.0,
        "jobs": 2,
        "still_waiting": 1,
    }
    assert metrics["production_inference_wait_s"]["p95"] == 700.0
    assert "normal" not in metrics["queue_wait_s"] and metrics["rejected"] == 1


def test_an_evicted_service_loses_no_served_time() -> None:
    run = RunLog(service("s"), ((Slot("a", 0),),), 0.0, 700.0, 1.0, "evicted", lost_s=700.0)
    metrics = window_metrics(result(run), [run.job], NODES, POLICY, (0.0, 1000.0))
    assert metrics["effective_utilization"] == pytest.approx(1 / 7 * 700 / 8000, abs=1e-6)
    assert (metrics["evictions"], metrics["lost_gpu_hours"]) == (1, 0.0)


def test_a_moved_service_counts_each_placement_and_one_move() -> None:
    """A move splits the run (outcome ``moved``): the whole GPU held until the move, the slice after; no work is
    lost, no eviction counted, one move inside the window (scaled to 8 h)."""
    job = service("s", priority=Priority.PRODUCTION)
    slice_slot = Slot("b", 0, mig_profile="1g.10gb", mig_start=0)
    runs = (
        RunLog(job, ((Slot("a", 0),),), 0.0, 400.0, 1.0, "moved"),
        RunLog(job, ((slice_slot,),), 400.0, 1000.0, 1.0, "running"),
    )
    metrics = window_metrics(result(*runs), [job], NODES, POLICY, (0.0, 1000.0))
    assert metrics["allocation_ratio"] == pytest.approx((400 + 600 / 7) / 8000, abs=1e-6)
    assert metrics["effective_utilization"] == pytest.approx(1000 / 7 / 8000, abs=1e-6)
    assert (metrics["evictions"], metrics["moves"], metrics["moves_per_8h"]) == (0, 1, round(8 * 3600 / 1000, 3))
    assert metrics["production_inference_wait_s"]["max"] == 0.0


def test_percentile_is_nearest_rank() -> None:
    values = list(range(1, 21))
    assert percentile(values, 95) == 19 and percentile(values, 50) == 10 and percentile([3.0], 95) == 3.0


def test_utilization_series_buckets() -> None:
    run = RunLog(training("t", 4), tuple((Slot("a", g),) for g in range(4)), 0.0, 300.0, 1.0, "completed")
    series = utilization_series(result(run), NODES, POLICY, (0.0, 600.0), bucket_s=200.0)
    assert [round(e, 4) for _, e, _ in series] == [0.5, 0.25, 0.0]
