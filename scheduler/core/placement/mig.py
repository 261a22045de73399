"""MIG work, one replica: pick a free instance of the profile, fragmentation-aware.

The layouts are fixed within a cycle (reconfiguration is planned separately), so a replica of profile ``p``
can only take a free ``p`` instance; the question is *which* GPU's. In the spirit of FGD (Weng et al.,
ATC'23: place where the expected fragmentation of the cluster grows least, the expectation taken over the
observed workload — written from the paper's description), a GPU's fragmentation is

    frag(GPU) = 0                                         if none of its instances is in use
              = Σ over its free instances i of  c(i) · (N + 1 − n(profile(i)))   otherwise

with ``c`` the instance's compute slices, ``n(q)`` the replicas of profile ``q`` in the observed mix of
that GPU model and ``N`` all of them: a free slice counts as fragmented in proportion to the share of the
workload that could *not* use it (the "+1" is one phantom request of another profile, so free slices are
never quite free of risk and an empty mix still prefers packing). An idle GPU is not fragmented: it can be
reconfigured to any layout. We take the candidate with the smallest increase

    Δ = frag(GPU after) − frag(GPU before),

which puts replicas on partly used GPUs first (Δ < 0) and breaks an idle GPU only when needed, choosing the
idle GPU whose leftover instances the workload wants most. Ties: fewest free compute slices left on the GPU
(best fit), then tier rank, model rank and GPU order; the instance taken is the free ``p`` with the lowest
start. Score = (tier rank, kind, extra compute, extra memory, Δ, free slices left, model rank, GPU order).

A demand right-sized from memory (``memory_gib`` or ``model``) whose profile has no free instance anywhere
may take a *larger* free instance that holds the memory — but only on a GPU already partly in use, whose
layout cannot change without evicting its occupants; an idle GPU is left for reconfiguration, which can
cut the right size. Fewest extra compute slices first, then least extra memory. An explicit ``mig_profile``
gets exactly that profile.

Speed: for a job without host needs the rest of the score is its option's, so the best GPU of a group and profile is
the least (Δ, free slices left, GPU ordinal) over the signatures' first GPUs; it is kept in the index's ``mig_best``
table until a GPU of that group and profile changes signature (the index counts every change in ``mig_refiled``;
both tables forget with the speed-ups off). Most placement questions between two binds of a MIG job read it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from scheduler.core.gpus.catalog import GPU_MODEL_BY_NAME
from scheduler.core.model.snapshot import Job, Slot
from scheduler.core.placement.index import CapacityIndex, MigSignature
from scheduler.core.placement.mix import DemandMix
from scheduler.core.placement.options import KIND_RANK, Option

Score = tuple[int, ...]


def fragmentation(mix: DemandMix, model: str, idle: bool, free: Sequence[str]) -> int:
    """frag(GPU) of the module doc, for a GPU of ``model`` with ``free`` instance profiles."""
    if idle:
        return 0
    profiles = GPU_MODEL_BY_NAME[model].profiles()
    total = 0
    for profile in free:
        wanted, all_replicas = mix.mig_weight(model, profile)
        total += profiles[profile].compute_slices * (all_replicas + 1 - wanted)
    return total


def take_delta(mix: DemandMix, model: str, signature: MigSignature, profile: str) -> tuple[int, int]:
    """(Δ fragmentation, free compute slices left) when one ``profile`` instance is taken from a GPU with
    ``signature``."""
    idle, free = signature
    left = list(free)
    left.remove(profile)
    delta = fragmentation(mix, model, False, left) - fragmentation(mix, model, idle, free)
    profiles = GPU_MODEL_BY_NAME[model].profiles()
    return delta, sum(profiles[name].compute_slices for name in left)


def best_instance(
    index: CapacityIndex,
    job: Job,
    options: Sequence[Option],
    mix: DemandMix,
    larger: Callable[[Option, str], bool] | None = None,
) -> tuple[Score, tuple[Slot, ...]] | None:
    """The best free MIG instance for one replica over the MIG ``options`` (module rules), or None.
    ``larger(option, profile)``, when given, names the larger instances a sized demand may take."""
    best: tuple[Score, str] | None = None
    for option in options:
        found = best_of(index, job, option, option.demand.mig_profile or "", mix, (0, 0), False)
        if found is not None and (best is None or found[0] < best[0]):
            best = found
    if best is None:
        best = _larger(index, job, options, mix, larger)
    if best is None:
        return None
    score, profile = best
    gpu = index.gpus[score[-1]]
    start = min(s for name, s in gpu.layout if name == profile and s not in gpu.instances)
    return score, (Slot(gpu.node.name, gpu.index, mig_profile=profile, mig_start=start),)


def best_of(
    index: CapacityIndex,
    job: Job,
    option: Option,
    profile: str,
    mix: DemandMix,
    oversize: tuple[int, int],
    partly_used_only: bool,
) -> tuple[Score, str] | None:
    host = job.cpu_milli or job.memory_mib  # without host needs every GPU's node can take it
    kind = KIND_RANK[option.demand.kind]
    if not host:
        # The rest of the score is the option's: the best is the least (Δ, left, ordinal), kept until the GPUs of
        # this group and profile change signature (the index counts each change; its tables forget with the
        # speed-ups off). The mix is the cycle's, fixed (as ``mig_deltas`` assumes).
        key = (option.group, profile)
        changes = index.mig_refiled.get(key, 0)
        kept = index.mig_best.get((key, partly_used_only))
        if kept is None or kept[0] != changes:
            kept = index.mig_best[(key, partly_used_only)] = (
                changes,
                _least(index, option, profile, mix, partly_used_only),
            )
        least = kept[1]
        if least is None:
            return None
        return (option.tier_rank, kind, *oversize, *least[:2], option.model_rank, least[2]), profile
    best: tuple[Score, str] | None = None
    for signature, ordinals in index.mig.get((option.group, profile), {}).items():
        if partly_used_only and signature[0]:
            continue
        delta, left = _delta(index, option, signature, profile, mix)
        for ordinal in ordinals:
            if index.resource_cap(index.gpus[ordinal].node.name, job) < 1:
                continue
            score = (option.tier_rank, kind, *oversize, delta, left, option.model_rank, ordinal)
            if best is None or score < best[0]:
                best = (score, profile)
            break
    return best


def _least(
    index: CapacityIndex, option: Option, profile: str, mix: DemandMix, partly_used_only: bool
) -> tuple[int, int, int] | None:
    """The least (Δ, free slices left, GPU ordinal) over the GPUs with a free ``profile`` instance in the option's
    group (each signature's first GPU: its GPUs are sorted), or None: the best GPU for a job without host needs."""
    least: tuple[int, int, int] | None = None
    for signature, ordinals in index.mig.get((option.group, profile), {}).items():
        if partly_used_only and signature[0]:
            continue
        found = (*_delta(index, option, signature, profile, mix), ordinals[0])
        if least is None or found < least:
            least = found
    return least


def _delta(
    index: CapacityIndex, option: Option, signature: MigSignature, profile: str, mix: DemandMix
) -> tuple[int, int]:
    key = (option.model, signature, profile)
    cached = index.mig_deltas.get(key)
    if cached is None:
        cached = index.mig_deltas[key] = take_delta(mix, option.model, signature, profile)
    return cached


def _larger(
    index: CapacityIndex,
    job: Job,
    options: Sequence[Option],
    mix: DemandMix,
    allowed: Callable[[Option, str], bool] | None = None,
) -> tuple[Score, str] | None:
    """A larger free instance for a memory-sized demand when no instance of its own profile is free: one
    that holds the memory, on a GPU already partly in use (an idle GPU is left for reconfiguration, which
    can cut the right size), the fewest extra compute slices and then the least extra memory first."""
    best: tuple[Score, str] | None = None
    for option in options:
        need = option.demand.memory_mib
        if need is None:
            continue  # an explicit mig_profile is exactly what was asked for
        profiles = GPU_MODEL_BY_NAME[option.model].profiles()
        own = profiles[option.demand.mig_profile or ""]
        for name, spec in profiles.items():
            if name == own.name or spec.media_engines or spec.memory_mib < need:
                continue
            if allowed is not None and not allowed(option, name):
                continue
            oversize = (spec.compute_slices - own.compute_slices, spec.memory_mib - own.memory_mib)
            found = best_of(index, job, option, name, mix, oversize, True)
            if found is not None and (best is None or found[0] < best[0]):
                best = found
    return best
