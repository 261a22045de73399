"""Right-sizing: what one replica of a job needs on one GPU model, as a :class:`Demand`.

A job states its request one way (``gpus``, ``mig_profile``, ``memory_gib``, ``model``, ``gpu_milli``);
placement only sees demands. The rules, per replica:

- ``gpus: n`` → ``n`` whole GPUs on any model (catalog or not).
- ``mig_profile: p`` → one ``p`` instance, only on a catalog model that has ``p`` and only when the policy
  allows MIG.
- ``gpu_milli: m`` → a share of ``m``/1000 of one GPU for 1 ≤ m ≤ 999 on any model (placement checks that the
  node time-slices its GPUs); ``m ≥ 1000`` → ``ceil(m / 1000)`` whole GPUs, as the Alibaba trace means it.
- ``memory_gib`` (taken as stated) or ``model`` (estimated by :mod:`scheduler.core.sizing.memory`, margin included)
  → on a MIG-capable catalog model, for inference and batch work whose model (if any) is in inference mode,
  the MIG profile with the fewest compute slices (then least memory) whose real memory holds it; otherwise,
  and when no profile holds it, the fewest whole GPUs whose summed memory holds it — ``ceil(need /
  GPU memory)``, which assumes the framework shards the model across them (tensor parallel for serving,
  ZeRO-3/FSDP for training). At most :data:`MAX_GPUS_PER_REPLICA` GPUs: one replica stays within one 8-GPU
  server. A model outside the catalog has no known memory, so memory requests cannot be sized on it.
- A job's ``gpu_model`` constraint (model or class) that the model does not match → None.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

from scheduler.core.gpus.catalog import GPU_MODEL_BY_NAME
from scheduler.core.gpus.units import FULL_GPU_MILLI
from scheduler.core.model.cluster_state import model_matches
from scheduler.core.model.demand import Demand
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Request
from scheduler.core.model.vocabulary import JobKind, ModelMode
from scheduler.core.sizing.layouts import fit
from scheduler.core.sizing.memory import estimate

MAX_GPUS_PER_REPLICA = 8  # one HGX/DGX server: a replica's GPUs share one NVSwitch domain


def resolve(job: Job, gpu_model: str, policy: Policy) -> Demand | None:
    """The per-replica demand of ``job`` on a GPU of ``gpu_model``, or None when that model cannot serve it.

    Pure and cached per (request, kind, constraint, model, policy); see the module docstring for the rules.
    """
    return _resolve(job.request, JobKind(job.kind), job.gpu_model, gpu_model, policy)


def memory_need_mib(request: Request, policy: Policy) -> int | None:
    """The memory one replica needs in MiB for a ``memory_gib`` or ``model`` request, else None."""
    if request.memory_gib is not None:
        return math.ceil(request.memory_gib * 1024)
    if request.model is not None:
        return estimate(request.model, policy.memory_safety_margin).total_mib
    return None


@lru_cache(maxsize=65536)  # a static fact of the request and the catalog, for the process
def _resolve(request: Request, kind: JobKind, constraint: str | None, gpu_model: str, policy: Policy) -> Demand | None:
    if not model_matches(gpu_model, constraint):
        return None
    if request.gpus is not None:
        return Demand.whole(request.gpus) if request.gpus > 0 else None
    if request.gpu_milli is not None:
        return _milli(request.gpu_milli)
    spec = GPU_MODEL_BY_NAME.get(gpu_model)
    if request.mig_profile is not None:
        usable = policy.mig and spec is not None and request.mig_profile in spec.profiles()
        return Demand.mig(request.mig_profile) if usable else None
    need_mib = memory_need_mib(request, policy)
    if spec is None or need_mib is None or need_mib <= 0:
        return None
    if policy.mig and spec.mig_capable and _wants_mig(request, kind):
        profile = fit(gpu_model, need_mib)
        if profile is not None:
            return Demand.mig(profile, memory_mib=need_mib)
    gpus = math.ceil(need_mib / spec.memory_mib)
    return Demand.whole(gpus, memory_mib=need_mib) if gpus <= MAX_GPUS_PER_REPLICA else None


def _milli(milli: int) -> Demand | None:
    if milli <= 0:
        return None
    if milli < FULL_GPU_MILLI:
        return Demand.share(milli)
    return Demand.whole(math.ceil(milli / FULL_GPU_MILLI))


def _wants_mig(request: Request, kind: JobKind) -> bool:
    """Serving and batch work fits slices; training (by kind or by the model's mode) takes whole GPUs."""
    if kind == JobKind.TRAINING:
        return False
    return request.model is None or ModelMode(request.model.mode) == ModelMode.INFERENCE


def unplaceable_reason(job: Job, gpu_models: Sequence[str], policy: Policy) -> str | None:
    """None if some model in ``gpu_models`` (the cluster's) could serve ``job``; else why not, in words a
    team lead can act on. It judges the request only, not free capacity or node sizes."""
    models = sorted(set(gpu_models))
    if not models:
        return "the cluster has no GPUs"
    matching = [m for m in models if model_matches(m, job.gpu_model)]
    if not matching:
        return f"asks for {job.gpu_model} GPUs; the cluster has {', '.join(models)}"
    if any(resolve(job, m, policy) is not None for m in matching):
        return None
    request = job.request
    if request.gpus is not None or request.gpu_milli is not None:
        return "requests no GPU: gpus and gpu_milli must be positive"
    if request.mig_profile is not None:
        return _mig_reason(request.mig_profile, matching, policy)
    return _memory_reason(job, matching, policy)


def _mig_reason(profile: str, models: list[str], policy: Policy) -> str:
    if not policy.mig:
        return f"asks for MIG profile {profile}, but MIG is disabled by the scheduling policy"
    mig_models = [m for m in models if m in GPU_MODEL_BY_NAME and GPU_MODEL_BY_NAME[m].mig_capable]
    if not mig_models:
        return f"asks for MIG profile {profile}, but no GPU in the cluster supports MIG ({', '.join(models)})"
    offers = "; ".join(f"{m}: {', '.join(GPU_MODEL_BY_NAME[m].profiles())}" for m in mig_models)
    return f"MIG profile {profile} exists on no GPU in the cluster ({offers})"


def _memory_reason(job: Job, models: list[str], policy: Policy) -> str:
    need_mib = memory_need_mib(job.request, policy)
    if need_mib is None or need_mib <= 0:
        return "requests no memory: memory_gib must be positive"
    known = [GPU_MODEL_BY_NAME[m] for m in models if m in GPU_MODEL_BY_NAME]
    need = f"needs {need_mib / 1024:.1f} GiB per replica"
    if job.request.model is not None:
        need += f" ({estimate(job.request.model, policy.memory_safety_margin).describe()})"
    if not known:
        return f"{need}, but the memory of the cluster's GPUs ({', '.join(models)}) is unknown; request gpus"
    largest = max(known, key=lambda spec: (spec.memory_mib, spec.name))
    return (
        f"{need}; the largest GPU in the cluster ({largest.name}) has {largest.memory_mib / 1024:.1f} GiB "
        f"and one replica spans at most {MAX_GPUS_PER_REPLICA} GPUs"
    )
