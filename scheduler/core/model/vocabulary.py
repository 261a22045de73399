"""The words a job spec, a scenario file, the database and the API share (spec/scenario.md).

Plain ``StrEnum``s so the pure core can use them; Django models turn them into choices with
:func:`choices_of`.
"""

from __future__ import annotations

from enum import StrEnum


class EvictionReason(StrEnum):
    """Why a running job was stopped and requeued (``Evict.reason``, the requeue event's reason).

    The engine writes the first five; the loop and the simulator write the others when they find a job's
    node or process gone, a node under a spot notice or drained by an admin, or a bind refused; ``ADMIN`` is a
    platform admin's requeue. ``APP_FAILURE`` is the job's own doing
    (a non-zero exit, an OOM kill): a restart within the job's restart budget, never a preemption
    (docs/billing.md, Lost work). A member prints as its value, so a plan's ``repr`` reads the same as the wire
    format it is stored in (and plan digests do not depend on the type)."""

    RECLAIM = "reclaim"  # a team takes back its guarantee from another team's borrowed work
    PRIORITY = "priority"  # higher-priority work of the same team
    PRODUCTION = "production"  # production inference, which preempts lower work in any team
    BACKFILL = "backfill"  # yielded to the reservation it backfilled: work that started while the job waited
    RECONFIGURE = "repartition"  # drained for a MIG reconfiguration (the stored value predates the name)
    NODE_LOST = "node-lost"
    COMPLETED = "completed"
    FAILED = "failed"
    BIND_REFUSED = "bind-refused"
    APP_FAILURE = "app-failure"
    SPOT_INTERRUPTION = "spot-reclaim"  # drained on a spot notice: asked to checkpoint and stop before the node goes
    NODE_DRAIN = "node-drain"  # drained by a platform admin: asked to checkpoint and stop, then requeued whole
    ADMIN = "admin"  # a platform admin stopped it from the admin pages so that it waits again

    def __repr__(self) -> str:
        return repr(self.value)


# Requeues that lose work to the infrastructure, not to another job: such a job resumes at the head of its
# priority within its team (docs/scheduling-rules.md, §3), since the work it waits to resume was already granted.
INFRASTRUCTURE_LOSSES = frozenset(
    {EvictionReason.SPOT_INTERRUPTION, EvictionReason.NODE_DRAIN, EvictionReason.NODE_LOST}
)


class BlockerKind(StrEnum):
    """What stopped a pending job this cycle (``Blocker.kind``, ``Waiting.blocker``; docs/glossary.md, blocker).

    The apps, the loop and the simulator's wait analysis read these; the values are what the cluster's record
    and the API carry, so a member prints as its value, as :class:`EvictionReason`'s do."""

    CAPACITY = "capacity"  # no free GPUs of a shape it can use
    QUOTA = "quota"  # its team's guarantee or burst limit refuses it (fair share's reason is the detail)
    RECONFIGURING = "reconfiguring"  # waits for a reconfiguration under way on the node it needs
    HELD = "held"  # production waits for a node held for its reconfiguration next cycle (placement/reconfigurations.py)
    NOT_READY = "not-ready"  # no node that could run it is ready (cordoned, draining or reconfiguring)
    RESERVED = "reserved"  # GPUs are reserved for it from the running work's expected ends (reservation.py)
    PROVISIONING = "provisioning"  # waits for on-demand nodes asked for it (decisions/provisioning.py)

    def __repr__(self) -> str:
        return repr(self.value)


class JobKind(StrEnum):
    TRAINING = "training"
    INFERENCE = "inference"
    BATCH = "batch"


# A job spec without ``kind`` is training (spec/scenario.md): the engine, the spec reader, the submit form and
# the API read this one default, so the same request is sized the same everywhere.
DEFAULT_JOB_KIND = JobKind.TRAINING


class Priority(StrEnum):
    """Highest first: production inference must always run."""

    PRODUCTION = "production"
    HIGH = "high"
    NORMAL = "normal"
    LOW = "low"


PRIORITY_INDEX: dict[str, int] = {p.value: i for i, p in enumerate(Priority)}
"""The one priority order, as a rank per value: production 0 … low 3 (a lower rank is served first)."""


class JobTier(StrEnum):
    """Which capacity tiers a job accepts."""

    ANY = "any"
    RESERVED_ONLY = "reserved-only"
    SPOT_OK = "spot-ok"


class JobState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    REJECTED = "rejected"


TERMINAL_JOB_STATES = frozenset({JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.REJECTED})


class CapacityTier(StrEnum):
    """How a node's capacity is bought."""

    RESERVED = "reserved"
    ON_DEMAND = "on-demand"
    SPOT = "spot"


class Interconnect(StrEnum):
    NVSWITCH = "nvswitch"  # all GPUs of the node all-to-all
    NVLINK_PAIRS = "nvlink-pairs"  # GPUs 0-1, 2-3, ... bridged
    PCIE = "pcie"


class Fabric(StrEnum):
    """The network a node offers to a multi-node job's collectives beyond its primary interface
    (docs/gpu-facts.md, Running a multi-node training job on Kubernetes). A gang spanning nodes talks over one
    fabric; without one, NCCL falls back to TCP on the primary interface."""

    TCP = "tcp"  # no fabric: the primary interface only
    EFA = "efa"  # AWS Elastic Fabric Adapter (extended resource vpc.amazonaws.com/efa)
    TCPX = "gpudirect-tcpx"  # GCP A3 High: GPUDirect-TCPX over 4 extra NICs
    TCPXO = "gpudirect-tcpxo"  # GCP A3 Mega: GPUDirect-TCPXO over 8 extra NICs
    INFINIBAND = "infiniband"  # InfiniBand or RoCE through an RDMA device plugin (on-prem, Azure ND)


class ReconfigurationMode(StrEnum):
    """How a node's MIG layout is changed: when a reconfiguration is ready and what it may change
    (:mod:`scheduler.core.rules.reconfiguration`, rules 5 and 6)."""

    # The GPU Operator's MIG Manager (a relabel): the node is drained of the changing GPUs' pods and its device
    # plugin paused; ready after the policy's ``mig_reconfigure_s``; one node per call, within the cycle's budget.
    RELABEL = "relabel"
    # The NVIDIA DRA driver's dynamic MIG (Hopper and newer): the instance is made when the claim that allocates
    # it is prepared, nothing is drained or paused: ready at once and outside the budget; a GPU may turn MIG on or off.
    DYNAMIC = "dynamic"
    # Dynamic MIG on GPUs whose MIG mode cannot change without a GPU reset (A100: the driver publishes a MIG-enabled
    # GPU's partitions, not the GPU): as DYNAMIC, but only MIG-enabled GPUs change, and never to MIG off.
    DYNAMIC_FIXED_MODE = "dynamic-fixed-mode"


class NodeState(StrEnum):
    READY = "ready"
    CORDONED = "cordoned"
    DRAINING = "draining"
    GONE = "gone"


class NodeStateSource(StrEnum):
    """Who set a node's state (docs/node-states.md): what decides whether the cluster sync may change it."""

    ADMIN = "admin"  # a platform admin: a cordon or drain stays until an admin marks the node ready
    NOTICE = "notice"  # a spot interruption notice: lifted when the notice is withdrawn
    CLUSTER = "cluster"  # the cluster sync: a node reported again is ready, one no longer reported is gone


class Dtype(StrEnum):
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"
    INT8 = "int8"
    INT4 = "int4"


class ModelMode(StrEnum):
    INFERENCE = "inference"
    TRAINING = "training"


class EventType(StrEnum):
    """Job events: the scenario output's types plus the portal's own audit entries."""

    SUBMITTED = "submitted"
    BOUND = "bound"
    # A running job moved make-before-break (plan.Move): its details say started, completed or abandoned.
    MOVED = "moved"
    PREEMPTED = "preempted"
    REQUEUED = "requeued"
    RECONFIGURED = "reconfigured"
    DRAINING = "draining"
    CHECKPOINTED = "checkpointed"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    REJECTED = "rejected"
    PRIORITY_CHANGED = "priority_changed"
    RANK_CHANGED = "rank_changed"
    # Nodes asked of an autoscaler for a pending job (scheduler.autoscaled.NodeRequest), one event per step: its
    # details' ``state`` says pending (asked), provisioned, fulfilled, failed, revoked, timed-out, withdrawn, or
    # released (an on-demand node it brought given back).
    NODE_REQUEST = "node_request"


def choices_of(enum: type[StrEnum]) -> list[tuple[str, str]]:
    """Django ``choices`` for a vocabulary enum: the stored value doubles as the label."""
    return [(member.value, member.value) for member in enum]
