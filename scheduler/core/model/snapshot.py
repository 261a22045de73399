"""What the engine is told: the cluster, the teams and the work, frozen at one instant.

Times are seconds on one clock (epoch seconds from the database, virtual seconds in the simulator); the
engine never reads a clock of its own. Everything here is immutable and hashable so that the same snapshot
always yields the same plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import final

from scheduler.core.gpus.units import FULL_GPU_MILLI
from scheduler.core.model.provisioning import Provisioning
from scheduler.core.model.vocabulary import (
    DEFAULT_JOB_KIND,
    CapacityTier,
    Dtype,
    Fabric,
    Interconnect,
    JobKind,
    JobTier,
    ModelMode,
    Priority,
    ReconfigurationMode,
)

MigLayout = tuple[tuple[str, int], ...]
"""A GPU's MIG instances as ``(profile, start memory slice)`` pairs; empty: MIG off, the whole GPU."""


@dataclass(frozen=True, slots=True)
class Node:
    """A GPU server. ``gpu_model`` may name a catalog model or, in traces, any other GPU (then no MIG)."""

    name: str
    gpu_model: str
    gpu_count: int
    interconnect: Interconnect = Interconnect.NVSWITCH
    leaf: str = ""
    spine: str = ""
    tier: CapacityTier = CapacityTier.ON_DEMAND
    price_per_gpu_hour: float = 0.0
    zone: str = ""
    schedulable: bool = True  # False while cordoned, draining, gone or under a spot notice
    mig: tuple[MigLayout, ...] = ()  # per GPU index; missing or empty entries: MIG off on that GPU
    sharing: bool = False  # GPUs time-sliced/MPS: fractional (milli-GPU) requests may share them
    reconfiguring_until: float | None = None  # a MIG reconfiguration is in flight: nothing new binds here before then
    cpu_milli: int | None = None  # only traces that constrain CPU and host memory set these
    memory_mib: int | None = None
    fabric: Fabric = Fabric.TCP  # the network a gang spanning this node and others talks over
    placement_group: str = ""  # the cloud placement group (or cluster network block) the node belongs to
    pool: str = ""  # the autoscaled pool that added the node (model/provisioning.py); "": not an autoscaled node
    # How it is reconfigured (the relabel flow, or a DRA driver's dynamic MIG): when a reconfiguration is ready
    # and whether it counts against the cycle's budget (scheduler.core.rules.reconfiguration, rules 5 and 6).
    reconfiguration: ReconfigurationMode = ReconfigurationMode.RELABEL

    def layout(self, gpu: int) -> MigLayout:
        return self.mig[gpu] if gpu < len(self.mig) else ()


@final
@dataclass(frozen=True, slots=True)
class ModelProfile:
    """A model to serve or train; the memory-profile estimator turns it into GPU memory."""

    params_b: float
    dtype: Dtype = Dtype.BF16
    context: int = 4096
    batch: int = 1
    mode: ModelMode = ModelMode.INFERENCE

    def __eq__(self, other: object) -> bool:
        if type(other) is not ModelProfile:  # final: the generated method's check, other.__class__ is self.__class__
            return NotImplemented
        return (self.params_b, self.dtype, self.context, self.batch, self.mode) == (
            other.params_b,
            other.dtype,
            other.context,
            other.batch,
            other.mode,
        )

    def __hash__(self) -> int:
        return hash((self.params_b, self.dtype, self.context, self.batch, self.mode))


@final
@dataclass(frozen=True, slots=True)
class Request:
    """Per replica, exactly one of: whole GPUs, a MIG profile, GPU memory, a model, or a milli-GPU share."""

    gpus: int | None = None
    mig_profile: str | None = None
    memory_gib: float | None = None
    model: ModelProfile | None = None
    gpu_milli: int | None = None  # 1..999: a share of one time-sliced GPU (Alibaba openb's gpu_milli)

    def __eq__(self, other: object) -> bool:
        if type(other) is not Request:  # final: the generated method's check, other.__class__ is self.__class__
            return NotImplemented
        return (self.gpus, self.mig_profile, self.memory_gib, self.model, self.gpu_milli) == (
            other.gpus,
            other.mig_profile,
            other.memory_gib,
            other.model,
            other.gpu_milli,
        )

    def __hash__(self) -> int:
        return hash((self.gpus, self.mig_profile, self.memory_gib, self.model, self.gpu_milli))

    def __post_init__(self) -> None:
        stated = [
            v for v in (self.gpus, self.mig_profile, self.memory_gib, self.model, self.gpu_milli) if v is not None
        ]
        if len(stated) != 1:
            raise ValueError("state the request in exactly one way: gpus, mig_profile, memory_gib, model or gpu_milli")


@dataclass(frozen=True, slots=True)
class Job:
    id: str
    team: str
    request: Request
    kind: JobKind = DEFAULT_JOB_KIND
    priority: Priority = Priority.NORMAL
    replicas: int = 1
    gpu_model: str | None = None  # a catalog model or a class ("H100"); None: any
    preemptible: bool = False
    checkpoint_interval_s: float | None = None
    tier: JobTier = JobTier.ANY
    duration_s: float | None = None
    rank: int = 0
    submitted_at: float = 0.0
    project: str | None = None
    cpu_milli: int = 0  # per replica; traces only
    memory_mib: int = 0
    # Its latest requeue lost its run to the infrastructure (a spot interruption, a lost node): it goes first among
    # its team's jobs of the same priority, ahead of the lead's rank (fairshare.job_key).
    resumes: bool = False
    # Production placed on larger capacity than its right size may later be moved to its right-sized slice
    # make-before-break (docs/scheduling-rules.md); False: the job opted out and stays where it started.
    consolidate: bool = True


@dataclass(frozen=True, slots=True)
class Slot:
    """One GPU, one MIG instance, or one share of a GPU, held by one replica."""

    node: str
    gpu: int
    mig_profile: str | None = None
    mig_start: int | None = None
    milli: int = FULL_GPU_MILLI

    def __init__(
        self,
        node: str,
        gpu: int,
        mig_profile: str | None = None,
        mig_start: int | None = None,
        milli: int = FULL_GPU_MILLI,
    ) -> None:
        object.__setattr__(self, "node", node)
        object.__setattr__(self, "gpu", gpu)
        object.__setattr__(self, "mig_profile", mig_profile)
        object.__setattr__(self, "mig_start", mig_start)
        object.__setattr__(self, "milli", milli)


Slots = tuple[tuple[Slot, ...], ...]  # per replica, the slots it holds (a job's whole placement)


@dataclass(frozen=True, slots=True)
class Running:
    job: Job
    slots: Slots
    started_at: float
    last_checkpoint_at: float | None = None
    # A move under way (plan.Move): the placement the old replicas still hold until the new ones on ``slots``
    # are ready; counted as held, and no other move starts for the job meanwhile.
    moving_from: Slots = ()
    # When the job's moves of the last 24 hours started, oldest first: the consolidation's per-job budget and
    # interval read them (scheduler.core.decisions.consolidation).
    moved_at: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True)
class Team:
    """Quotas in GPU-equivalents, keyed by GPU class or ``"any"`` (the overall figure)."""

    name: str
    weight: float = 1.0
    guaranteed: tuple[tuple[str, float], ...] = ()
    burst: tuple[tuple[str, float], ...] = ()
    # The team's history: the median run time of its recently finished jobs, the estimate of a running or
    # pending job that states no duration_s (None: no history; the policy's default_runtime_s then).
    typical_runtime_s: float | None = None

    def guaranteed_for(self, gpu_class: str) -> float | None:
        return dict(self.guaranteed).get(gpu_class)

    def burst_for(self, gpu_class: str) -> float | None:
        return dict(self.burst).get(gpu_class)


@dataclass(frozen=True, slots=True)
class Preemption:
    """A past eviction, kept so a victim cannot immediately preempt its preemptor back."""

    victim: str
    by: str
    at: float


@dataclass(frozen=True, slots=True)
class Snapshot:
    nodes: tuple[Node, ...]
    teams: tuple[Team, ...]
    running: tuple[Running, ...] = ()
    pending: tuple[Job, ...] = ()
    preemptions: tuple[Preemption, ...] = field(default=())
    provisioning: Provisioning = field(default=Provisioning())  # on-demand capacity that can be asked for
