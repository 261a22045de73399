"""Which GPU models one whole-GPU gang may span.

The replicas of a gang run each data-parallel step together, so they must be alike: the same whole GPUs per
replica, each holding the same share of the model. Rules, for a gang whose every option is a whole-GPU
demand (:mod:`.find` sends only those to :mod:`~scheduler.core.placement.topology`):

1. **One model** is always allowed, and preferred: in each tier stage :mod:`~scheduler.core.placement.topology` searches
   every single-model pool first, with the score it always had, and spans models only when none holds the gang.
2. **Several models** only of one GPU class (:func:`scheduler.core.model.cluster_state.gpu_class_of`: the catalog's
   class — A100-40GB with A100-80GB, H100 SXM with PCIe and NVL — and, for a model outside the catalog, the
   model alone), and only models on which the job's right-sized demand (:func:`scheduler.core.sizing.rightsize.
   resolve`) is the same: the same whole GPUs per replica. For a ``memory_gib`` or ``model`` request that
   means its memory need fits the smallest model used with as many GPUs as on the largest (a 30 GiB replica
   takes one GPU on a 40 GB and on an 80 GB A100: they mix; a 60 GiB replica takes two on the 40 GB and one
   on the 80 GB: they do not). A ``gpus`` request states no memory: it already accepts any model it may run
   on alone, the smallest included, so its models mix whenever the class matches.
3. Never across classes: a gang steps at the pace of its slowest GPU, and classes differ several-fold in speed and in
   NVLink generation (``docs/gpu-facts.md``, Interconnect figures), so the faster GPUs would mostly wait; models of one
   class differ in memory and form, not in generation. A job pinned to a model (``gpu_model``) has options on that model
   only, so it never spans; a class pin allows that class's models.

MIG and share demand is placed replica by replica (:func:`.find.replica_by_replica`) and is not concerned.
Quota needs nothing new: a placement's units are counted per class (:func:`scheduler.core.rules.limits.
placement_units`), and a gang spanning models of one class holds units of that class only.
:func:`scheduler.core.placement.gang.cluster_capacity` counts the nodes of one pool together for the same reason.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from scheduler.core.model.cluster_state import gpu_class_of
from scheduler.core.model.demand import Demand
from scheduler.core.placement.options import Option


def span_key(model: str, demand: Demand) -> Hashable:
    """Replicas of one whole-GPU gang may share nodes of two models exactly when their keys are equal (rule 2):
    one class and one right-sized demand."""
    return (gpu_class_of(model), demand)


def class_pools(options: Sequence[Option]) -> list[tuple[Option, ...]]:
    """The options of each pool of two or more GPU models a gang may span (rules 2–3), each pool in the
    order of ``options``, the pools in the order of their first option. One model alone is no such pool."""
    pools: dict[Hashable, list[Option]] = {}
    for option in options:
        pools.setdefault(span_key(option.model, option.demand), []).append(option)
    return [tuple(pool) for pool in pools.values() if len({o.model for o in pool}) > 1]
