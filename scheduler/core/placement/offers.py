"""Where a job may go on a fleet, in the order the engine tries it: one :class:`Offer` per (GPU model, capacity
tier) of the fleet that the job's constraints and tier routing allow, with what one replica would hold there.

This is placement's preference (:func:`scheduler.core.placement.options.options_for`) without capacity:
the job's most preferred tier first (:mod:`scheduler.core.rules.tiers`), then the kind of holding — a
right-sized MIG slice before a time-sliced share before whole GPUs, since the smaller holding wastes least —
then the smaller GPU model (by memory, then name: ties go to the cheaper part). The first offer is what the job
gets when that capacity is free; placement moves down the list only when it is not. The submit page, the
``rightsize`` API and the job page read it so that what they say is the order the engine follows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from scheduler.core.gpus.catalog import compute_fraction
from scheduler.core.gpus.units import FULL_GPU_MILLI
from scheduler.core.model.demand import Demand, DemandKind
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Node
from scheduler.core.model.vocabulary import CapacityTier
from scheduler.core.placement.options import KIND_RANK, model_order
from scheduler.core.rules.tiers import tier_rank
from scheduler.core.sizing.rightsize import resolve


@dataclass(frozen=True, slots=True)
class Offer:
    """One replica of the job as ``demand`` on a GPU of ``gpu_model`` bought in ``tier``."""

    gpu_model: str
    tier: CapacityTier
    demand: Demand

    @property
    def gpu_equivalents(self) -> float:
        """What one replica holds, in GPUs: whole GPUs, a MIG slice's compute slices / 7, or a share."""
        demand = self.demand
        if demand.kind == DemandKind.MIG:
            assert demand.mig_profile is not None  # a MIG demand names its profile
            return compute_fraction(self.gpu_model, demand.mig_profile)
        if demand.kind == DemandKind.SHARE:
            return demand.milli / FULL_GPU_MILLI
        return float(demand.gpus)


def offers(job: Job, nodes: Sequence[Node], policy: Policy) -> tuple[Offer, ...]:
    """Every (GPU model, tier) of ``nodes`` where ``job`` could run, most preferred first (module doc).

    Whether a node is ready or full does not matter here: this is the order, not the answer for now.
    """
    ranks = tier_rank(job)
    pairs = sorted({(node.gpu_model, node.tier) for node in nodes if node.gpu_count > 0 and node.tier in ranks})
    found = []
    for model, tier in pairs:
        demand = resolve(job, model, policy)
        if demand is not None:
            found.append(Offer(model, CapacityTier(tier), demand))
    found.sort(key=lambda o: (ranks[o.tier], KIND_RANK[o.demand.kind], model_order(o.gpu_model)))
    return tuple(found)
