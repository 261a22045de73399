"""What one replica of a job would hold on an option, as admission counts it: (GPU class, units).

Admission (:meth:`scheduler.core.rules.fairshare.FairShare.admit`) reads a placement as units per GPU class. One
replica holds its option's *holding* — its whole GPUs, its share of a time-sliced GPU, or one MIG instance (of
the option's own profile, or of a larger one that a demand sized from memory may take). These are the only
holdings a one-replica placement can have, so questions about admission can be asked of them without
placing anything.
"""

from __future__ import annotations

from typing import cast

from scheduler.core.gpus.catalog import GPU_MODEL_BY_NAME
from scheduler.core.gpus.units import FULL_GPU_MILLI, UNITS_PER_GPU
from scheduler.core.model.cluster_state import gpu_class_of
from scheduler.core.model.demand import DemandKind
from scheduler.core.model.policy import Policy
from scheduler.core.model.shape import placement_shape
from scheduler.core.model.snapshot import Job
from scheduler.core.placement.index import CapacityIndex
from scheduler.core.placement.options import Option, options_for, store_answer, stored_answer

Holding = tuple[str, int]  # (GPU class, units)


def holding(option: Option, profile: str | None = None) -> Holding:
    """(GPU class, units) of one replica on ``option``: its whole GPUs, its share, or a MIG instance of
    ``profile`` (by default the option's own)."""
    demand = option.demand
    gpu_class = gpu_class_of(option.model)
    if demand.kind == DemandKind.WHOLE:
        return (gpu_class, demand.gpus * UNITS_PER_GPU)
    if demand.kind == DemandKind.SHARE:
        return (gpu_class, min(demand.milli, FULL_GPU_MILLI) * (UNITS_PER_GPU // FULL_GPU_MILLI))
    name = profile or demand.mig_profile or ""
    return (gpu_class, GPU_MODEL_BY_NAME[option.model].profiles()[name].compute_slices * FULL_GPU_MILLI)


def possible_units(index: CapacityIndex, job: Job, policy: Policy) -> tuple[Holding, ...]:
    """Every (GPU class, units) one replica of ``job`` could hold on its options: what admission may be asked
    (a MIG demand sized from memory may also take any larger instance). Cached per job shape in the index."""
    key = ("possible_units", placement_shape(job))
    cached = stored_answer(index, key, policy)
    if cached is not None:
        return cast(tuple[Holding, ...], cached)
    found: set[Holding] = set()
    for option in options_for(index, job, policy):
        if option.demand.kind == DemandKind.MIG and option.demand.memory_mib is not None:
            found.update(holding(option, name) for name in GPU_MODEL_BY_NAME[option.model].profiles())
        else:
            found.add(holding(option))
    holdings = tuple(sorted(found))
    store_answer(index, key, policy, holdings)
    return holdings
