"""Whole-GPU work, one replica: pack to keep whole nodes free.

Rules, for a replica of ``n`` whole GPUs (a replica is never split across nodes):

- Score = (tier rank, interconnect penalty, free whole GPUs on the node, model rank, node name order): the
  most preferred tier first; then a node whose GPUs talk well (penalty 0: one GPU; an NVSwitch node; an
  NVLink-pair server with a free bridged pair when n = 2; penalty 1: PCIe or split pairs); then **best fit**
  — the node with the fewest free GPUs that still holds the replica — so partly used nodes fill up and
  empty nodes stay empty for gangs.
- On an NVLink-pair server, a 1-GPU replica takes a GPU whose partner is busy (keeping bridged pairs
  whole), a 2-GPU replica takes a bridged pair, larger replicas take whole pairs first.
- Elsewhere the lowest free GPU indices are taken (deterministic).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from scheduler.core.model.snapshot import Job, Slot
from scheduler.core.model.vocabulary import Interconnect
from scheduler.core.placement.index import CapacityIndex
from scheduler.core.placement.options import KIND_RANK, Option

Score = tuple[int, ...]


def static_penalty(interconnect: str, gpus: int) -> int | None:
    """0/1 interconnect penalty for ``gpus`` GPUs on one node, or None when it depends on free pairs."""
    if gpus <= 1 or interconnect == Interconnect.NVSWITCH:
        return 0
    if interconnect == Interconnect.NVLINK_PAIRS and gpus == 2:
        return None
    return 1


def has_free_pair(free: Sequence[int]) -> bool:
    """Is some bridged pair (2i, 2i+1) entirely in the sorted ``free`` list?"""
    return any(a % 2 == 0 and b == a + 1 for a, b in pairwise(free))


def choose_gpus(interconnect: str, free: Sequence[int], gpus: int) -> list[int]:
    """Which of the sorted ``free`` GPU indices a replica of ``gpus`` GPUs takes (module rules)."""
    if interconnect != Interconnect.NVLINK_PAIRS:
        return list(free[:gpus])
    free_set = set(free)
    pairs = [i for i in free if i % 2 == 0 and i + 1 in free_set]
    in_pairs = {i for p in pairs for i in (p, p + 1)}
    singles = [i for i in free if i not in in_pairs]
    chosen: list[int] = []
    if gpus == 1 and singles:
        return [singles[0]]
    for p in pairs:
        if len(chosen) + 2 <= gpus:
            chosen += [p, p + 1]
    for i in singles + [i for i in free if i in in_pairs]:
        if len(chosen) >= gpus:
            break
        if i not in chosen:
            chosen.append(i)
    return sorted(chosen)


def best_node(
    index: CapacityIndex, job: Job, options: Sequence[Option], replicas: int = 1
) -> tuple[Score, int, Option] | None:
    """The best node to hold ``replicas`` replicas of the whole-GPU demand over ``options``: (score, node
    ordinal, option), or None. Score = (tier rank, kind, interconnect penalty, free GPUs, model rank, node)."""
    best: tuple[Score, int, Option] | None = None
    for option in options:
        total = option.demand.gpus * replicas
        group = option.group
        if index.group_free[group] < total:
            continue
        buckets = index.buckets[group]
        fixed = static_penalty(group[2], total)
        kind = KIND_RANK[option.demand.kind]
        found: Score | None = None
        for free_count in sorted(k for k in buckets if k >= total):
            for ordinal in buckets[free_count]:
                name = index.node_names[ordinal]
                if index.resource_cap(name, job) < replicas:
                    continue
                penalty = fixed if fixed is not None else int(not has_free_pair(index.free[name]))
                score = (option.tier_rank, kind, penalty, free_count, option.model_rank, ordinal)
                if found is None or score < found:
                    found = score
                if penalty == 0 or fixed is not None:
                    break  # scanning in (free count, name) order: nothing later in this group beats it
            else:
                continue
            break
        if found is not None and (best is None or found < best[0]):
            best = (found, found[-1], option)
    return best


def best_whole(index: CapacityIndex, job: Job, options: Sequence[Option]) -> tuple[Score, tuple[Slot, ...]] | None:
    """The best node for one replica over the whole-GPU ``options`` (module rules), or None."""
    best = best_node(index, job, options)
    if best is None:
        return None
    score, ordinal, option = best
    name = index.node_names[ordinal]
    chosen = choose_gpus(option.group[2], index.free[name], option.demand.gpus)
    return score, tuple(Slot(name, i) for i in chosen)
