"""Per-cycle indexes of free capacity, kept current as the cycle places, evicts and reconfigures.

Placement must not scan every GPU for every job (1,000 nodes × 8 GPUs × 10,000 pending jobs). The
:class:`CapacityIndex` keeps, for the nodes that can take new work now (schedulable, not reconfiguring):

- per node, the sorted indices of its free whole GPUs, and per *group* (GPU model, capacity tier,
  interconnect) buckets "nodes with exactly k free whole GPUs" as sorted lists of node ordinals — best fit is
  the first node of the smallest bucket ≥ the demand;
- per (group, MIG profile), the GPUs with a free instance of that profile, bucketed by the GPU's *signature*
  (is it idle, which instance profiles are free) — the fragmentation score depends only on the signature;
- per group, the time-sliced GPUs bucketed by free milli-GPU;
- per node, the CPU and host memory held (traces only).

Changes are filed lazily: a change marks its GPUs, and :meth:`CapacityIndex.flush` (called before every
placement question, see :func:`~scheduler.core.placement.find.index_of`) re-files them.

:class:`IndexedClusterState` is a :class:`ClusterState` that updates its index on every change, including
the undo of a rolled-back Statement (a committed inner Statement hands its undo log to the enclosing one, so
rolling back the outer Statement undoes everything). Two tokens let placement remember failures safely:
``freed`` changes whenever capacity the index offers is freed (or a Statement opens; a reconfiguration of a node out
of the index frees nothing it offers), ``version`` whenever anything changes;
a rollback restores both to their values at ``begin`` — the state is then exactly what it was, so what
failed then still fails.
"""

from __future__ import annotations

import itertools
from bisect import bisect_left, insort
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Protocol

from scheduler.core.gpus.units import FULL_GPU_MILLI
from scheduler.core.model.cluster_state import ClusterState, Gpu, Statement
from scheduler.core.model.snapshot import Job, Slots, Snapshot
from scheduler.core.model.tables import FORGET, Tables

if TYPE_CHECKING:
    from scheduler.core.placement.mix import DemandMix
    from scheduler.core.rules.reconfiguration import IdleKey

# (gpu_model, capacity tier, interconnect). The key of most of the index's tables: typed of any length so that the
# compiled engine keeps it the Python tuple it is, not a C struct boxed into a new tuple at each lookup.
Group = tuple[str, ...]
MigSignature = tuple[bool, tuple[str, ...]]  # (GPU idle, free instance profiles sorted)


class IdleTracker(Protocol):
    """Ready nodes kept filed by idle class (:func:`~scheduler.core.rules.reconfiguration.idle_key`) as the index
    changes: the speed-up :class:`scheduler.core.speedups.idle.IdleClasses` is one. The index tells it which
    ready nodes may have changed and which left; reconfiguration reads :attr:`classes` instead of scanning every
    node."""

    @property
    def classes(self) -> dict[IdleKey, list[int]]:
        """Idle class → sorted ordinals (into the index's ``node_names``) of its nodes, current."""
        ...

    def touch(self, name: str) -> None: ...

    def remove(self, name: str) -> None: ...


IdleFactory = Callable[[ClusterState, list[str]], IdleTracker]  # (state, node names in ordinal order) → tracker


def discard_sorted(values: list[int], value: int) -> None:
    """Remove ``value`` from the sorted list ``values`` if present (binary search, one memmove)."""
    at = bisect_left(values, value)
    if at < len(values) and values[at] == value:
        del values[at]


def node_ready(state: ClusterState, name: str, now: float | None) -> bool:
    """May new work bind on node ``name`` at ``now``? Schedulable and no MIG reconfiguration in flight.

    Without ``now`` a node with any ``reconfiguring_until`` counts as busy (the safe reading)."""
    node = state.nodes[name]
    until = node.reconfiguring_until
    return node.schedulable and (until is None or (now is not None and until <= now))


class CapacityIndex:
    """Free capacity of one :class:`ClusterState`, by node, group, MIG profile and free share (module doc).

    Its caches are tables of ``tables`` (the cycle's memo; by default they forget). ``idle``, when given, builds
    the :class:`IdleTracker` it keeps current for reconfiguration (:attr:`idle`); without one, reconfiguration
    scans the nodes."""

    def __init__(
        self, state: ClusterState, now: float | None, tables: Tables = FORGET, idle: IdleFactory | None = None
    ) -> None:
        self.state = state
        self.now = now
        self.tables = tables
        self.node_names: list[str] = sorted(state.nodes)
        self.node_ordinal: dict[str, int] = {name: i for i, name in enumerate(self.node_names)}
        self.gpus: list[Gpu] = [gpu for name in self.node_names for gpu in state.node_gpus(name)]
        self.gpu_ordinal: dict[tuple[str, int], int] = {gpu.key: i for i, gpu in enumerate(self.gpus)}
        for i, gpu in enumerate(self.gpus):
            gpu.ordinal = i
        self.group_of: dict[str, Group] = {}
        groups: dict[Group, list[str]] = {}
        for name in self.node_names:
            if node_ready(state, name, now):
                node = state.nodes[name]
                group: Group = (node.gpu_model, str(node.tier), str(node.interconnect))
                self.group_of[name] = group
                groups.setdefault(group, []).append(name)
        self.groups: dict[Group, list[str]] = dict(sorted(groups.items()))
        # Per group, the (fabric, placement group) pairs its nodes offer: one pair means a gang there cannot mix
        # fabrics or placement groups, and the topology rule alone decides (see placement/fabric.py).
        self.fabric_keys: dict[Group, frozenset[tuple[str, str]]] = {
            group: self._fabric_keys(names) for group, names in self.groups.items()
        }
        # Topology: a node's leaf is (spine, leaf); nodes without a leaf label belong to no shared leaf, and
        # to no shared spine unless they name one (see topology.py).
        self.node_leaf: dict[str, tuple[str, str] | None] = {}
        self.node_spine: dict[str, str | None] = {}
        self.leaf_members: dict[tuple[str, str], list[int]] = {}
        self.spine_leaves: dict[str, list[tuple[str, str]]] = {}  # leaves under a spine, in name order
        self.spine_loose: dict[str, list[int]] = {}  # nodes naming a spine but no leaf
        for name in self.group_of:
            node = state.nodes[name]
            spine = node.spine or ("" if node.leaf else None)
            leaf = (spine or "", node.leaf) if node.leaf else None
            self.node_leaf[name] = leaf
            self.node_spine[name] = spine
            if leaf is not None:
                self.leaf_members.setdefault(leaf, []).append(self.node_ordinal[name])
            if spine is not None:
                leaves = self.spine_leaves.setdefault(spine, [])
                loose = self.spine_loose.setdefault(spine, [])
                if leaf is None:
                    loose.append(self.node_ordinal[name])
                elif leaf not in leaves:
                    leaves.append(leaf)
        width = max((state.nodes[name].gpu_count for name in self.group_of), default=0) + 1
        self.hist_width = width
        # Per group and leaf / spine: how many nodes have exactly k free whole GPUs (index k).
        self.leaf_hist: dict[Group, dict[tuple[str, str], list[int]]] = {group: {} for group in self.groups}
        self.spine_hist: dict[Group, dict[str, list[int]]] = {group: {} for group in self.groups}
        # ... and their free whole GPUs in total (a cheap first filter).
        self.leaf_free: dict[Group, dict[tuple[str, str], int]] = {group: {} for group in self.groups}
        self.spine_free: dict[Group, dict[str, int]] = {group: {} for group in self.groups}
        for name, group in self.group_of.items():
            leaf, spine = self.node_leaf[name], self.node_spine[name]
            if leaf is not None:
                self.leaf_hist[group].setdefault(leaf, [0] * width)
                self.leaf_free[group].setdefault(leaf, 0)
            if spine is not None:
                self.spine_hist[group].setdefault(spine, [0] * width)
                self.spine_free[group].setdefault(spine, 0)
        self.free: dict[str, list[int]] = {name: [] for name in self.group_of}
        self.buckets: dict[Group, dict[int, list[int]]] = {group: {} for group in self.groups}
        self.group_free: dict[Group, int] = dict.fromkeys(self.groups, 0)
        self.mig: dict[tuple[Group, str], dict[MigSignature, list[int]]] = {}
        self.shares: dict[Group, dict[int, list[int]]] = {group: {} for group in self.groups}
        self.share_keys: dict[Group, list[int]] = {group: [] for group in self.groups}
        self._whole_free = [False] * len(self.gpus)
        self._mig_keys: list[tuple[tuple[tuple[Group, str], MigSignature], ...]] = [()] * len(self.gpus)
        self._share_key: list[int | None] = [None] * len(self.gpus)
        self.cpu_used: dict[str, int] = dict.fromkeys(self.node_names, 0)
        self.mem_used: dict[str, int] = dict.fromkeys(self.node_names, 0)
        self._tokens = itertools.count(1)
        self.freed = 0
        self.version = 0
        # Counts jobs placed on or taken off GPUs of nodes out of the index (changing, cordoned, retired); never
        # restored by a rollback. What is remembered about such nodes' free capacity (the instances changes under
        # way offer, :mod:`.reconfigurations`) holds while it stays put, whatever is freed on ready nodes.
        self.outside = 0
        self._dirty: set[int] = set()  # GPU ordinals changed since the last flush
        # The demand mix placement scores fragmentation against (:mod:`.mix`): the cycle's observation, or,
        # when none was given, the running jobs' alone (worked out at the first question).
        self.mix: DemandMix | None = None
        # Caches owned by placement (keyed by job shape), valid for this index's lifetime (:mod:`..speedups`).
        self.failed: dict[Hashable, int] = tables.table()  # shape → ``freed`` when it found nothing
        self.found: dict[Hashable, tuple[int, object, Slots]] = (
            tables.table()
        )  # shape → (``version``, policy, placement)
        # (question, …) → (policy, answer): see options.stored_answer; (model, signature, profile) → take_delta.
        self.answers: dict[Hashable, tuple[object, object]] = tables.table()
        self.mig_deltas: dict[Hashable, tuple[int, int]] = tables.table()
        # (group, profile) → how often its GPUs were refiled by signature (only ever counted up); (group, profile,
        # partly used only) → (that count, the best (Δ, free slices left, GPU ordinal) of a job without host needs)
        # (:func:`~.mig.best_of`).
        self.mig_refiled: dict[Hashable, int] = tables.table()
        self.mig_best: dict[Hashable, tuple[int, tuple[int, int, int] | None]] = tables.table()
        # (gang stage, its groups, GPUs per replica, replicas) → ``freed`` when the stage found nothing
        # (:mod:`.topology`, Speed).
        self.stages_failed: dict[Hashable, int] = tables.table()
        for gpu in self.gpus:
            self.refresh(gpu)
        self.idle: IdleTracker | None = None if idle is None else idle(state, self.node_names)
        if self.idle is not None:
            for name in self.group_of:
                self.idle.touch(name)
        for job_id, slots in sorted(state.placed.items()):
            self._resources(state.jobs[job_id], slots, +1)

    def _fabric_keys(self, names: list[str]) -> frozenset[tuple[str, str]]:
        nodes = self.state.nodes
        return frozenset((str(nodes[name].fabric), nodes[name].placement_group) for name in names)

    # -- questions ---------------------------------------------------------------------------------------

    def resource_cap(self, node_name: str, job: Job) -> int:
        """How many replicas of ``job`` the node's free CPU and host memory could still hold (traces only);
        a large number when neither the node nor the job states them."""
        node = self.state.nodes[node_name]
        cap = 1 << 30
        if job.cpu_milli > 0 and node.cpu_milli is not None:
            cap = min(cap, max(0, node.cpu_milli - self.cpu_used[node_name]) // job.cpu_milli)
        if job.memory_mib > 0 and node.memory_mib is not None:
            cap = min(cap, max(0, node.memory_mib - self.mem_used[node_name]) // job.memory_mib)
        return cap

    # -- keeping current ---------------------------------------------------------------------------------

    def occupied(self, job: Job, slots: Slots) -> None:
        self.version = next(self._tokens)
        self._touch(job, slots)
        self._resources(job, slots, +1)

    def vacated(self, job: Job, slots: Slots) -> None:
        self.freed = self.version = next(self._tokens)
        self._touch(job, slots)
        self._resources(job, slots, -1)

    def reconfigured(self, gpu: Gpu) -> None:
        if gpu.node.name in self.group_of:
            self.freed = self.version = next(self._tokens)
        else:
            # A node out of the index (retired, not ready) offers nothing to placement whatever its layout: what
            # failed still fails. Reconfigurations retire a node before changing it for this reason, so that a
            # change does not make every remembered failure of the cycle look stale.
            self.version = next(self._tokens)
        self._dirty.add(gpu.ordinal)

    def flush(self) -> None:
        """Re-file the GPUs changed since the last question (lazily: a preemption search removes and puts
        back hundreds of jobs between two placement questions)."""
        if self._dirty:
            gpus = self.gpus
            names: dict[str, None] = {}
            for ordinal in sorted(self._dirty):
                gpu = gpus[ordinal]
                self.refresh(gpu)
                names[gpu.node.name] = None
            self._dirty.clear()
            if self.idle is not None:
                for name in names:
                    if name in self.group_of:
                        self.idle.touch(name)

    def opened(self) -> tuple[int, int]:
        """A Statement opens: start a new lineage of tokens; return the old ones for a rollback."""
        saved = (self.freed, self.version)
        self.freed = self.version = next(self._tokens)
        return saved

    def restore(self, saved: tuple[int, int]) -> None:
        self.freed, self.version = saved

    def _touch(self, job: Job, slots: Slots) -> None:
        dirty = self._dirty
        group_of = self.group_of
        for op in self.state.slot_ops(job.id, slots):
            gpu = op[0]
            dirty.add(gpu.ordinal)
            if gpu.node.name not in group_of:
                self.outside += 1

    def _resources(self, job: Job, slots: Slots, sign: int) -> None:
        if not (job.cpu_milli or job.memory_mib):
            return
        for replica in slots:
            if replica:
                self.cpu_used[replica[0].node] += sign * job.cpu_milli
                self.mem_used[replica[0].node] += sign * job.memory_mib

    def refresh(self, gpu: Gpu) -> None:
        """Re-file one GPU after any change to its holders or layout."""
        name = gpu.node.name
        group = self.group_of.get(name)
        if group is None:
            return
        whole_free = not gpu.layout and gpu.whole is None and not gpu.shares
        mig_keys: tuple[tuple[tuple[Group, str], MigSignature], ...] = ()
        if gpu.layout:
            free = tuple(sorted(profile for profile, start in gpu.layout if start not in gpu.instances))
            signature = (not gpu.instances, free)
            mig_keys = tuple(((group, profile), signature) for profile in dict.fromkeys(free))
        share: int | None = None
        if gpu.node.sharing and not gpu.layout and gpu.whole is None:
            share = FULL_GPU_MILLI - gpu.milli_used
            share = share if share > 0 else None
        self._file(gpu, group, whole_free, mig_keys, share)

    def retire(self, name: str) -> None:
        """Take node ``name`` out of the index for the rest of the cycle: nothing new binds there (a layout
        change is under way)."""
        self.flush()
        group = self.group_of.get(name)
        if group is None:
            return
        for gpu in self.state.node_gpus(name):
            self._file(gpu, group, False, (), None)
        del self.group_of[name]
        self.groups[group].remove(name)
        self.fabric_keys[group] = self._fabric_keys(self.groups[group])
        if self.idle is not None:
            self.idle.remove(name)
        self.version = next(self._tokens)

    def _file(
        self,
        gpu: Gpu,
        group: Group,
        whole_free: bool,
        mig_keys: tuple[tuple[tuple[Group, str], MigSignature], ...],
        share: int | None,
    ) -> None:
        ordinal = gpu.ordinal
        if whole_free != self._whole_free[ordinal]:
            self._whole_free[ordinal] = whole_free
            self._file_whole(gpu.node.name, group, gpu.index, whole_free)
        if mig_keys != self._mig_keys[ordinal]:
            changes = self.mig_refiled
            for key, signature in self._mig_keys[ordinal]:
                by_signature = self.mig[key]
                discard_sorted(by_signature[signature], ordinal)
                if not by_signature[signature]:
                    del by_signature[signature]
                changes[key] = changes.get(key, 0) + 1
            for key, signature in mig_keys:
                insort(self.mig.setdefault(key, {}).setdefault(signature, []), ordinal)
                changes[key] = changes.get(key, 0) + 1
            self._mig_keys[ordinal] = mig_keys
        old = self._share_key[ordinal]
        if share != old:
            by_free = self.shares[group]
            if old is not None:
                discard_sorted(by_free[old], ordinal)
                if not by_free[old]:
                    del by_free[old]
                    discard_sorted(self.share_keys[group], old)
            if share is not None:
                if share not in by_free:
                    by_free[share] = []
                    insort(self.share_keys[group], share)
                insort(by_free[share], ordinal)
            self._share_key[ordinal] = share

    def _file_whole(self, name: str, group: Group, index: int, free: bool) -> None:
        free_gpus = self.free[name]
        before = len(free_gpus)
        if free:
            insort(free_gpus, index)
        else:
            discard_sorted(free_gpus, index)
        after = len(free_gpus)
        buckets = self.buckets[group]
        ordinal = self.node_ordinal[name]
        if before:
            discard_sorted(buckets[before], ordinal)
            if not buckets[before]:
                del buckets[before]
        if after:
            insort(buckets.setdefault(after, []), ordinal)
        self.group_free[group] += after - before
        leaf, spine = self.node_leaf[name], self.node_spine[name]
        if leaf is not None:
            _shift(self.leaf_hist[group][leaf], before, after)
            self.leaf_free[group][leaf] += after - before
        if spine is not None:
            _shift(self.spine_hist[group][spine], before, after)
            self.spine_free[group][spine] += after - before


def _shift(hist: list[int], before: int, after: int) -> None:
    """Move one node from the ``before`` to the ``after`` free-GPU count; index 0 is not kept."""
    if before:
        hist[before] -= 1
    if after:
        hist[after] += 1


class _NestingStatement(Statement):
    """A Statement that also restores the index tokens on rollback (see the module doc)."""

    def __init__(self, state: IndexedClusterState, saved: tuple[int, int]) -> None:
        super().__init__(state)
        assert state.index is not None
        self._index = state.index
        self._saved = saved

    def rollback(self) -> None:
        super().rollback()
        self._index.restore(self._saved)


class IndexedClusterState(ClusterState):
    """A :class:`ClusterState` with a live :class:`CapacityIndex` (``index``) for the cycle at ``now``; ``tables``
    are the state's and the index's, ``idle`` the index's (:class:`CapacityIndex`)."""

    index: CapacityIndex | None = None

    def __init__(
        self, snapshot: Snapshot, now: float, tables: Tables = FORGET, idle: IdleFactory | None = None
    ) -> None:
        super().__init__(snapshot, tables)
        self.now = now
        self.index = CapacityIndex(self, now, tables, idle)

    def begin(self) -> Statement:
        assert self.index is not None
        statement = _NestingStatement(self, self.index.opened())
        self._statements.append(statement)
        return statement

    def set_layout(self, node: str, gpu: int, layout: tuple[tuple[str, int], ...]) -> None:
        target = self.gpus[(node, gpu)]
        if not target.idle:
            raise ValueError(f"{node}/{gpu} is busy: every instance is destroyed on a reconfiguration")
        old = target.layout
        target.layout = layout
        index = self.index
        assert index is not None
        index.reconfigured(target)

        def undo() -> None:
            target.layout = old
            index.reconfigured(target)

        self._record(undo)

    def _occupy(self, job: Job, slots: Slots) -> None:
        super()._occupy(job, slots)
        if self.index is not None:  # None only while the base constructor loads the running jobs
            self.index.occupied(job, slots)

    def _vacate(self, job_id: str) -> Slots:
        job = self.jobs[job_id]
        slots = super()._vacate(job_id)
        assert self.index is not None  # nothing is vacated before __init__ has built the index
        self.index.vacated(job, slots)
        return slots
