"""The observed request mix that fragmentation-aware placement scores against (FGD's "target workload").

Weng et al. (ATC'23, "Beware of Fragmentation") score a placement by how much it raises the *expected*
fragmentation of the cluster, where a node's fragmentation is the free capacity that a task drawn from the
workload could not use, weighted by how often such tasks occur. We observe the workload per GPU model as
counts of replicas — pending ones (the demand still to serve) plus running ones (the recent mix) — of:

- each MIG profile (for MIG GPUs), and
- each share size in milli-GPU, with a whole-GPU replica counted as a request of 1000 (for time-sliced GPUs).

Counts stay integers so equal scores compare equal (no float noise in tie-breaks).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable

from scheduler.core.gpus.units import FULL_GPU_MILLI
from scheduler.core.model.cluster_state import ClusterState
from scheduler.core.model.demand import DemandKind
from scheduler.core.model.isolation import Evaluating
from scheduler.core.model.policy import Policy
from scheduler.core.model.shape import placement_shape
from scheduler.core.model.snapshot import Job
from scheduler.core.model.tables import FORGET, Tables
from scheduler.core.placement.index import CapacityIndex
from scheduler.core.placement.options import options_for


class DemandMix:
    """Replica counts per GPU model: ``mig[model][profile]`` and ``share_sizes[model][milli]``; its caches are
    tables of ``tables`` (by default they forget)."""

    def __init__(self, tables: Tables = FORGET) -> None:
        self.mig: dict[str, dict[str, int]] = {}
        self.share_sizes: dict[str, dict[int, int]] = {}
        self._mig_totals: dict[str, int] = {}
        self._bigger: dict[str, tuple[list[int], list[int]]] = tables.table()
        self._share_deltas: dict[tuple[str, int], dict[int, int]] = tables.table()

    def add_mig(self, model: str, profile: str, count: int = 1) -> None:
        by_profile = self.mig.setdefault(model, {})
        by_profile[profile] = by_profile.get(profile, 0) + count
        self._mig_totals[model] = self._mig_totals.get(model, 0) + count

    def add_share(self, model: str, milli: int, count: int = 1) -> None:
        by_size = self.share_sizes.setdefault(model, {})
        size = min(milli, FULL_GPU_MILLI)
        by_size[size] = by_size.get(size, 0) + count
        self._bigger.pop(model, None)
        self._share_deltas.clear()

    def share_deltas(self, model: str, milli: int) -> dict[int, int]:
        """A memo the share placement fills: Δ fragmentation by free milli for a ``milli`` share on ``model``
        (:mod:`.shares`). It depends only on the mix, so any change to the mix empties it."""
        key = (model, milli)
        memo = self._share_deltas.get(key)
        if memo is None:
            memo = self._share_deltas[key] = {}
        return memo

    def mig_weight(self, model: str, profile: str) -> tuple[int, int]:
        """(replicas asking for ``profile``, all MIG replicas) on ``model``."""
        return self.mig.get(model, {}).get(profile, 0), self._mig_totals.get(model, 0)

    def share_bigger_than(self, model: str, free_milli: int) -> int:
        """Replicas in the mix whose share (or whole GPU) does not fit in ``free_milli``."""
        cached = self._bigger.get(model)
        if cached is None:
            sizes = sorted(self.share_sizes.get(model, {}).items())
            suffix: list[int] = [0] * (len(sizes) + 1)
            for i in range(len(sizes) - 1, -1, -1):
                suffix[i] = suffix[i + 1] + sizes[i][1]
            cached = ([size for size, _ in sizes], suffix)
            self._bigger[model] = cached
        keys, suffix = cached
        return suffix[bisect_right(keys, free_milli)]


def observe(state: ClusterState, index: CapacityIndex, pending: Iterable[Job], policy: Policy) -> DemandMix:
    """The mix of the running jobs in ``state`` and of ``pending`` (resolved on each GPU model they may use)."""
    mix = DemandMix(index.tables)
    # Counts only add up, so the order of the additions does not matter.
    for slots in state.placed.values():
        for replica in slots:
            gpu = state.gpus[(replica[0].node, replica[0].gpu)]
            model = gpu.node.gpu_model
            head = replica[0]
            if head.mig_profile is not None:
                mix.add_mig(model, head.mig_profile)
            elif len(replica) == 1:
                mix.add_share(model, head.milli)
            else:
                mix.add_share(model, FULL_GPU_MILLI)
    # Pending jobs of one shape resolve alike: resolve one of each and count the replicas of all of them.
    first: dict[tuple[object, ...], Job] = {}
    replicas: dict[tuple[object, ...], int] = {}
    for job in pending:
        shape = placement_shape(job)
        first.setdefault(shape, job)
        replicas[shape] = replicas.get(shape, 0) + job.replicas
    for shape, job in first.items():
        with Evaluating(job.id):  # isolation: a job whose demand cannot be worked out fails alone
            count = replicas[shape]
            seen: set[str] = set()
            for option in options_for(index, job, policy):
                if option.model in seen:
                    continue
                seen.add(option.model)
                demand = option.demand
                if demand.kind == DemandKind.MIG:
                    mix.add_mig(option.model, demand.mig_profile or "", count)
                elif demand.kind == DemandKind.SHARE:
                    mix.add_share(option.model, demand.milli, count)
                else:
                    mix.add_share(option.model, FULL_GPU_MILLI, count)
    return mix


def mix_of(index: CapacityIndex, policy: Policy) -> DemandMix:
    """The mix the cycle observed (``index.mix``), or the running jobs' alone when none was set."""
    if index.mix is None:
        index.mix = observe(index.state, index, (), policy)
    return index.mix
