"""Placement: where a job's replicas go on free capacity, and the MIG reconfigurations placement needs.

- :mod:`.options` — the (node group, demand) options of a job, on the tiers :mod:`..rules.tiers` allows;
- :mod:`.whole` — whole-GPU replicas, best fit; whole-GPU gangs go where :mod:`..rules.topology` says, on the
  GPU models :mod:`.spans` lets one gang span;
- :mod:`.mig` — MIG instances and :mod:`.shares` — milli-GPU shares, fragmentation-aware (FGD-style,
  against the observed mix of :mod:`.mix`); :mod:`.holdings` — what one replica would hold, as admission
  counts it; :mod:`.fallback` — larger instances and idle whole GPUs for production;
- :mod:`.index` — the per-cycle capacity index and the :class:`IndexedClusterState` the cycle uses;
- :mod:`.find` — :func:`find_slots`, the entry point;
- :mod:`.reconfigurations` and :mod:`.drain` — the cycle's MIG reconfigurations (imported by the cycle, not
  here: they build on :mod:`scheduler.core.rules.reconfiguration`).
"""

from scheduler.core.placement.find import find_slots, index_of
from scheduler.core.placement.index import CapacityIndex, IndexedClusterState
from scheduler.core.rules.tiers import allowed_tiers

__all__ = ["CapacityIndex", "IndexedClusterState", "allowed_tiers", "find_slots", "index_of"]
