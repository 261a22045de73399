"""``idle_while_pending``: the share of capacity left idle while pending work could have used it (spec B2).

The work-conservation gap. Definition, per cycle (a :class:`~scheduler.sim.records.CycleSample`: the cluster as
that cycle's plan left it), held until the next cycle:

1. **Idle capacity**: on every node that takes new work (ready, not being reconfigured), each GPU's free share
   (1 − what it holds: a MIG instance its compute slices / 7, a share its milli / 1000).
2. **Who could use it**: the pending jobs, in submission order, each placed *whole or not at all* on that idle
   capacity by first fit, **ignoring quotas**, priorities and MIG layouts (a MIG reconfiguration could make
   the share usable; its time is not counted). A replica that needs n ≥ 1 GPUs (its true need,
   :func:`scheduler.core.sizing.need.replica_need`, rounded up) takes n fully idle GPUs of one node; a replica
   that needs a fraction of a GPU takes the fullest GPU whose free share holds it (best fit). A job may use
   only nodes its ``gpu_model`` constraint matches, and a ``reserved-only`` job only reserved nodes.
3. **The gap** of the cycle: the true need the placed jobs would have run, in GPU-equivalents.

``idle_while_pending`` = Σ gap × (time to the next cycle, inside the window) / ∫ GPUs present dt over the
window. The same definition for every policy: it measures what any scheduler that only looked at free capacity
could still have started; 0 for a work-conserving one (at cycle granularity). A greedy first fit finds a lower
bound of what could be packed, so the gap is never overstated. :func:`cycle_matches` gives a cycle's gap job by
job, and :func:`held_s` how long each cycle holds (``scheduler.sim.causes.idle`` attributes the gap with both).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

from scheduler.core.model.cluster_state import model_matches
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Node
from scheduler.core.model.vocabulary import CapacityTier, JobTier
from scheduler.core.sizing.need import replica_need
from scheduler.sim.metrics import capacity_gpu_s
from scheduler.sim.records import CycleSample

EPSILON = 1e-9


def _may_use(job: Job, node: Node) -> bool:
    if job.tier == JobTier.RESERVED_ONLY and node.tier != CapacityTier.RESERVED:
        return False
    return model_matches(node.gpu_model, job.gpu_model)


@dataclass(frozen=True, slots=True)
class Match:
    """A pending job the first fit of step 2 took: the true need it places (GPU-equivalents) and where, as
    ``(node, GPU, share taken)``."""

    job: Job
    need: float
    places: tuple[tuple[str, int, float], ...]


def cycle_gap(sample: CycleSample, nodes: Mapping[str, Node], policy: Policy) -> float:
    """GPU-equivalents of pending true need that fit the sample's idle capacity (module definition, 1–3)."""
    gap = 0.0
    for match in cycle_matches(sample, nodes, policy):
        gap += match.need
    return gap


def cycle_matches(sample: CycleSample, nodes: Mapping[str, Node], policy: Policy) -> list[Match]:
    """The jobs the first fit of step 2 takes, in the order it takes them: the gap of the cycle job by job
    (:mod:`scheduler.sim.causes.idle` attributes it to them); their needs sum to :func:`cycle_gap`."""
    free = {name: list(shares) for name, shares in sample.free}
    if not any(share > EPSILON for shares in free.values() for share in shares):
        return []
    matches: list[Match] = []
    failed: set[Hashable] = set()  # free only shrinks within a cycle: a shape that did not fit never will
    for job in sample.pending:
        shape = (job.request, job.replicas, job.gpu_model, job.tier, job.kind)
        if shape in failed:
            continue
        taken: list[tuple[str, int, float]] = []
        need_total = 0.0
        for _ in range(job.replicas):
            placed = _place_replica(job, free, nodes, policy)
            if placed is None:
                break
            taken.extend(placed[0])
            need_total += placed[1]
        else:
            matches.append(Match(job, need_total, tuple(taken)))
            continue
        for name, gpu, share in taken:  # the job does not fit whole: give back what its replicas took
            free[name][gpu] += share
        failed.add(shape)
    return matches


def _place_replica(
    job: Job, free: dict[str, list[float]], nodes: Mapping[str, Node], policy: Policy
) -> tuple[list[tuple[str, int, float]], float] | None:
    """Take one replica's need from ``free``: ([(node, GPU, share taken)], need), or None when it fits nowhere."""
    best: tuple[float, str, int] | None = None
    for name, shares in free.items():
        node = nodes[name]
        if not _may_use(job, node):
            continue
        need = replica_need(job, node.gpu_model, policy)
        if need >= 1.0 - EPSILON:
            whole = math.ceil(need - EPSILON)
            idle = [gpu for gpu, share in enumerate(shares) if share >= 1.0 - EPSILON]
            if len(idle) >= whole:
                taken = [(name, gpu, shares[gpu]) for gpu in idle[:whole]]
                for _, gpu, _share in taken:
                    shares[gpu] = 0.0
                return taken, need
            continue
        for gpu, share in enumerate(shares):
            if share + EPSILON >= need and (best is None or share < best[0]):
                best = (share, name, gpu)
    if best is None:
        return None
    _, name, gpu = best
    need = replica_need(job, nodes[name].gpu_model, policy)
    free[name][gpu] -= need
    return [(name, gpu, need)], need


def held_s(samples: Sequence[CycleSample], window: tuple[float, float], cycle_s: float) -> list[float]:
    """How long each sample's state holds inside ``window``: to the next sample (the last one: one cycle)."""
    held = []
    for i, sample in enumerate(samples):
        until = samples[i + 1].t if i + 1 < len(samples) else sample.t + cycle_s
        held.append(max(0.0, min(until, window[1]) - max(sample.t, window[0])))
    return held


def idle_while_pending(
    samples: Sequence[CycleSample],
    nodes: Mapping[str, Node],
    policy: Policy,
    capacity: Sequence[tuple[float, int]],
    window: tuple[float, float],
) -> float:
    """The time-average gap over ``window`` as a share of the capacity present (module definition)."""
    total = capacity_gpu_s(capacity, window)
    if not total:
        return 0.0
    gap_s = 0.0
    for sample, held in zip(samples, held_s(samples, window, policy.cycle_s), strict=True):
        if held > 0:
            gap_s += cycle_gap(sample, nodes, policy) * held
    return round(gap_s / total, 6)
