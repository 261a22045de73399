"""A job's true need (scheduler.core.sizing.need): the numerator of effective utilization, for the benchmarks and
/metrics."""

from __future__ import annotations

import pytest

from scheduler.core import Policy, replica_need
from scheduler.core.model.snapshot import Job, ModelProfile, Request
from scheduler.core.model.vocabulary import JobKind, ModelMode

POLICY = Policy()
A100_80 = "A100-SXM4-80GB"


@pytest.mark.parametrize(
    ("request_", "kind", "gpu_model", "need"),
    [
        (Request(gpus=4), JobKind.TRAINING, A100_80, 4.0),
        (Request(gpu_milli=250), JobKind.INFERENCE, "T4", 0.25),
        (Request(gpu_milli=1500), JobKind.TRAINING, "T4", 2.0),  # a trace's milli-GPU above one: whole GPUs
        (Request(mig_profile="3g.40gb"), JobKind.INFERENCE, A100_80, 3 / 7),
        (Request(mig_profile="3g.40gb"), JobKind.INFERENCE, "T4", 1.0),  # no such profile: one GPU
        (Request(memory_gib=10.0), JobKind.INFERENCE, A100_80, 1 / 7),  # 10 GiB on an 80 GB GPU
        (Request(memory_gib=10.0), JobKind.INFERENCE, "T4", 1.0),  # memory unknown outside the catalog
        (Request(memory_gib=100.0), JobKind.INFERENCE, A100_80, 2.0),  # no profile holds it
        (Request(memory_gib=10.0), JobKind.TRAINING, A100_80, 1.0),  # training takes whole GPUs
        (Request(model=ModelProfile(params_b=7, mode=ModelMode.TRAINING)), JobKind.BATCH, A100_80, 2.0),
    ],
)
def test_true_need_per_replica(request_: Request, kind: JobKind, gpu_model: str, need: float) -> None:
    job = Job(id="j", team="t", request=request_, kind=kind)
    assert replica_need(job, gpu_model, POLICY) == pytest.approx(need)
