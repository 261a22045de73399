"""True need: what one replica of a job would hold on a perfectly right-sized cluster, in GPUs — the numerator of
effective utilization (spec/benchmarks.md, B2), read by the benchmarks' replays (:mod:`scheduler.sim.metrics`)
and by the live ``/metrics`` gauge, so the two report one definition.

Per replica on the GPU model it runs on: a job asking for whole GPUs, those GPUs; a share, its milli / 1000 (a
trace's milli-GPU of 1000 or more, the whole GPUs it rounds up to); a MIG profile, its compute slices / 7; an
inference or batch job asking for memory or a model, the compute slices of the smallest MIG profile of that
model holding its memory, as a fraction of 7 — a 10 GiB service on a whole 80 GB GPU needs 1/7 of it; training,
or memory no profile holds, ``ceil(memory / GPU memory)`` whole GPUs. A GPU model outside the catalog, whose
memory is unknown, counts one GPU.
"""

from __future__ import annotations

import math

from scheduler.core.gpus.catalog import COMPUTE_SLICES, GPU_MODEL_BY_NAME
from scheduler.core.gpus.units import FULL_GPU_MILLI
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job
from scheduler.core.model.vocabulary import JobKind, ModelMode
from scheduler.core.sizing.layouts import fit
from scheduler.core.sizing.rightsize import memory_need_mib


def replica_need(job: Job, gpu_model: str, policy: Policy) -> float:
    """The true need of one replica of ``job`` on a GPU of ``gpu_model``, in GPUs (module doc)."""
    request = job.request
    spec = GPU_MODEL_BY_NAME.get(gpu_model)
    if request.gpus is not None:
        return float(request.gpus)
    if request.gpu_milli is not None:
        milli = request.gpu_milli
        return milli / FULL_GPU_MILLI if milli < FULL_GPU_MILLI else float(math.ceil(milli / FULL_GPU_MILLI))
    if request.mig_profile is not None:
        profile = spec.profiles().get(request.mig_profile) if spec else None
        return profile.compute_slices / COMPUTE_SLICES if profile else 1.0
    need_mib = memory_need_mib(request, policy)
    if spec is None or need_mib is None:
        return 1.0
    training = job.kind == JobKind.TRAINING or (
        request.model is not None and ModelMode(request.model.mode) == ModelMode.TRAINING
    )
    if not training:
        name = fit(gpu_model, need_mib)
        if name is not None:
            return spec.profiles()[name].compute_slices / COMPUTE_SLICES
    return float(max(1, math.ceil(need_mib / spec.memory_mib)))
