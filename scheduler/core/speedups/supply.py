"""The ETA replay's pools built from each GPU's time of being empty, worked out once per GPU, not once per shape.

The explanation's replay (:class:`~scheduler.core.model.explain.EtaEstimator`) builds a pool per (GPU models, shape)
from what every GPU of those models offers the shape over time (:func:`~scheduler.core.model.explain.supply`): at
1,000 nodes some 20 (model, shape) pairs, each a call of ``supply`` per GPU of the model — ~40,000 calls, about a
third of the explanation (docs/benchmarks/scale.md, 2026-12-06). Most GPUs are *plain*: MIG off, no shares, no
MIG instances, so held by one whole-GPU job or none. What ``supply`` gives such a GPU is one release of a whole
GPU's units, ``UNITS_PER_GPU``, at a time read from its *empty* time alone — ``max(ready_at, its holder's
expected end)``, the holder left out when the estimator skips it:

- whole GPUs (``WHOLE``): at ``empty`` (no layout to change);
- shares (``SHARE``): at ``empty`` — when its whole-GPU holder counts, ``supply`` gives ``empty``; when it has
  none (or a skipped one), it gives the node's ``ready_at`` less no shares, and ``empty`` is then ``ready_at``;
- a MIG profile: at ``empty`` when the profile takes every compute slice of the GPU's model (it runs on the GPU
  with MIG off), else once a reconfiguration is done, ``changed(empty)``.

So :class:`PooledSupply` works out each plain GPU's empty time once per GPU model, and a (model, shape)'s releases
are those times — as they are, or through ``changed``, worked out once per GPU model and spec for every profile
that needs a reconfiguration — followed by ``supply`` of every other GPU. The list holds the same (time, units)
pairs as the plain build, in another order, and a pool (:class:`~scheduler.core.model.explain._Profile`) sorts its
releases before it reads them: the same profile, the same ETAs. ``tests/scheduler/core/speedups/test_supply.py``
compares the releases and the estimates with the rule's; the cycle builds this estimator while the speed-ups are
on (:mod:`.switch`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from scheduler.core.gpus.catalog import COMPUTE_SLICES, GpuModelSpec
from scheduler.core.gpus.units import UNITS_PER_GPU
from scheduler.core.model.cluster_state import ClusterState, Gpu
from scheduler.core.model.explain import SHARE, WHOLE, EtaEstimator, supply
from scheduler.core.model.tables import FORGET, Tables

# Per GPU model spec (None: a model the catalog does not know), the empty times of the model's plain GPUs.
_Plain = dict[GpuModelSpec | None, list[float]]


class PooledSupply(EtaEstimator):
    """:class:`~scheduler.core.model.explain.EtaEstimator` whose pools read each plain GPU's empty time, worked out
    once per GPU (module doc)."""

    def __init__(
        self,
        state: ClusterState,
        now: float,
        ready_at: Mapping[str, float],
        expected_end: Callable[[str], float],
        skip: Callable[[str], bool],
        reconfigure_s: float,
        cycle_s: float,
        tables: Tables = FORGET,
    ) -> None:
        super().__init__(state, now, ready_at, expected_end, skip, reconfigure_s, cycle_s, tables)
        # Per GPU model, built once per estimator (that is once per cycle), like the base's own per-model build.
        self._splits: dict[str, tuple[_Plain, list[tuple[Gpu, dict[str, float]]]]] = {}
        self._changed_of: dict[tuple[str, GpuModelSpec | None], list[tuple[float, int]]] = {}

    def _releases(self, model: str, shape: str) -> list[tuple[float, int]]:
        key = (model, shape)
        releases = self._model_releases.get(key)
        if releases is not None:
            return releases
        plain, others = self._split(model)
        releases = []
        for spec, empties in plain.items():
            if shape in (WHOLE, SHARE) or _whole_gpu(spec, shape):
                releases += [(empty, UNITS_PER_GPU) for empty in empties]
            else:  # the same for every profile that needs a reconfiguration: worked out once per model and spec
                releases += self._changed_releases(model, spec, empties)
        ready_at = self.ready_at
        for gpu, holders in others:
            releases += supply(gpu, shape, ready_at[gpu.node.name], holders, self._changed)
        self._model_releases[key] = releases
        return releases

    def _changed_releases(self, model: str, spec: GpuModelSpec | None, empties: list[float]) -> list[tuple[float, int]]:
        """A whole GPU's units once each of ``empties`` is followed by a reconfiguration (``changed``)."""
        key = (model, spec)
        releases = self._changed_of.get(key)
        if releases is None:
            changed = self._changed
            releases = self._changed_of[key] = [(changed(empty), UNITS_PER_GPU) for empty in empties]
        return releases

    def _split(self, model: str) -> tuple[_Plain, list[tuple[Gpu, dict[str, float]]]]:
        """The empty times of ``model``'s plain GPUs per spec, and every other GPU with its holders' ends."""
        split = self._splits.get(model)
        if split is not None:
            return split
        plain: _Plain = {}
        others: list[tuple[Gpu, dict[str, float]]] = []
        ready_at, skip, ends, expected_end = self.ready_at, self.skip, self._ends, self.expected_end
        for gpu in self._by_model.get(model, ()):
            if gpu.layout or gpu.shares or gpu.instances:
                others.append((gpu, self._holders(gpu)))
                continue
            empty = ready_at[gpu.node.name]
            holder = gpu.whole
            if holder is not None and not skip(holder):
                end = ends.get(holder)
                if end is None:
                    end = ends[holder] = expected_end(holder)
                if end > empty:
                    empty = end
            plain.setdefault(gpu.spec, []).append(empty)
        split = self._splits[model] = (plain, others)
        return split


def _whole_gpu(spec: GpuModelSpec | None, shape: str) -> bool:
    """Does MIG profile ``shape`` take every compute slice of a GPU of ``spec`` (so it runs with MIG off)?"""
    profile = spec.profiles().get(shape) if spec is not None else None
    return profile is not None and profile.compute_slices == COMPUTE_SLICES
