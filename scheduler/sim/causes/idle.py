"""``idle_while_pending`` by cause: the gap's GPU-time, job by job, by blocker and by job class.

The metric (:mod:`scheduler.sim.idle_pending`) first-fits the pending queue into each cycle's idle capacity;
the true need the fit places, held until the next cycle, is the gap. Here each job the fit took
(:func:`~scheduler.sim.idle_pending.cycle_matches`, the metric's own code) carries its share: its need × the
time the cycle holds (:func:`~scheduler.sim.idle_pending.held_s`). So the shares sum to the metric's GPU-time,
and :attr:`IdleCauses.share` is the metric's figure again. Each share is labelled by

- the blocker kind the engine gave that job in that cycle (:meth:`~scheduler.sim.causes.log.CauseLog.kind`);
- its class: priority (production, high, normal, low), kind (inference, training, batch), and gang size in
  GPUs (:func:`gang_size`): ``1``, ``2-8``, ``>8``;
- where the fit put it (:func:`place_of`): on idle GPUs or on the free share of partly used ones, with MIG off
  or split into instances (the metric ignores layouts: a share left between instances counts as free), and on
  spot capacity or not. It tells a rule (the engine will not use an idle GPU it could) from fragmentation
  (free slices no instance offers) and from tiers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import Any

from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Node
from scheduler.core.model.vocabulary import CapacityTier
from scheduler.sim.causes.log import CauseLog
from scheduler.sim.idle_pending import EPSILON, Match, cycle_matches, held_s
from scheduler.sim.metrics import capacity_gpu_s
from scheduler.sim.records import CycleSample

GANG_SIZES = ("1", "2-8", ">8")
DIMENSIONS = ("blocker", "priority", "kind", "gang", "place")
CROSSES = ("blocker_class", "blocker_place")  # "blocker / priority kind", "blocker / place"
IDLE_OFF, IDLE_SPLIT, PARTLY_USED = "idle GPUs, MIG off", "idle GPUs, MIG-split", "partly used GPUs"


def gang_size(job: Job, need: float) -> str:
    """``1``, ``2-8`` or ``>8``: the GPUs the job asks for (a ``gpus`` request: per replica × replicas), or the
    true need the fit placed rounded up to whole GPUs (a service on slices counts as 1)."""
    asked = job.request.gpus
    gpus = asked * job.replicas if asked is not None else max(1, math.ceil(need - EPSILON))
    return GANG_SIZES[0] if gpus <= 1 else GANG_SIZES[1] if gpus <= 8 else GANG_SIZES[2]


def place_of(
    match: Match, free: Mapping[str, tuple[float, ...]], partitioned: Set[tuple[str, int]], nodes: Mapping[str, Node]
) -> str:
    """Where the fit put a job: ``partly used GPUs`` when some place is the free share of a GPU that holds
    work (always split into instances in B2: MIG is the only sharing), else ``idle GPUs, MIG-split`` when some
    idle GPU has a layout, else ``idle GPUs, MIG off``; then ``on spot``, ``partly on spot`` or ``off spot``."""
    places = match.places
    if any(free[node][gpu] < 1.0 - EPSILON for node, gpu, _ in places):
        state = PARTLY_USED
    elif any((node, gpu) in partitioned for node, gpu, _ in places):
        state = IDLE_SPLIT
    else:
        state = IDLE_OFF
    spot = [nodes[node].tier == CapacityTier.SPOT for node, _, _ in places]
    tier = "on spot" if all(spot) else "partly on spot" if any(spot) else "off spot"
    return f"{state}, {tier}"


def job_class(job: Job) -> str:
    """``"normal training"``: priority and kind, the class the cross table is keyed by."""
    return f"{job.priority} {job.kind}"


@dataclass
class IdleCauses:
    """One run's gap GPU-seconds (module doc), in total and per label of each dimension and cross."""

    gap_gpu_s: float = 0.0
    capacity_gpu_s: float = 0.0
    by: dict[str, dict[str, float]] = field(default_factory=lambda: {name: {} for name in DIMENSIONS + CROSSES})

    @property
    def share(self) -> float:
        """The gap as a share of capacity: the idle_while_pending figure, rounded as the metric rounds it."""
        return round(self.gap_gpu_s / self.capacity_gpu_s, 6) if self.capacity_gpu_s else 0.0

    def add(self, dimension: str, label: str, gpu_s: float) -> None:
        counts = self.by[dimension]
        counts[label] = counts.get(label, 0.0) + gpu_s

    def as_dict(self) -> dict[str, Any]:
        return {
            "idle_while_pending": self.share,
            "gap_gpu_s": round(self.gap_gpu_s, 3),
            "capacity_gpu_s": round(self.capacity_gpu_s, 3),
            **{f"by_{name}_gpu_s": {k: round(v, 3) for k, v in parts.items()} for name, parts in self.by.items()},
        }


def idle_causes(
    samples: Sequence[CycleSample],
    nodes: Mapping[str, Node],
    policy: Policy,
    capacity: Sequence[tuple[float, int]],
    window: tuple[float, float],
    log: CauseLog,
) -> IdleCauses:
    """The gap of ``samples`` over ``window`` attributed job by job (module doc); arguments as the metric's,
    plus the plans' record ``log``."""
    out = IdleCauses(capacity_gpu_s=capacity_gpu_s(capacity, window))
    if not out.capacity_gpu_s:
        return out
    gap_s = 0.0
    for sample, held in zip(samples, held_s(samples, window, policy.cycle_s), strict=True):
        if held <= 0:
            continue
        cycle = 0.0
        free = dict(sample.free)
        partitioned = log.partitioned.get(sample.t, frozenset())
        for match in cycle_matches(sample, nodes, policy):
            job, need = match.job, match.need
            cycle += need  # the metric's cycle_gap, summed in its order, so the total is its own figure
            gpu_s = need * held
            blocker = log.kind(sample.t, job.id)
            out.add("blocker", blocker, gpu_s)
            out.add("priority", str(job.priority), gpu_s)
            out.add("kind", str(job.kind), gpu_s)
            out.add("gang", gang_size(job, need), gpu_s)
            place = place_of(match, free, partitioned, nodes)
            out.add("place", place, gpu_s)
            out.add("blocker_class", f"{blocker} / {job_class(job)}", gpu_s)
            out.add("blocker_place", f"{blocker} / {place}", gpu_s)
        gap_s += cycle * held
    out.gap_gpu_s = gap_s
    return out
