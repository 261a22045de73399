"""Fractional work, one replica: a milli-GPU share of a time-sliced GPU (``node.sharing``, MIG off).

A share is counted at its size (milli × 7 units); a GPU never holds more than 1000 milli. Placement follows
FGD (Weng et al., ATC'23, from its description): for a GPU with ``f`` free milli, the fragmentation is the
free capacity that requests of the observed mix could not use,

    frag(f) = f · B(f),   B(f) = replicas in the mix whose share (a whole GPU counts as 1000) exceeds f,

and the replica goes where Δ = frag(f − m) − frag(f) is smallest: onto a GPU whose remainder is still
useful, or that it fills exactly; an idle GPU (frag 0, any request fits) is broken only when that costs
least. Ties: least free milli left (best fit), then model rank and GPU order. Score = (tier rank, kind, Δ,
milli left, model rank, GPU order).

For speed the search looks at the :data:`SCAN_LIMIT` smallest free values that fit (best-fit end) plus the
idle GPUs: the fragmentation of a full scan is rarely better and its cost grows with the number of distinct
free values.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

from scheduler.core.gpus.units import FULL_GPU_MILLI
from scheduler.core.model.snapshot import Job, Slot
from scheduler.core.placement.index import CapacityIndex
from scheduler.core.placement.mix import DemandMix
from scheduler.core.placement.options import KIND_RANK, Option

Score = tuple[int, ...]
SCAN_LIMIT = 64


def fragmentation(mix: DemandMix, model: str, free_milli: int) -> int:
    """frag(f) of the module doc."""
    return free_milli * mix.share_bigger_than(model, free_milli) if free_milli > 0 else 0


def best_share(
    index: CapacityIndex, job: Job, options: Sequence[Option], mix: DemandMix
) -> tuple[Score, tuple[Slot, ...]] | None:
    """The best time-sliced GPU for one replica over the share ``options`` (module rules), or None."""
    best: tuple[Score, int] | None = None
    host = job.cpu_milli or job.memory_mib  # without host needs every GPU's node can take it
    for option in options:
        milli = option.demand.milli
        keys = index.share_keys[option.group]
        if not keys or keys[-1] < milli:
            continue
        at = bisect_left(keys, milli)
        values = keys[at : at + SCAN_LIMIT]
        if keys[-1] == FULL_GPU_MILLI and values[-1] != FULL_GPU_MILLI:
            values.append(FULL_GPU_MILLI)
        by_free = index.shares[option.group]
        deltas = mix.share_deltas(option.model, milli)
        kind = KIND_RANK[option.demand.kind]
        for free in values:
            delta = deltas.get(free)
            if delta is None:
                delta = deltas[free] = fragmentation(mix, option.model, free - milli) - fragmentation(
                    mix, option.model, free
                )
            for ordinal in by_free[free]:
                if host and index.resource_cap(index.gpus[ordinal].node.name, job) < 1:
                    continue
                score = (option.tier_rank, kind, delta, free - milli, option.model_rank, ordinal)
                if best is None or score < best[0]:
                    best = (score, milli)
                break
    if best is None:
        return None
    best_score, milli = best
    gpu = index.gpus[best_score[-1]]
    return best_score, (Slot(gpu.node.name, gpu.index, milli=milli),)
