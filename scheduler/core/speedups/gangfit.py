"""Whether a whole-GPU gang's trial placement succeeds, told by counting free GPUs: the preemption search's pruning
without one topology search per victim put back.

A preemption search for a gang prunes its victims one at a time
(:func:`scheduler.core.decisions.preemption.find_victims`), and each put-back asks the trial
(:class:`~scheduler.core.speedups.trial.TrialPlacement`) again: a full topology search
(:func:`~scheduler.core.placement.topology.place_gang`) of every pool, stage and tier, though the pruning reads only
whether it succeeds. :func:`gang_fits` answers yes without that search when counting proves it, for a gang of whole
GPUs that states no CPU or host memory:

1. Every option of the job is a whole-GPU demand of one size on GPU models of one class: every placement
   ``find_slots`` could give holds the same units of that class, so :meth:`FairShare.admit` of those units at the
   team's usage now is the trial's admission, whichever placement it finds (``choose`` keeps a gang's first answer).
2. Some pool ``place_gang`` searches — one model's options, or a pool of models of one class
   (:func:`~scheduler.core.placement.spans.class_pools`) — holds the gang by :func:`replicas_held`, and its nodes are
   of one fabric and placement group with no node the fabric rule keeps whole (:mod:`~scheduler.core.placement.fabric`
   has no say) and host limits do not apply. Such a pool is among those ``place_gang`` tries, and when every tier
   stage before the last finds nothing, the last takes the pool whole, where the spread stage over its histogram
   holds ``replicas_held`` replicas: a placement is found.

Both hold: the trial accepts a placement. Anything else gets False, and the search runs the trial: an answer the
count cannot give is never guessed.
"""

from __future__ import annotations

from scheduler.core.gpus.units import UNITS_PER_GPU
from scheduler.core.model.cluster_state import gpu_class_of
from scheduler.core.model.demand import DemandKind
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job
from scheduler.core.placement import fabric
from scheduler.core.placement.index import CapacityIndex
from scheduler.core.placement.options import Option, options_for
from scheduler.core.placement.spans import class_pools
from scheduler.core.placement.topology import replicas_held
from scheduler.core.rules.fairshare import FairShare


def gang_fits(index: CapacityIndex, fairness: FairShare, job: Job, policy: Policy) -> bool:
    """True promises that the trial placement of ``job`` (``choose``: ``find_slots`` and the quota) accepts a
    placement on the index's free capacity now (module doc); False: counting cannot tell. ``index`` is flushed."""
    if job.replicas < 2 or job.cpu_milli or job.memory_mib:
        return False
    options = options_for(index, job, policy)
    if not options or any(o.demand.kind != DemandKind.WHOLE for o in options):
        return False
    gpus = options[0].demand.gpus
    classes = {gpu_class_of(o.model) for o in options}
    if len(classes) != 1 or any(o.demand.gpus != gpus for o in options):
        return False
    (gpu_class,) = classes
    if not fairness.admit(job, {gpu_class: gpus * job.replicas * UNITS_PER_GPU}).ok:
        return False
    by_model: dict[str, list[Option]] = {}
    for option in options:
        by_model.setdefault(option.model, []).append(option)
    pools: list[tuple[Option, ...]] = [tuple(pool) for pool in by_model.values()] + class_pools(options)
    return any(_holds(index, pool, job.replicas) for pool in pools)


def _holds(index: CapacityIndex, pool: tuple[Option, ...], replicas: int) -> bool:
    """Does ``place_gang`` surely find ``replicas`` replicas on ``pool``'s free GPUs (module doc, 2)?"""
    if replicas_held(index, pool) < replicas:
        return False
    return not (fabric.mixed(index, pool) or fabric.barred(index, pool))
