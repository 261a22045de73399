"""Which changes a job's placement cannot see: a fast path for preemption searches.

A preemption search (:mod:`scheduler.core.decisions.preemption`) removes and puts back hundreds of running jobs and asks
:func:`~scheduler.core.placement.find.find_slots` again after each change. Most of those jobs hold capacity
that the pending job could never use, and then the answer cannot change. :func:`unseen_by` says so exactly:
``unseen(slots)`` is True when occupying or freeing ``slots`` changes nothing that ``find_slots(job)``
reads on an :class:`IndexedClusterState` — so its answer after the change is the answer before it.
The slots' own holder is named, so that the question can be asked before or after the change alike: what
that holder holds counts as free.

What ``find_slots(job)`` reads (see :mod:`~scheduler.core.placement.find`, :mod:`~scheduler.core.placement.whole`,
:mod:`~scheduler.core.placement.topology`, :mod:`~scheduler.core.placement.mig`,
:mod:`~scheduler.core.placement.shares`):
only the index entries of the ready nodes in the job's option groups (:mod:`~scheduler.core.placement.options`), and of
those only the holding its demand there asks for:

- a whole-GPU demand reads the node's free whole GPUs (any non-MIG slot of the group changes them);
- a share demand reads the free milli of time-sliced GPUs (a non-MIG slot on a node with ``sharing``);
- a MIG demand for profile ``p`` reads the GPUs with a free ``p`` instance, and their signatures (a MIG slot on a GPU
  that has a free ``p`` instance with the slot itself free); a demand right-sized from memory may also fall back to
  larger instances (:func:`~scheduler.core.placement.mig.best_instance`), so any MIG slot of the group counts;
- a job that states CPU or host memory also reads what each node of its groups that limits them has left
  (any slot there counts).

A slot on a node outside the job's option groups (another model or tier, or not ready) is unseen. The
failure memo of :func:`find_slots` is keyed on freed capacity and stays sound on its own.
"""

from __future__ import annotations

from collections.abc import Callable

from scheduler.core.model.cluster_state import ClusterState
from scheduler.core.model.demand import DemandKind
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Slots
from scheduler.core.placement.index import CapacityIndex, Group
from scheduler.core.placement.options import options_for

Unseen = Callable[[str, Slots], bool]
_ANY_PROFILE = ""  # a MIG demand that may also take larger instances reads every instance of the GPU


def unseen_by(state: ClusterState, index: CapacityIndex, job: Job, policy: Policy) -> Unseen:
    """A predicate ``unseen(holder, slots)`` on the slots of a job (one tuple per replica) being placed or
    removed: True when that change cannot alter what ``find_slots(state, job, policy)`` returns (module doc).
    ``index`` must be the state's live index; the predicate reads the state as it is when called, counting
    what ``holder`` holds as free."""
    reads: dict[Group, tuple[DemandKind, str]] = {}
    for option in options_for(index, job, policy):
        demand = option.demand
        profile = _ANY_PROFILE if demand.memory_mib is not None else demand.mig_profile or _ANY_PROFILE
        reads[option.group] = (demand.kind, profile)
    group_of = index.group_of
    nodes = state.nodes
    gpus = state.gpus
    cpu, memory = job.cpu_milli > 0, job.memory_mib > 0

    def unseen(holder: str, slots: Slots) -> bool:
        for replica in slots:
            for slot in replica:
                group = group_of.get(slot.node)
                read = reads.get(group) if group is not None else None
                if read is None:
                    continue  # not a node the job may use now
                node = nodes[slot.node]
                if (cpu and node.cpu_milli is not None) or (memory and node.memory_mib is not None):
                    return False
                kind, profile = read
                if slot.mig_profile is None:
                    if kind == DemandKind.WHOLE or (kind == DemandKind.SHARE and node.sharing):
                        return False
                elif kind == DemandKind.MIG:
                    if profile == _ANY_PROFILE:
                        return False
                    gpu = gpus[(slot.node, slot.gpu)]
                    busy = gpu.instances
                    if any(name == profile and busy.get(start, holder) == holder for name, start in gpu.layout):
                        return False
        return True

    return unseen
