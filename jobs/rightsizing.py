"""The submit form's live suggestion: what one replica of a job would get on each GPU model of the fleet.

It runs the engine's own right-sizing (``scheduler.core.rightsize.resolve``) and memory-profile estimate on
the spec being typed, so the portal shows exactly what the scheduler will ask for: the MIG profile or GPU
count per replica, and the memory estimate behind it ("weights 13.0 GiB + KV cache 2.0 GiB + … = 17.6 GiB").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler.core import DemandKind, estimate, memory_need_mib, resolve, unplaceable_reason
from scheduler.core.catalog import GPU_MODEL_BY_NAME, GPU_MODELS, compute_fraction
from scheduler.loop.policy import policy_current
from scheduler.models import GpuModel
from scheduler.specs.fields import Errors
from scheduler.specs.job import parse_job

# The keys of a right-sizing question: what one replica asks for and where it may run (a job spec's request).
RIGHTSIZE_KEYS = ("kind", "gpus", "mig_profile", "memory_gib", "model", "replicas", "gpu_model")


@dataclass(frozen=True)
class Option:
    gpu_model: str
    gpu_class: str
    mig_profile: str | None  # one MIG instance per replica, or
    gpus: int  # whole GPUs per replica (0 with a MIG profile)
    gpu_equivalents: float  # per replica: 1 per GPU, compute slices / 7 per MIG instance

    @property
    def label(self) -> str:
        if self.mig_profile:
            return f"MIG {self.mig_profile}"
        return f"{self.gpus} whole GPU{'s' if self.gpus != 1 else ''}"


@dataclass(frozen=True)
class Suggestion:
    errors: dict[str, list[str]] = field(default_factory=dict)  # spec key path → reasons
    options: list[Option] = field(default_factory=list)  # smallest first
    memory_gib: float | None = None  # per replica, margin included, for memory and model requests
    memory_breakdown: str = ""  # the estimate's parts, for model requests
    reason: str = ""  # why no GPU model of the fleet can serve the request
    replicas: int = 1

    @property
    def best(self) -> Option | None:
        return self.options[0] if self.options else None


def fleet_gpu_models() -> list[str]:
    """The GPU models nodes are registered with; the whole catalog when the inventory is still empty."""
    names = sorted(set(GpuModel.objects.filter(nodes__isnull=False).values_list("name", flat=True)))
    return names or [spec.name for spec in GPU_MODELS]


def errors_by_key(messages: list[str], source: str) -> dict[str, list[str]]:
    """``["spec: model.params_b: must be positive"]`` → ``{"model.params_b": ["must be positive"]}``; a
    message about the spec as a whole goes under ``non_field_errors``."""
    result: dict[str, list[str]] = {}
    for message in messages:
        text = message.removeprefix(f"{source}: ") if message.startswith(f"{source}: ") else message
        key, sep, reason = text.partition(": ")
        if not sep or " " in key:
            key, reason = "non_field_errors", text
        result.setdefault(key, []).append(reason)
    return result


def suggest(spec: Mapping[str, Any], *, gpu_models: list[str] | None = None) -> Suggestion:
    """Right-size ``spec`` (job keys of spec/scenario.md) on every GPU model of the fleet.

    Returns the problems with the spec when it does not parse (keyed like :func:`errors_by_key`), else the
    options, smallest per replica first, or the reason none exists.
    """
    source = "spec"
    errors = Errors(source)
    data = {k: v for k, v in spec.items() if k not in ("name", "image", "command", "env", "project")}
    data.setdefault("id", "suggestion")
    data.setdefault("team", "suggestion")
    job = parse_job(errors, "", data, submitted_at=0.0)
    if errors.messages or job is None:
        return Suggestion(errors=errors_by_key(errors.messages, source))
    policy = policy_current()
    models = gpu_models if gpu_models is not None else fleet_gpu_models()
    options = []
    for name in models:
        demand = resolve(job, name, policy)
        if demand is None or demand.kind == DemandKind.SHARE:
            continue
        spec_row = GPU_MODEL_BY_NAME.get(name)
        gpu_class = spec_row.gpu_class if spec_row else name
        if demand.kind == DemandKind.MIG:
            profile = demand.mig_profile or ""
            options.append(Option(name, gpu_class, profile, 0, compute_fraction(name, profile)))
        else:
            options.append(Option(name, gpu_class, None, demand.gpus, float(demand.gpus)))
    options.sort(key=lambda o: (o.gpu_equivalents, o.gpu_model))
    need_mib = memory_need_mib(job.request, policy)
    breakdown = estimate(job.request.model, policy.memory_safety_margin).describe() if job.request.model else ""
    reason = "" if options else (unplaceable_reason(job, models, policy) or "no GPU model of the fleet fits it")
    return Suggestion(
        options=options,
        memory_gib=round(need_mib / 1024, 2) if need_mib is not None else None,
        memory_breakdown=breakdown,
        reason=reason,
        replicas=job.replicas,
    )
