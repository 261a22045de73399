"""Spare MIG instances for production: a layout change takes minutes and closes its node meanwhile, while
production inference must start within a cycle — so the instance it will need should exist, and be kept for
it, before it arrives.

Rules:

1. **Which profiles.** Every (GPU model, MIG profile) of at most :data:`MAX_SPARE_SLICES` compute slices that
   running production work holds now: production services come and go in the shapes they already have, and
   a larger spare would idle capacity that the busiest clusters need for their big services (measured: spares
   of every size held instances the `serving` mix's services needed and kept their nodes from the changes its
   big production services wait for — docs/benchmarks/mixed.md).
2. **Held.** For each such pair, one free instance of that profile on a ready, schedulable node of that model
   off spot (production never runs on spot) — the first in node, GPU and start order — is held for production
   from the first turn of work that is not production: a placeholder occupies it (it counts against no team),
   no other work binds there, and its node takes no layout change this cycle. Production takes it like any
   free instance (the hold is lifted for production's turn, :mod:`scheduler.core.reservation`'s backfill
   rule); every production job has had its turn before the hold is placed, since production comes first in
   the order.
3. **Missing.** A pair with neither a free (or held) instance on such a node nor one on a node whose layout
   change is under way is missing its spare: the cycle asks re-partitioning (:func:`plan_repartition`,
   without the hysteresis: the demand is known, not a passing one) for one node's change of idle GPUs, with
   the node budget the waiting work left; whole-GPU demand that waits keeps its idle GPUs as
   re-partitioning's rule 3 says.
"""

from __future__ import annotations

from scheduler.core.capacity import ClusterState, Gpu
from scheduler.core.demand import Demand
from scheduler.core.placement.index import CapacityIndex
from scheduler.core.state import Job, Request, Slot
from scheduler.core.vocabulary import CapacityTier, JobKind, Priority

SPARE = "\x00spare"  # the stand-ins' and the placeholders' id prefix and team: no real job or team has it

Pair = tuple[str, str]  # (GPU model, MIG profile)


# Spares only for small services: a profile of at most this many compute slices. Larger production services
# want whole GPUs or most of one, and a spare of that size idles capacity the busiest clusters need most.
MAX_SPARE_SLICES = 3


def production_pairs(state: ClusterState) -> list[Pair]:
    """Rule 1: the (model, profile) pairs running production holds, sorted."""
    held: set[Pair] = set()
    for job_id, running in state.running.items():
        if running.job.priority != Priority.PRODUCTION or job_id not in state.placed:
            continue
        for replica in state.placed[job_id]:
            for slot in replica:
                if slot.mig_profile is None:
                    continue
                gpu = state.gpus[(slot.node, slot.gpu)]
                assert gpu.spec is not None  # a MIG instance exists only on a catalog model
                if gpu.spec.profiles()[slot.mig_profile].compute_slices <= MAX_SPARE_SLICES:
                    held.add((gpu.node.gpu_model, slot.mig_profile))
    return sorted(held)


def _for_production(state: ClusterState, gpu: Gpu) -> bool:
    node = state.nodes[gpu.node.name]
    return node.schedulable and node.tier != CapacityTier.SPOT


def spare_slots(state: ClusterState, index: CapacityIndex, pairs: list[Pair]) -> tuple[tuple[Slot, ...], ...]:
    """Rule 2: the one free instance held per pair (pairs without a free instance hold nothing)."""
    wanted = set(pairs)
    slots: list[tuple[Slot, ...]] = []
    for gpu in index.gpus:  # node, GPU order
        if not wanted or gpu.node.name not in index.group_of or not _for_production(state, gpu):
            continue
        for profile, start in sorted(gpu.layout, key=lambda entry: entry[1]):
            pair = (gpu.node.gpu_model, profile)
            if pair in wanted and start not in gpu.instances:
                wanted.discard(pair)
                slots.append((Slot(gpu.node.name, gpu.index, mig_profile=profile, mig_start=start),))
    return tuple(slots)


def holder(slots: tuple[tuple[Slot, ...], ...]) -> Job:
    """The placeholder that occupies the held instances."""
    return Job(id=f"{SPARE}:held", team=SPARE, request=Request(mig_profile="1g.10gb"), replicas=len(slots))


def missing_spares(state: ClusterState, index: CapacityIndex, now: float) -> list[tuple[Job, Demand]]:
    """Rule 3: stand-in production demand, one per pair missing its spare, sorted."""
    pairs = production_pairs(state)
    if not pairs:
        return []
    offered: set[Pair] = set()
    for gpu in state.gpus.values():
        node = state.nodes[gpu.node.name]
        changing = node.reconfiguring_until is not None and node.reconfiguring_until > now
        if not _for_production(state, gpu) or not (changing or node.name in index.group_of):
            continue
        for profile, start in gpu.layout:
            taker = gpu.instances.get(start)
            if taker is None or taker.startswith(SPARE):
                offered.add((node.gpu_model, profile))
    return [
        (
            Job(
                id=f"{SPARE}:{model}:{profile}",
                team=SPARE,
                request=Request(mig_profile=profile),
                kind=JobKind.INFERENCE,
                priority=Priority.PRODUCTION,
                gpu_model=model,
                submitted_at=now,
            ),
            Demand.mig(profile),
        )
        for model, profile in pairs
        if (model, profile) not in offered
    ]
