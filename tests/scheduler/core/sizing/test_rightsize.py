"""Right-sizing a request to a Demand on one GPU model, and saying why a job fits nowhere."""

from __future__ import annotations

import math

import pytest

from scheduler.core.model.demand import Demand
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, ModelProfile, Request
from scheduler.core.model.vocabulary import JobKind, ModelMode
from scheduler.core.sizing.memory import estimate
from scheduler.core.sizing.rightsize import MAX_GPUS_PER_REPLICA, memory_need_mib, resolve, unplaceable_reason

A100_40 = "A100-SXM4-40GB"
A100_80 = "A100-SXM4-80GB"
H100 = "H100-SXM5-80GB"
H200 = "H200-SXM-141GB"
POLICY = Policy()
NO_MIG = Policy(mig=False)
LLAMA_7B = ModelProfile(params_b=7, context=4096, batch=1)
LLAMA_7B_NEED = estimate(LLAMA_7B, 0.10).total_mib  # 18210 MiB: 17.8 GiB
TRAIN_7B = ModelProfile(params_b=7, mode=ModelMode.TRAINING)
TRAIN_7B_NEED = estimate(TRAIN_7B, 0.10).total_mib


def _job(request: Request, kind: JobKind = JobKind.INFERENCE, gpu_model: str | None = None) -> Job:
    return Job(id="j", team="t", request=request, kind=kind, gpu_model=gpu_model)


@pytest.mark.parametrize(
    ("request_", "kind", "constraint", "model", "policy", "expected"),
    [
        # whole GPUs: any model, catalog or not
        (Request(gpus=2), JobKind.TRAINING, None, H100, POLICY, Demand.whole(2)),
        (Request(gpus=1), JobKind.TRAINING, None, "V100", POLICY, Demand.whole(1)),
        (Request(gpus=0), JobKind.TRAINING, None, H100, POLICY, None),
        # a gpu_model constraint (model or class)
        (Request(gpus=1), JobKind.TRAINING, "H100", H100, POLICY, Demand.whole(1)),
        (Request(gpus=1), JobKind.TRAINING, "H100", A100_80, POLICY, None),
        (Request(gpus=1), JobKind.TRAINING, A100_80, A100_80, POLICY, Demand.whole(1)),
        # milli-GPU shares (Alibaba openb): any model; >= 1000 means whole GPUs
        (Request(gpu_milli=250), JobKind.INFERENCE, None, "T4", POLICY, Demand.share(250)),
        (Request(gpu_milli=999), JobKind.INFERENCE, None, H100, POLICY, Demand.share(999)),
        (Request(gpu_milli=1000), JobKind.INFERENCE, None, "P100", POLICY, Demand.whole(1)),
        (Request(gpu_milli=1500), JobKind.INFERENCE, None, "P100", POLICY, Demand.whole(2)),
        (Request(gpu_milli=0), JobKind.INFERENCE, None, "G2", POLICY, None),
        # a MIG profile: only on a model that has it, only with MIG allowed
        (Request(mig_profile="3g.40gb"), JobKind.INFERENCE, None, H100, POLICY, Demand.mig("3g.40gb")),
        (Request(mig_profile="3g.40gb"), JobKind.INFERENCE, None, A100_40, POLICY, None),
        (Request(mig_profile="3g.40gb"), JobKind.INFERENCE, None, "A10", POLICY, None),
        (Request(mig_profile="3g.40gb"), JobKind.INFERENCE, None, H100, NO_MIG, None),
        # memory: the fewest compute slices whose real memory holds it
        (Request(memory_gib=4), JobKind.INFERENCE, None, A100_40, POLICY, Demand.mig("1g.5gb", 4096)),
        (Request(memory_gib=9), JobKind.BATCH, None, A100_40, POLICY, Demand.mig("1g.10gb", 9216)),
        (Request(memory_gib=18), JobKind.INFERENCE, None, H100, POLICY, Demand.mig("1g.20gb", 18432)),
        (Request(memory_gib=30), JobKind.INFERENCE, None, H100, POLICY, Demand.mig("3g.40gb", 30720)),
        (Request(memory_gib=78), JobKind.INFERENCE, None, H100, POLICY, Demand.mig("7g.80gb", 79872)),
        # ... no slice holds it: whole GPUs; the summed memory holds it
        (Request(memory_gib=79), JobKind.INFERENCE, None, H100, POLICY, Demand.whole(1, 80896)),
        (Request(memory_gib=100), JobKind.INFERENCE, None, H100, POLICY, Demand.whole(2, 102400)),
        (Request(memory_gib=640), JobKind.INFERENCE, None, A100_80, POLICY, Demand.whole(8, 655360)),
        (Request(memory_gib=641), JobKind.INFERENCE, None, A100_80, POLICY, None),
        # ... training, or MIG off by policy: whole GPUs
        (Request(memory_gib=18), JobKind.TRAINING, None, H100, POLICY, Demand.whole(1, 18432)),
        (Request(memory_gib=18), JobKind.INFERENCE, None, H100, NO_MIG, Demand.whole(1, 18432)),
        # ... unknown memory outside the catalog
        (Request(memory_gib=4), JobKind.INFERENCE, None, "V100", POLICY, None),
        (Request(memory_gib=0), JobKind.INFERENCE, None, H100, POLICY, None),
        # a model: estimated with the policy's margin
        (Request(model=LLAMA_7B), JobKind.INFERENCE, None, H100, POLICY, Demand.mig("1g.20gb", LLAMA_7B_NEED)),
        (Request(model=LLAMA_7B), JobKind.INFERENCE, None, H200, POLICY, Demand.mig("1g.35gb", LLAMA_7B_NEED)),
        (Request(model=LLAMA_7B), JobKind.TRAINING, None, H100, POLICY, Demand.whole(1, LLAMA_7B_NEED)),
        (Request(model=LLAMA_7B), JobKind.INFERENCE, None, "T4", POLICY, None),
        # ... a model in training mode takes whole GPUs whatever the job kind: ceil(need / GPU memory)
        (Request(model=TRAIN_7B), JobKind.BATCH, None, H100, POLICY, Demand.whole(2, TRAIN_7B_NEED)),
        (Request(model=TRAIN_7B), JobKind.TRAINING, None, A100_40, POLICY, Demand.whole(3, TRAIN_7B_NEED)),
    ],
)
def test_resolve(
    request_: Request, kind: JobKind, constraint: str | None, model: str, policy: Policy, expected: Demand | None
) -> None:
    assert resolve(_job(request_, kind, constraint), model, policy) == expected


def test_training_count_is_memory_over_gpu_memory() -> None:
    assert TRAIN_7B_NEED > 81559  # one H100 cannot hold 7B of Adam training state
    assert resolve(_job(Request(model=TRAIN_7B), JobKind.TRAINING), H100, POLICY) == Demand.whole(
        math.ceil(TRAIN_7B_NEED / 81559), TRAIN_7B_NEED
    )


def test_the_margin_comes_from_the_policy() -> None:
    tight = Policy(memory_safety_margin=0.0)
    assert memory_need_mib(Request(model=LLAMA_7B), tight) < memory_need_mib(Request(model=LLAMA_7B), POLICY)  # type: ignore[operator]
    # a stated memory_gib is the user's own figure: no margin on top
    assert memory_need_mib(Request(memory_gib=10), POLICY) == 10240
    assert memory_need_mib(Request(gpus=1), POLICY) is None


@pytest.mark.parametrize(
    ("job", "models", "policy", "reason"),
    [
        (_job(Request(gpus=1)), [H100, "V100"], POLICY, None),
        (_job(Request(memory_gib=18)), [H100], POLICY, None),
        (_job(Request(gpus=1)), [], POLICY, "the cluster has no GPUs"),
        (
            _job(Request(gpus=1), gpu_model="H200"),
            [H100, A100_80, H100],
            POLICY,
            "asks for H200 GPUs; the cluster has A100-SXM4-80GB, H100-SXM5-80GB",
        ),
        (_job(Request(gpus=0)), [H100], POLICY, "requests no GPU: gpus and gpu_milli must be positive"),
        (_job(Request(gpu_milli=-5)), [H100], POLICY, "requests no GPU"),
        (
            _job(Request(mig_profile="3g.40gb")),
            [H100],
            NO_MIG,
            "asks for MIG profile 3g.40gb, but MIG is disabled by the scheduling policy",
        ),
        (
            _job(Request(mig_profile="3g.40gb")),
            ["V100", "T4"],
            POLICY,
            "asks for MIG profile 3g.40gb, but no GPU in the cluster supports MIG (T4, V100)",
        ),
        (
            _job(Request(mig_profile="3g.40gb")),
            [A100_40, "T4"],
            POLICY,
            "MIG profile 3g.40gb exists on no GPU in the cluster (A100-SXM4-40GB: 1g.5gb, 1g.5gb+me, 1g.10gb,",
        ),
        (
            _job(Request(memory_gib=700)),
            [H100, A100_40],
            POLICY,
            "needs 700.0 GiB per replica; the largest GPU in the cluster (H100-SXM5-80GB) has 79.6 GiB "
            "and one replica spans at most 8 GPUs",
        ),
        (
            _job(Request(model=ModelProfile(params_b=700))),
            [H200],
            POLICY,
            "GiB per replica (weights 1303.9 GiB + KV cache",
        ),
        (
            _job(Request(memory_gib=8)),
            ["V100"],
            POLICY,
            "needs 8.0 GiB per replica, but the memory of the cluster's GPUs (V100) is unknown; request gpus",
        ),
        (_job(Request(memory_gib=0)), [H100], POLICY, "requests no memory: memory_gib must be positive"),
    ],
)
def test_unplaceable_reason(job: Job, models: list[str], policy: Policy, reason: str | None) -> None:
    found = unplaceable_reason(job, models, policy)
    if reason is None:
        assert found is None
    else:
        assert found is not None and reason in found


def test_one_replica_stays_within_one_server() -> None:
    assert MAX_GPUS_PER_REPLICA == 8
