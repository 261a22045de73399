"""What the baseline planners share: the FIFO queue, a replica's need in whole GPUs (or a share), which nodes
a job may use, the free capacity of one cycle, and the plan built around a per-job placement rule.

Rules every baseline follows (spec/benchmarks.md, "Policies every benchmark runs"):

- **No MIG.** A baseline never reconfigures MIG, and a GPU with a MIG layout is not free for it. A request
  stated as a MIG profile, as memory or as a model takes whole GPUs: ``ceil(memory / GPU memory)`` of the
  node's model (a MIG profile: 1), at least 1 — what a user of plain ``nvidia.com/gpu`` must ask for.
- **FIFO.** Pending jobs are taken in submission order (then the snapshot's order); a job that does not fit
  is skipped, not waited for (kube-scheduler's queue has no head-of-line blocking). ``naive`` and
  ``k8s-default`` sort by priority first, as kube-scheduler's ``PrioritySort`` does with PriorityClasses.
- **No quotas.** Teams are ignored. ``binpack`` and ``fgd`` ignore priorities and never preempt; ``naive`` and
  ``k8s-default`` preempt lower-priority jobs as stock kube-scheduler does
  (:mod:`scheduler.sim.baselines.preempt`, which says where its model flatters them).
- **nodeSelectors are honoured**: a job's ``gpu_model`` constraint (model or class) and ``reserved-only``
  tier. Cordoned, draining and reconfiguring nodes take nothing new.
- **Replicas bind together.** The replay starts a job only with all its replicas, so every baseline binds
  a gang whole or not at all. For ``naive`` and ``k8s-default`` (no gang scheduling in kube-scheduler) the
  replicas are still *placed* one by one, each by the policy's own rule; the partial-gang deadlocks a real
  cluster without gang scheduling suffers are not modelled, which flatters those baselines.
- A job that can never run — no node it may use holds one replica, or the gang needs more replicas than the
  whole cluster holds — is rejected with the reason.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from scheduler.core.gpus.catalog import GPU_MODEL_BY_NAME
from scheduler.core.gpus.units import FULL_GPU_MILLI
from scheduler.core.model.cluster_state import ClusterState, model_matches
from scheduler.core.model.plan import Bind, Evict, Plan, Reject, Waiting
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Node, Slot, Slots, Snapshot
from scheduler.core.model.vocabulary import CapacityTier, EvictionReason, JobTier
from scheduler.core.sizing.rightsize import memory_need_mib


@dataclass(frozen=True, slots=True)
class Need:
    """One replica's need on one node: ``gpus`` whole GPUs, or (``gpus`` 0) a share of ``milli``/1000 of one."""

    gpus: int = 0
    milli: int = 0

    @property
    def is_share(self) -> bool:
        return self.gpus == 0


def replica_need(job: Job, node: Node, policy: Policy, *, shares: bool = False) -> Need | None:
    """What one replica of ``job`` takes on ``node`` (module rules), or None when the node cannot serve it.

    ``shares``: a sub-GPU request (``gpu_milli`` < 1000, or a memory/model request smaller than one GPU) takes
    a share of one GPU on a node that time-slices (``node.sharing``); only ``fgd`` sets it.
    """
    if not model_matches(node.gpu_model, job.gpu_model):
        return None
    request = job.request
    spec = GPU_MODEL_BY_NAME.get(node.gpu_model)
    if request.gpus is not None:
        return Need(gpus=request.gpus) if request.gpus > 0 else None
    if request.gpu_milli is not None:
        if request.gpu_milli <= 0:
            return None
        if shares and node.sharing and request.gpu_milli < FULL_GPU_MILLI:
            return Need(milli=request.gpu_milli)
        return Need(gpus=math.ceil(request.gpu_milli / FULL_GPU_MILLI))
    if request.mig_profile is not None:
        return Need(gpus=1)
    need_mib = memory_need_mib(request, policy)
    if spec is None or need_mib is None or need_mib <= 0:
        return None  # the memory of a GPU outside the catalog is unknown
    if shares and node.sharing and need_mib < spec.memory_mib:
        return Need(milli=max(1, math.ceil(FULL_GPU_MILLI * need_mib / spec.memory_mib)))
    return Need(gpus=max(1, math.ceil(need_mib / spec.memory_mib)))


def may_use(job: Job, node: Node) -> bool:
    """The job's nodeSelectors: its GPU model or class, and ``reserved-only``."""
    if job.tier == JobTier.RESERVED_ONLY and node.tier != CapacityTier.RESERVED:
        return False
    return model_matches(node.gpu_model, job.gpu_model)


def is_open(node: Node) -> bool:
    return node.schedulable and node.reconfiguring_until is None


@dataclass
class Free:
    """Free capacity of one cycle, per open node: whole idle GPUs with MIG off, and free milli on shared GPUs.

    Changes are tentative until :meth:`commit`; :meth:`rollback` undoes them (a gang that did not fit).
    """

    nodes: dict[str, Node]
    whole: dict[str, list[int]] = field(default_factory=dict)  # node → idle GPU indexes, ascending
    milli: dict[str, dict[int, int]] = field(default_factory=dict)  # shared node → GPU → free milli
    _undo: list[Callable[[], None]] = field(default_factory=list)

    @classmethod
    def of(cls, snapshot: Snapshot) -> Free:
        state = ClusterState(snapshot)
        free = cls(nodes={})
        for node in snapshot.nodes:
            if not is_open(node):
                continue
            free.nodes[node.name] = node
            gpus = list(state.node_gpus(node.name))
            free.whole[node.name] = [g.index for g in gpus if g.idle and not g.mig_on]
            if node.sharing:
                free.milli[node.name] = {
                    g.index: FULL_GPU_MILLI - g.milli_used for g in gpus if not g.mig_on and g.whole is None
                }
        return free

    def take_whole(self, node: str, count: int) -> tuple[Slot, ...]:
        """The ``count`` lowest free GPUs of ``node``."""
        taken, self.whole[node] = self.whole[node][:count], self.whole[node][count:]
        shared = self.milli.get(node)
        if shared is not None:
            for gpu in taken:
                shared[gpu] = 0

        def undo() -> None:
            self.whole[node] = sorted(self.whole[node] + taken)
            if shared is not None:
                for gpu in taken:
                    shared[gpu] = FULL_GPU_MILLI

        self._undo.append(undo)
        return tuple(Slot(node, gpu) for gpu in taken)

    def take_share(self, node: str, gpu: int, milli: int) -> tuple[Slot, ...]:
        shared = self.milli[node]
        shared[gpu] -= milli
        was_idle = gpu in self.whole[node]
        if was_idle:
            self.whole[node].remove(gpu)

        def undo() -> None:
            shared[gpu] += milli
            if was_idle:
                self.whole[node] = sorted(self.whole[node] + [gpu])

        self._undo.append(undo)
        return (Slot(node, gpu, milli=milli),)

    def give_back(self, node: str, gpus: Sequence[int]) -> None:
        """Whole GPUs a tentative eviction frees become free (undone by :meth:`rollback`)."""
        added = [gpu for gpu in gpus if gpu not in self.whole[node]]
        self.whole[node] = sorted(self.whole[node] + added)
        shared = self.milli.get(node)
        before = {gpu: shared[gpu] for gpu in added if gpu in shared} if shared is not None else {}
        if shared is not None:
            for gpu in added:
                shared[gpu] = FULL_GPU_MILLI

        def undo() -> None:
            self.whole[node] = [gpu for gpu in self.whole[node] if gpu not in added]
            if shared is not None:
                for gpu in added:
                    if gpu in before:
                        shared[gpu] = before[gpu]
                    else:
                        shared.pop(gpu, None)

        self._undo.append(undo)

    def on_rollback(self, undo: Callable[[], None]) -> None:
        """Run ``undo`` if the tentative changes are rolled back (kept silently on :meth:`commit`)."""
        self._undo.append(undo)

    def fits(self, node: str, need: Need) -> bool:
        if need.is_share:
            return any(free >= need.milli for free in self.milli.get(node, {}).values())
        return len(self.whole[node]) >= need.gpus

    def commit(self) -> None:
        self._undo.clear()

    def rollback(self) -> None:
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()


Place = Callable[[Free, Job, Sequence[tuple[Node, Need]]], Slots | None]
"""A baseline's rule: slots for every replica of ``job`` over its candidate nodes (open, allowed, with the
replica's need on each, in snapshot order), taken from ``free``; or None (then ``free`` is rolled back)."""

Rescue = Callable[[Free, Job, Sequence[tuple[Node, Need]]], tuple[Slots, list[str]] | None]
"""What a baseline does for a job ``Place`` could not fit: slots taken from ``free`` after tentatively freeing
the GPUs of the running jobs it names (to be evicted), or None (``free`` is rolled back)."""


ChooseNode = Callable[["Free", Sequence[tuple[Node, Need]]], tuple[Node, Need]]
"""Picks the node for one replica among the candidates it fits on now."""


def fifo(pending: Sequence[Job]) -> list[Job]:
    """Submission order; jobs submitted at the same instant keep the snapshot's order."""
    return sorted(pending, key=lambda job: job.submitted_at)


def never_runs_reason(job: Job, nodes: Sequence[Node], policy: Policy, *, shares: bool = False) -> str | None:
    """Why ``job`` can never run on these nodes under the baseline rules, or None."""
    if job.replicas < 1:
        return "asks for no replicas: replicas must be at least 1"
    holds = 0
    needs: list[Need] = []
    for node in nodes:
        need = replica_need(job, node, policy, shares=shares) if may_use(job, node) else None
        if need is None:
            continue
        needs.append(need)
        holds += node.gpu_count if need.is_share and node.sharing else node.gpu_count // need.gpus
    if not needs:
        return "no node it may use can serve its request as whole GPUs (GPU model, tier or unknown GPU memory)"
    if holds == 0:
        smallest = min(need.gpus for need in needs)
        return f"one replica needs {smallest} whole GPUs; no node it may use has that many"
    if holds < job.replicas:
        return f"needs {job.replicas} replicas at once; the nodes it may use hold at most {holds}"
    return None


def plan_fifo(
    snapshot: Snapshot,
    policy: Policy,
    place: Place,
    *,
    name: str,
    shares: bool = False,
    order: Callable[[Sequence[Job]], list[Job]] = fifo,
    rescue: Rescue | None = None,
    rules: str = "FIFO, no preemption",
) -> Plan:
    """One cycle of a FIFO baseline: reject what never runs, place the rest in ``order`` with ``place``; a job
    that does not fit goes to ``rescue`` (preemption) when there is one."""
    free = Free.of(snapshot)
    open_nodes = [node for node in snapshot.nodes if node.name in free.nodes]
    binds: list[Bind] = []
    evictions: list[Evict] = []
    rejections: list[Reject] = []
    waiting: list[Waiting] = []
    team_positions: dict[str, int] = {}
    reasons: dict[tuple[object, ...], str | None] = {}
    for job in order(snapshot.pending):
        shape = (job.request, job.replicas, job.gpu_model, job.tier)
        if shape not in reasons:
            reasons[shape] = never_runs_reason(job, snapshot.nodes, policy, shares=shares)
        reason = reasons[shape]
        if reason is not None:
            rejections.append(Reject(job.id, reason))
            continue
        candidates = []
        for node in open_nodes:
            need = replica_need(job, node, policy, shares=shares) if may_use(job, node) else None
            if need is not None:
                candidates.append((node, need))
        slots = place(free, job, candidates) if candidates else None
        victims: list[str] = []
        if slots is None and rescue is not None and candidates:
            free.rollback()
            rescued = rescue(free, job, candidates)
            if rescued is not None:
                slots, victims = rescued
        if slots is not None:
            free.commit()
            evictions.extend(Evict(job=victim, reason=EvictionReason.PRIORITY, by=job.id) for victim in victims)
            binds.append(Bind(job.id, slots))
            continue
        free.rollback()
        team_positions[job.team] = team_positions.get(job.team, 0) + 1
        waiting.append(
            Waiting(
                job.id,
                len(waiting) + 1,
                team_positions[job.team],
                f"waiting for free whole GPUs for its {job.replicas} replica(s) ({name}: {rules})",
            )
        )
    return Plan(evictions=tuple(evictions), binds=tuple(binds), rejections=tuple(rejections), waiting=tuple(waiting))


def place_each(free: Free, job: Job, candidates: Sequence[tuple[Node, Need]], choose: ChooseNode) -> Slots | None:
    """Replicas one by one, each on the node ``choose`` picks among those it fits now (None: does not fit)."""
    slots: list[tuple[Slot, ...]] = []
    for _ in range(job.replicas):
        fitting = [(node, need) for node, need in candidates if free.fits(node.name, need)]
        if not fitting:
            return None
        node, need = choose(free, fitting)
        slots.append(free.take_whole(node.name, need.gpus))
    return tuple(slots)
