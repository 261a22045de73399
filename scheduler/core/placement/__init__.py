"""Placement: where a job's replicas go on free capacity, as the rules allow. A job's options (node group, demand) on
the tiers it may use (``options``) and the same order without capacity for the apps (``offers``); whole GPUs
(``whole``), MIG instances (``mig``) and milli-GPU shares (``shares``), fragmentation-aware against the observed mix
(``mix``, ``fragscore``); what one replica would hold (``holdings``); gangs bound all at once (``gang``), on the GPU
models one gang may span (``spans``), topology-aware (``topology``) on one fabric (``fabric``); larger instances and
idle whole GPUs for production (``fallback``); the per-cycle capacity index (``index``); ``find_slots``, the entry point
(``find``); and the MIG reconfigurations placement needs in a cycle (``reconfigurations``, ``drain``). Placement imports
the rules, sizing, the model and the GPU catalog: never the decisions, the speed-ups or the cycle."""

from scheduler.core.placement.find import find_slots, index_of
from scheduler.core.placement.index import CapacityIndex, IndexedClusterState
from scheduler.core.rules.tiers import allowed_tiers

__all__ = ["CapacityIndex", "IndexedClusterState", "allowed_tiers", "find_slots", "index_of"]
