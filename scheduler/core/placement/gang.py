"""Gangs: a job's replicas bind all together or not at all.

- :func:`bind` places every replica in one step (the state checks every slot before taking any) and
  returns the :class:`Bind`; a placement with the wrong number of replicas is refused.
- :func:`cluster_capacity` — how many replicas of a job the whole cluster could ever hold (every node,
  ready or not, all of its GPUs free, MIG layouts free to change, a whole-GPU gang on the models it may span,
  a GPUDirect-TCPX/TCPXO node only on its own unless the gang's replicas take it whole: :mod:`.fabric`, rule 4):
  the cycle rejects a gang larger than that.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import final

from scheduler.core.gpus.catalog import GPU_MODEL_BY_NAME
from scheduler.core.gpus.units import FULL_GPU_MILLI
from scheduler.core.model.cluster_state import ClusterState
from scheduler.core.model.demand import DemandKind
from scheduler.core.model.plan import Bind
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Node, Slots
from scheduler.core.placement.fabric import whole_node_only
from scheduler.core.placement.spans import span_key
from scheduler.core.rules.tiers import tier_rank
from scheduler.core.sizing.rightsize import resolve


class GangError(ValueError):
    """A placement that would bind part of a gang."""


def check_gang(job: Job, slots: Slots) -> None:
    """Raise :class:`GangError` unless ``slots`` has exactly one non-empty tuple per replica of ``job``."""
    if len(slots) != job.replicas:
        raise GangError(f"job {job.id} has {job.replicas} replicas but {len(slots)} were placed")
    if any(not replica for replica in slots):
        raise GangError(f"job {job.id}: every replica needs at least one slot")


def bind(state: ClusterState, job: Job, slots: Slots) -> Bind:
    """Place every replica of ``job`` on ``slots`` (all or none) and return the :class:`Bind` to emit."""
    check_gang(job, slots)
    state.place(job, slots)
    return Bind(job=job.id, slots=slots)


@final
@dataclass(frozen=True, slots=True)
class NodeKind:
    """What :func:`node_capacity` reads from a node: nodes alike in these are counted together."""

    gpu_model: str
    gpu_count: int
    tier: str
    sharing: bool
    cpu_milli: int | None
    memory_mib: int | None
    fabric: str = "tcp"

    def __init__(
        self,
        gpu_model: str,
        gpu_count: int,
        tier: str,
        sharing: bool,
        cpu_milli: int | None,
        memory_mib: int | None,
        fabric: str = "tcp",
    ) -> None:
        object.__setattr__(self, "gpu_model", gpu_model)
        object.__setattr__(self, "gpu_count", gpu_count)
        object.__setattr__(self, "tier", tier)
        object.__setattr__(self, "sharing", sharing)
        object.__setattr__(self, "cpu_milli", cpu_milli)
        object.__setattr__(self, "memory_mib", memory_mib)
        object.__setattr__(self, "fabric", fabric)

    def __eq__(self, other: object) -> bool:
        if type(other) is not NodeKind:  # final: the generated method's check, other.__class__ is self.__class__
            return NotImplemented
        return (
            self.gpu_model,
            self.gpu_count,
            self.tier,
            self.sharing,
            self.cpu_milli,
            self.memory_mib,
            self.fabric,
        ) == (
            other.gpu_model,
            other.gpu_count,
            other.tier,
            other.sharing,
            other.cpu_milli,
            other.memory_mib,
            other.fabric,
        )

    def __hash__(self) -> int:
        return hash(
            (self.gpu_model, self.gpu_count, self.tier, self.sharing, self.cpu_milli, self.memory_mib, self.fabric)
        )

    @classmethod
    def of(cls, node: Node) -> NodeKind:
        return cls(
            node.gpu_model,
            node.gpu_count,
            str(node.tier),
            node.sharing,
            node.cpu_milli,
            node.memory_mib,
            str(node.fabric),
        )


def node_kinds(nodes: Sequence[Node]) -> tuple[tuple[NodeKind, int], ...]:
    """The nodes grouped by :class:`NodeKind`, with their counts, in a stable order."""
    counts: dict[NodeKind, int] = {}
    for node in nodes:
        kind = NodeKind.of(node)
        counts[kind] = counts.get(kind, 0) + 1
    return tuple(sorted(counts.items(), key=lambda item: astuple_key(item[0])))


def astuple_key(kind: NodeKind) -> tuple[object, ...]:
    return (
        kind.gpu_model,
        kind.gpu_count,
        kind.tier,
        kind.sharing,
        kind.cpu_milli or -1,
        kind.memory_mib or -1,
        kind.fabric,
    )


def node_capacity(node: NodeKind, job: Job, policy: Policy) -> int:
    """Replicas of ``job`` one node could hold with every GPU free and any MIG layout (0: none)."""
    if node.tier not in tier_rank(job):
        return 0
    demand = resolve(job, node.gpu_model, policy)
    if demand is None:
        return 0
    if demand.kind == DemandKind.WHOLE:
        replicas = node.gpu_count // demand.gpus
    elif demand.kind == DemandKind.MIG:
        spec = GPU_MODEL_BY_NAME[node.gpu_model]
        replicas = node.gpu_count * spec.profiles()[demand.mig_profile or ""].max_count
    else:
        replicas = node.gpu_count * (FULL_GPU_MILLI // demand.milli) if node.sharing else 0
    if job.cpu_milli > 0 and node.cpu_milli is not None:
        replicas = min(replicas, node.cpu_milli // job.cpu_milli)
    if job.memory_mib > 0 and node.memory_mib is not None:
        replicas = min(replicas, node.memory_mib // job.memory_mib)
    return replicas


def single_node_only(kind: NodeKind, gpus: int, demand_kind: str) -> bool:
    """May a gang of ``gpus``-GPU replicas use a node of ``kind`` only when all of the gang fits on it?"""
    return demand_kind == DemandKind.WHOLE and whole_node_only(kind.fabric, kind.gpu_count, gpus)


def cluster_capacity(kinds: Sequence[tuple[NodeKind, int]], job: Job, policy: Policy) -> int:
    """Replicas of ``job`` the whole cluster could ever hold (module doc); ``kinds`` from :func:`node_kinds`.
    A whole-GPU gang stays on one GPU model or on models of one class with one right-sized demand (placement's
    rule, :mod:`scheduler.core.placement.spans`), so its capacity is that of its best such pool: the models of
    a pool are counted together, or a gang that fits only across them would be rejected as impossible."""
    by_pool: dict[Hashable, int] = {}
    whole_only = True
    for kind, count in kinds:
        replicas = node_capacity(kind, job, policy)
        if replicas:
            demand = resolve(job, kind.gpu_model, policy)
            assert demand is not None  # node_capacity holds no replica where the model cannot serve the job
            key = span_key(kind.gpu_model, demand)
            if job.replicas > 1 and single_node_only(kind, demand.gpus, demand.kind):
                # Such nodes hold the gang only one at a time, all of it on one node (.fabric, rule 4).
                replicas, count = (replicas if replicas >= job.replicas else 0), 1
            by_pool[key] = by_pool.get(key, 0) + replicas * count
            whole_only = whole_only and demand.kind == DemandKind.WHOLE
    if not by_pool:
        return 0
    if whole_only and job.replicas > 1:
        return max(by_pool.values())
    return sum(by_pool.values())
