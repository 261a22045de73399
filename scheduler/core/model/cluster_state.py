"""The cluster as one cycle sees it: who holds which GPU, MIG instance or share, changed tentatively.

:class:`ClusterState` is built from a :class:`~scheduler.core.model.snapshot.Snapshot` and then mutated by the
cycle: placing a gang, evicting victims, changing a layout. Every change is recorded in the open
:class:`Statement` (the KAI-Scheduler idea), so a gang that does not fit, or a preemption that would not make
room after all, is rolled back exactly. Nothing here decides anything; plugins ask and the cycle acts.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from scheduler.core.gpus.catalog import GPU_MODEL_BY_NAME, GpuModelSpec
from scheduler.core.gpus.units import FULL_GPU_MILLI, UNITS_PER_MILLI, UNITS_PER_SLICE
from scheduler.core.model.snapshot import Job, MigLayout, Node, Running, Slot, Snapshot
from scheduler.core.model.tables import FORGET, Tables


def gpu_class_of(gpu_model: str) -> str:
    """The class a quota is written for: the catalog's class, or the model itself for GPUs outside it."""
    spec = GPU_MODEL_BY_NAME.get(gpu_model)
    return spec.gpu_class if spec else gpu_model


def model_matches(gpu_model: str, constraint: str | None) -> bool:
    """A job's ``gpu_model`` constraint names a model or a class; None matches every GPU."""
    return constraint is None or constraint == gpu_model or constraint == gpu_class_of(gpu_model)


@dataclass(slots=True)
class Gpu:
    node: Node
    index: int
    spec: GpuModelSpec | None
    layout: MigLayout
    whole: str | None = None  # job holding the whole GPU (MIG off)
    instances: dict[int, str] = field(default_factory=dict)  # MIG start → job
    shares: dict[str, int] = field(default_factory=dict)  # job → milli-GPU (MIG off, shared GPU)
    gpu_class: str = ""  # the quota class of the node's model (gpu_class_of), set by ClusterState
    ordinal: int = -1  # position in the cycle's CapacityIndex, set by it

    def __init__(
        self,
        node: Node,
        index: int,
        spec: GpuModelSpec | None,
        layout: MigLayout,
        whole: str | None = None,
        instances: dict[int, str] | None = None,
        shares: dict[str, int] | None = None,
        gpu_class: str = "",
        ordinal: int = -1,
    ) -> None:
        self.node = node
        self.index = index
        self.spec = spec
        self.layout = layout
        self.whole = whole
        self.instances = {} if instances is None else instances
        self.shares = {} if shares is None else shares
        self.gpu_class = gpu_class
        self.ordinal = ordinal

    @property
    def key(self) -> tuple[str, int]:
        return (self.node.name, self.index)

    @property
    def mig_on(self) -> bool:
        return bool(self.layout)

    @property
    def idle(self) -> bool:
        return self.whole is None and not self.instances and not self.shares

    @property
    def milli_used(self) -> int:
        return sum(self.shares.values())

    def free_instances(self, profile: str) -> list[int]:
        return [start for name, start in self.layout if name == profile and start not in self.instances]

    def holders(self) -> set[str]:
        jobs = set(self.instances.values()) | set(self.shares)
        if self.whole is not None:
            jobs.add(self.whole)
        return jobs


_SlotOp = tuple[Gpu, int | None, int, str, int]  # (GPU, MIG start or None, milli, GPU class, units)


def slot_units(slot: Slot, spec: GpuModelSpec | None) -> int:
    """How much of a GPU a slot counts as, in 1/7000 GPU: whole 7000, MIG compute slices × 1000, share milli × 7."""
    if slot.mig_profile is not None:
        if spec is None:
            raise ValueError(f"MIG profile {slot.mig_profile} on a GPU outside the catalog")
        return spec.profiles()[slot.mig_profile].compute_slices * UNITS_PER_SLICE
    return min(slot.milli, FULL_GPU_MILLI) * UNITS_PER_MILLI


class Statement:
    """Undo log of tentative changes; :meth:`rollback` restores the state as it was at :meth:`ClusterState.begin`."""

    def __init__(self, state: ClusterState) -> None:
        self._state = state
        self._undo: list[Callable[[], object]] = []
        self.open = True

    def record(self, undo: Callable[[], object]) -> None:
        self._undo.append(undo)

    def commit(self) -> None:
        # A nested statement's changes become part of the enclosing one, so rolling that back still undoes them.
        statements = self._state._statements
        position = statements.index(self)
        if position > 0:
            statements[position - 1]._undo.extend(self._undo)
        self._close()

    def rollback(self) -> None:
        for undo in reversed(self._undo):
            undo()
        self._close()

    def _close(self) -> None:
        self._undo.clear()
        self.open = False
        self._state._statements.remove(self)


class ClusterState:
    """The cluster of ``snapshot``, changed tentatively (module doc). Its one cache, what occupying a job's slots
    does (:meth:`slot_ops`), is a table of ``tables``: the cycle's memo, handed in by the cycle; by default it
    forgets."""

    def __init__(self, snapshot: Snapshot, tables: Tables = FORGET) -> None:
        self.nodes: dict[str, Node] = {node.name: node for node in snapshot.nodes}
        self.gpus: dict[tuple[str, int], Gpu] = {}
        self._node_gpus: dict[str, tuple[Gpu, ...]] = {}  # per node, its GPUs in index order (asked very often)
        for node in snapshot.nodes:
            spec = GPU_MODEL_BY_NAME.get(node.gpu_model)
            gpu_class = gpu_class_of(node.gpu_model)
            gpus = tuple(
                Gpu(node=node, index=index, spec=spec, layout=node.layout(index), gpu_class=gpu_class)
                for index in range(node.gpu_count)
            )
            self._node_gpus[node.name] = gpus
            for gpu in gpus:
                self.gpus[gpu.key] = gpu
        self.running: dict[str, Running] = {}
        self.placed: dict[str, tuple[tuple[Slot, ...], ...]] = {}  # job → slots, running or bound this cycle
        self.jobs: dict[str, Job] = {}
        self.usage: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))  # team → class → units
        # The same for the team's non-preemptible jobs only: what non-preemptible admission counts (fair share).
        self.firm_usage: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        # Per team, its usage as a tuple of (class, units), built when asked and dropped when the usage changes: the
        # fair order and its speed-ups compare a team's usage with the one an answer was kept at, tens of thousands
        # of times a cycle, mostly while it stands still.
        self._usage_stamps: dict[str, tuple[tuple[str, int], ...]] = tables.table()
        # Snapshot-running jobs that are not placed now (evicted, maybe tentatively), by team: kept as jobs are
        # removed and put back, so that "which of a team's running jobs are still placed" costs no scan.
        self.running_gone: dict[str, set[str]] = defaultdict(set)
        # Nodes held this cycle — for a MIG reconfiguration of production's next cycle, or changed already by one
        # ready at once (dynamic MIG): nothing binds there, and no later reconfiguration question proposes them
        # (rule 3 of scheduler.core.rules.reconfiguration).
        self.held: set[str] = set()
        self._statements: list[Statement] = []
        self._ops: dict[str, tuple[tuple[tuple[Slot, ...], ...], tuple[_SlotOp, ...]]] = tables.table()
        for running in snapshot.running:
            self.running[running.job.id] = running
            # A job whose move is under way holds its old placement too until the move completes: nothing binds
            # there meanwhile, and evicting the job frees both.
            self._occupy(running.job, running.slots + running.moving_from if running.moving_from else running.slots)

    # -- tentative changes -------------------------------------------------------------------------------

    def begin(self) -> Statement:
        statement = Statement(self)
        self._statements.append(statement)
        return statement

    def _record(self, undo: Callable[[], object]) -> None:
        if self._statements:
            self._statements[-1].record(undo)

    def place(self, job: Job, slots: tuple[tuple[Slot, ...], ...]) -> None:
        """Give ``job`` these slots (one tuple per replica). Raises if any slot is not free."""
        for replica in slots:
            for slot in replica:
                if not self.slot_free(slot):
                    raise ValueError(f"{slot} is not free for job {job.id}")
        self._occupy(job, slots)
        self._record(lambda: self._vacate(job.id))

    def remove(self, job_id: str) -> tuple[tuple[Slot, ...], ...]:
        """Take every slot from ``job_id`` (an eviction or a completion) and return what it held."""
        job = self.jobs[job_id]
        slots = self._vacate(job_id)
        self._record(lambda: self._occupy(job, slots))
        return slots

    def move(self, job_id: str, slots: tuple[tuple[Slot, ...], ...]) -> None:
        """Start placed ``job_id`` again on ``slots`` while it keeps what it holds (a move, make-before-break): it
        holds both until the move completes. Raises if any new slot is not free."""
        for replica in slots:
            for slot in replica:
                if not self.slot_free(slot):
                    raise ValueError(f"{slot} is not free for job {job_id}")
        job = self.jobs[job_id]
        old = self._vacate(job_id)
        self._occupy(job, slots + old)

        def undo() -> None:
            self._vacate(job_id)
            self._occupy(job, old)

        self._record(undo)

    def set_layout(self, node: str, gpu: int, layout: MigLayout) -> None:
        """Change an idle GPU's MIG layout (the cycle has validated it)."""
        target = self.gpus[(node, gpu)]
        if not target.idle:
            raise ValueError(f"{node}/{gpu} is busy: every instance is destroyed on a reconfiguration")
        old = target.layout
        target.layout = layout
        self._record(lambda: setattr(target, "layout", old))

    # -- questions ---------------------------------------------------------------------------------------

    def slot_free(self, slot: Slot) -> bool:
        gpu = self.gpus.get((slot.node, slot.gpu))
        if gpu is None:
            return False
        if slot.mig_profile is not None:
            return (slot.mig_profile, slot.mig_start) in gpu.layout and slot.mig_start not in gpu.instances
        if gpu.mig_on or gpu.whole is not None:
            return False
        if slot.milli >= FULL_GPU_MILLI:
            return not gpu.shares
        return gpu.node.sharing and gpu.milli_used + slot.milli <= FULL_GPU_MILLI

    def node_gpus(self, node: str) -> tuple[Gpu, ...]:
        """The node's GPUs in index order."""
        return self._node_gpus[node]

    def team_units(self, team: str) -> dict[str, int]:
        """Units (1/7000 GPU) held by ``team`` per GPU class, and the overall total under ``"any"``."""
        by_class = {cls: units for cls, units in self.usage.get(team, {}).items() if units}
        by_class["any"] = sum(by_class.values())
        return by_class

    def usage_stamp(self, team: str) -> tuple[tuple[str, int], ...]:
        """``team``'s usage as (GPU class, units) pairs in the usage's order; the same tuple until it changes."""
        stamp = self._usage_stamps.get(team)
        if stamp is None:
            usage = self.usage.get(team)
            stamp = self._usage_stamps[team] = tuple(usage.items()) if usage else ()
        return stamp

    def job_units(self, job_id: str) -> dict[str, int]:
        """Units (1/7000 GPU) a placed job holds, per GPU class."""
        totals: dict[str, int] = defaultdict(int)
        for replica in self.placed.get(job_id, ()):
            for slot in replica:
                gpu = self.gpus[(slot.node, slot.gpu)]
                totals[gpu_class_of(gpu.node.gpu_model)] += slot_units(slot, gpu.spec)
        return dict(totals)

    # -- bookkeeping -------------------------------------------------------------------------------------

    def slot_ops(self, job_id: str, slots: tuple[tuple[Slot, ...], ...]) -> tuple[_SlotOp, ...]:
        """What occupying ``slots`` does, slot by slot: (GPU, MIG start or None, milli, GPU class, units).
        Remembered per job while its slots stay the same object: a preemption search removes and puts back
        the same running jobs hundreds of times a cycle."""
        cached = self._ops.get(job_id)
        if cached is not None and cached[0] is slots:
            return cached[1]
        ops = []
        for replica in slots:
            for slot in replica:
                gpu = self.gpus[(slot.node, slot.gpu)]
                units = slot_units(slot, gpu.spec)
                ops.append(
                    (gpu, slot.mig_start if slot.mig_profile is not None else None, slot.milli, gpu.gpu_class, units)
                )
        found = tuple(ops)
        self._ops[job_id] = (slots, found)
        return found

    def _occupy(self, job: Job, slots: tuple[tuple[Slot, ...], ...]) -> None:
        job_id = job.id
        self.jobs[job_id] = job
        self.placed[job_id] = slots
        if job_id in self.running:
            self.running_gone[job.team].discard(job_id)
        team_usage = self.usage[job.team]
        self._usage_stamps.pop(job.team, None)
        firm = None if job.preemptible else self.firm_usage[job.team]
        for gpu, start, milli, gpu_class, units in self.slot_ops(job_id, slots):
            if start is not None:
                gpu.instances[start] = job_id
            elif milli >= FULL_GPU_MILLI:
                gpu.whole = job_id
            else:
                gpu.shares[job_id] = gpu.shares.get(job_id, 0) + milli
            team_usage[gpu_class] += units
            if firm is not None:
                firm[gpu_class] += units

    def _vacate(self, job_id: str) -> tuple[tuple[Slot, ...], ...]:
        job = self.jobs[job_id]
        slots = self.placed.pop(job_id)
        if job_id in self.running:
            self.running_gone[job.team].add(job_id)
        team_usage = self.usage[job.team]
        self._usage_stamps.pop(job.team, None)
        firm = None if job.preemptible else self.firm_usage[job.team]
        for gpu, start, milli, gpu_class, units in self.slot_ops(job_id, slots):
            if firm is not None:
                firm[gpu_class] -= units
            if start is not None:
                gpu.instances.pop(start, None)
            elif milli >= FULL_GPU_MILLI:
                gpu.whole = None
            else:
                remaining = gpu.shares.get(job_id, 0) - milli
                if remaining > 0:
                    gpu.shares[job_id] = remaining
                else:
                    gpu.shares.pop(job_id, None)
            team_usage[gpu_class] -= units
        return slots
