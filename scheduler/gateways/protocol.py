"""The cluster gateway: the one seam between the scheduling loop and a cluster (DESIGN.md §1–2).

The loop reads the cluster with :meth:`ClusterGateway.observe` and changes it only through the apply methods
below, one per operation. Two implementations: :mod:`scheduler.gateways.simulated` (the embedded fleet, default) and
:mod:`scheduler.gateways.kube.gateway` (Kubernetes with the NVIDIA GPU Operator). :func:`scheduler.gateways.gateway_get`
picks one from ``settings.CLUSTER_BACKEND``.

Everything here is backend-neutral plain data. How a Kubernetes gateway maps it (informative, the kube module
decides the details):

- a job's replica is one pod in the team's namespace, labelled with the job id and replica index, created
  with ``schedulerName: microcosm`` and bound with the ``pods/binding`` subresource; a replica's devices are
  ``nvidia.com/gpu: <n>`` (whole GPUs) or ``nvidia.com/mig-<profile>: 1`` (mixed strategy);
- :attr:`NodeObservation.mig` comes from the node's MIG labels, :class:`MigStatus` from
  ``nvidia.com/mig.config`` / ``nvidia.com/mig.config.state``; :meth:`ClusterGateway.node_reconfigure` writes a
  mig-parted config and sets ``nvidia.com/mig.config`` (``docs/gpu-facts.md``, mig-parted config format,
  MIG Manager reconfiguration flow);
- :class:`Interruption` comes from spot taints and labels (``docs/gpu-facts.md``, Spot and preemption signals);
- a move (:meth:`ClusterGateway.job_move`) starts the job's pods again as a new *generation* beside the running
  ones (``mc-<job>-g<n>-<replica>``, label ``microcosm.io/generation``), :attr:`ReplicaObservation.ready` is the
  pod's ``Ready`` condition, and :meth:`ClusterGateway.job_release` deletes the older generation's pods.

Identifiers: a job is named by its database id as a string (``"42"``), a node by its Kubernetes node name,
a GPU by its index on the node, a MIG instance by its profile and start memory slice. Times are epoch
seconds on the gateway's clock (:attr:`Observation.observed_at`).

Recording: a backend that can record on the cluster why the scheduler acted (Kubernetes Events) also implements
:class:`RecordingGateway`; the loop tells it which job an eviction makes room for and why jobs wait.

Batches: a backend that applies many operations faster together than one by one (the simulated fleet: one walk
of the fleet and one transaction per cycle instead of per bind) also implements :class:`BatchingGateway`; the
loop applies each cycle's operations inside one batch, and applies them one by one, in the same order, to a
backend without it. One that binds many jobs in one call faster than one by one also implements
:class:`BindingManyGateway`; the loop hands it each run of consecutive binds at once.

Maintenance: a backend whose cluster needs the scheduler to drive multi-step work between cycles (the
Kubernetes MIG flow: drain, relabel, wait, recover, uncordon) also implements
:class:`MaintainedGateway`; :func:`scheduler.services.mig.cluster_maintain` calls it on the MIG-watch beat.

Errors: every method raises only :class:`~scheduler.errors.GatewayError` subclasses on purpose —
:class:`~scheduler.errors.GatewayRetryable` (transient, safe to call again),
:class:`~scheduler.errors.GatewayConflict` (the cluster contradicts the request; re-plan instead of retrying).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol, runtime_checkable

from scheduler.core.model.snapshot import MigLayout
from scheduler.core.model.vocabulary import BlockerKind
from scheduler.errors import GatewayConflict

# Where a checkpointed job's pods find its team's checkpoint volume, and the job's own directory on it: the
# loop names CHECKPOINT_DIR with it, a backend mounts the volume there and reads the job's manifest under it.
CHECKPOINT_MOUNT = "/checkpoints"
# Evictions after which a job never runs again: its pods are removed for good, and with them its report
# credential. Every other reason (preemption, spot interruption, node lost, reconfiguration) requeues the job.
FINAL_EVICTIONS = frozenset({"completed", "failed", "cancelled", "unknown-job"})


def job_checkpoint_dir(job: str) -> str:
    """``CHECKPOINT_DIR`` of job ``job`` (its id as a string) as its pods see it: ``/checkpoints/job-<id>``."""
    return f"{CHECKPOINT_MOUNT}/job-{job}"


class ReplicaPhase(StrEnum):
    """Where one replica (one pod) of a job stands, as the cluster sees it."""

    PENDING = "pending"  # created, not bound to a node yet
    BOUND = "bound"  # bound to a node, not running yet (image pull, device plugin allocation)
    RUNNING = "running"
    STOPPING = "stopping"  # asked to stop (SIGTERM sent), still within its grace period: it may checkpoint now
    SUCCEEDED = "succeeded"  # its work is done
    FAILED = "failed"  # exited with an error; ``message`` says why
    GONE = "gone"  # lost with its node (node deleted, interrupted) or deleted behind the scheduler's back


class MigConfigState(StrEnum):
    """The GPU Operator's ``nvidia.com/mig.config.state`` values (``docs/gpu-facts.md``, MIG Manager reconfiguration
    flow)."""

    SUCCESS = "success"
    PENDING = "pending"
    REBOOTING = "rebooting"
    FAILED = "failed"


class DeviceApi(StrEnum):
    """How a node's GPUs reach pods: the device plugin's extended resources (``nvidia.com/gpu``, ``nvidia.com/mig-*``)
    or Dynamic Resource Allocation (``resource.k8s.io`` ResourceSlices and ResourceClaims). Never both on one node
    (scheduler/gateways/kube/nodes.py, node_observation)."""

    DEVICE_PLUGIN = "device-plugin"
    DRA = "dra"


@dataclass(frozen=True, slots=True)
class Device:
    """One GPU of a node, or one MIG instance of it (``mig_profile`` and ``mig_start`` both set)."""

    gpu: int
    mig_profile: str | None = None
    mig_start: int | None = None


@dataclass(frozen=True, slots=True)
class ReplicaPlacement:
    """The devices of one replica, all on one node."""

    replica: int
    node: str
    devices: tuple[Device, ...]


@dataclass(frozen=True, slots=True)
class Interruption:
    """A notice that the node will be taken away (spot interruption, scheduled maintenance)."""

    noticed_at: float
    deadline_at: float | None  # when the node is expected to go; None: unknown (take no new work from now)
    source: str  # e.g. "spot-itn", "karpenter-disrupted", "simulated"


@dataclass(frozen=True, slots=True)
class MigStatus:
    """The MIG reconfiguration state of a node.

    ``desired`` is the per-GPU layout last asked for with :meth:`ClusterGateway.node_reconfigure` (None: never
    asked, or the backend cannot tell); while ``state`` is ``pending`` or ``rebooting`` the node's
    :attr:`NodeObservation.mig` still shows the old layout and nothing new may bind there.
    """

    state: MigConfigState = MigConfigState.SUCCESS
    desired: tuple[MigLayout, ...] | None = None
    since: float | None = None  # when the current state began
    ready_at: float | None = None  # the backend's estimate of when a pending change completes


@dataclass(frozen=True, slots=True)
class NodeObservation:
    """One GPU node as the cluster reports it."""

    name: str
    gpu_model: str  # a catalog model name (scheduler.core.gpus.catalog), e.g. "H100-SXM5-80GB"
    gpu_count: int
    interconnect: str  # nvswitch | nvlink-pairs | pcie
    tier: str  # reserved | on-demand | spot
    leaf: str = ""
    spine: str = ""
    zone: str = ""
    mig: tuple[MigLayout, ...] = ()  # current layout per GPU index; empty entries: MIG off on that GPU
    schedulable: bool = True  # False when cordoned, NotReady or tainted against new work
    interruption: Interruption | None = None
    mig_status: MigStatus = field(default_factory=MigStatus)
    price_per_gpu_hour: float | None = None  # None: the cluster does not know; the inventory's price holds
    labels: Mapping[str, str] = field(default_factory=dict)
    # The fabric the node offers multi-node jobs (a scheduler.core.model.vocabulary.Fabric value), how many fabric
    # devices it advertises (EFA interfaces, RDMA devices, extra NICs; 0 when none or unknown), and the placement
    # group it belongs to ("" unknown).
    fabric: str = "tcp"
    fabric_devices: int = 0
    placement_group: str = ""
    # The autoscaled pool that added the node (model/provisioning.py; the loop matches it to an AutoscaledPool by the
    # pool's node labels); "": a node no pool of Microcosm's added.
    pool: str = ""
    # The node carries the cordon Microcosm set for an admin's cordon or drain (ClusterGateway.node_cordon): the
    # loop lifts it once the admin marks the node ready. A cordon somebody else set is never Microcosm's to lift.
    cordoned_by_admin: bool = False
    # How the node's GPUs are published (a DeviceApi value): a DRA node's pods get their devices through
    # ResourceClaims, not through extended resources.
    device_api: str = DeviceApi.DEVICE_PLUGIN.value
    # How it is reconfigured (a scheduler.core ReconfigurationMode value): the GPU Operator's relabel flow, or a
    # DRA driver's dynamic MIG, whose changes are ready at once (scheduler/gateways/kube/dra_mig.py).
    reconfiguration: str = "relabel"


@dataclass(frozen=True, slots=True)
class ReplicaObservation:
    replica: int
    phase: ReplicaPhase
    node: str | None = None  # None while pending
    devices: tuple[Device, ...] = ()  # what the backend knows of the devices; may be empty on Kubernetes
    message: str = ""  # why pending or failed, in the cluster's words
    # Which start of the job's replicas this one belongs to: 0 for a bind, one more for each move
    # (:meth:`ClusterGateway.job_move`); while a move is under way a job has replicas of two generations.
    generation: int = 0
    # Ready to serve (Kubernetes: the pod's Ready condition as the kubelet sets it; the simulated fleet: its
    # start-up has passed). A move completes only once every replica of its generation is running and ready.
    ready: bool = False


@dataclass(frozen=True, slots=True)
class JobObservation:
    """The cluster's view of one job's replicas (only jobs the gateway created are reported)."""

    job: str
    namespace: str
    replicas: tuple[ReplicaObservation, ...]
    last_checkpoint_at: float | None = None  # when the job last saved a checkpoint, if the backend knows
    # Where that checkpoint stands, when the backend knows it (the job directory's manifest, the simulated fleet);
    # a job's own reports reach the database through the API instead (jobs.services.checkpoint_record).
    last_checkpoint_step: int | None = None
    last_checkpoint_path: str = ""

    def phases(self) -> frozenset[ReplicaPhase]:
        return frozenset(replica.phase for replica in self.replicas)


class NodeRequestState(StrEnum):
    """Where a node request stands, in the autoscaler's terms (Cluster Autoscaler: a ProvisioningRequest's
    conditions; Karpenter: whether its placeholder pods run on Ready nodes; scheduler/gateways/kube/provisioning.py).

    A stockout the autoscaler itself retries is PENDING with the autoscaler's words in ``message`` (CA:
    ``Provisioned=False, CapacityIsNotFound``, retried with backoff; Karpenter: an insufficient-capacity launch deletes
    its NodeClaim and tries again, and never gives up on a pending pod): the loop's own timeout withdraws it."""

    PENDING = "pending"  # asked; no nodes yet (CA: not Accepted, Accepted, or Provisioned=False)
    PROVISIONED = "provisioned"  # every node asked for exists or is coming up (CA: Provisioned=True)
    FAILED = "failed"  # the autoscaler gave up (CA: Failed=True; Karpenter never does)
    REVOKED = "revoked"  # capacity provisioned earlier was taken back (CA: CapacityRevoked=True)


@dataclass(frozen=True, slots=True)
class NodeRequestObservation:
    id: str  # the id Microcosm gave it (NodeRequestSpec.id)
    job: str
    pool: str
    state: NodeRequestState
    message: str = ""  # the autoscaler's own words (a condition's reason and message)
    since: float | None = None  # when the state began, when the backend knows
    nodes: tuple[str, ...] = ()  # the nodes it brought, when the backend can tell


@dataclass(frozen=True, slots=True)
class Observation:
    """Everything :meth:`ClusterGateway.observe` reports at one instant."""

    observed_at: float
    nodes: tuple[NodeObservation, ...]
    jobs: Mapping[str, JobObservation]
    # Virtual seconds of job work per real second: 1 on a real cluster, the speed factor on the simulated
    # fleet. The snapshot divides job durations by it so the engine's ETAs are in real seconds.
    clock_speed: float = 1.0
    # Node requests the backend holds (ProvisioningGateway), whatever their state; () for a backend that cannot grow.
    node_requests: tuple[NodeRequestObservation, ...] = ()


@dataclass(frozen=True, slots=True)
class BindRequest:
    """Everything a backend needs to start every replica of a job on the planned devices."""

    job: str
    namespace: str
    name: str
    placements: tuple[ReplicaPlacement, ...]  # one per replica, replica indices 0..n-1
    image: str = ""
    command: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    priority: str = "normal"
    duration_s: float | None = None  # expected work at full speed (the simulated fleet runs it this long)
    checkpoint_interval_s: float | None = None
    checkpoint_dir: str = ""  # CHECKPOINT_DIR for the pods
    resume_from: str = ""  # RESUME_FROM: the checkpoint a requeued job restarts from ("" on a first start)
    # The job's report credential (jobs.credentials): the backend hands it to the pods (a Kubernetes Secret
    # mounted into them) and removes it when the job's pods are removed for good. "": the job does not report.
    credential: str = ""
    checkpoint_claim: str = ""  # the team's checkpoint volume claim ("": the backend's default name)
    # Host resources per replica (docs/job-spec.md): CPU cores and the memory of the job's own processes, GiB
    # (/dev/shm comes on top). None: the backend's default per GPU (docs/deploy.md, Pod resources).
    cpu: float | None = None
    host_memory_gib: float | None = None


@dataclass(frozen=True, slots=True)
class UtilizationReading:
    """How busy one node's GPUs were over the last interval (per node, per GPU class)."""

    node: str
    gpu_class: str
    gpus: float  # capacity in GPU-equivalents
    allocated_gpus: float  # GPU-equivalents held by pods
    busy_ratio: float  # 0–1: engine activity (DCGM_FI_PROF_GR_ENGINE_ACTIVE) averaged over the capacity


# The most a log read returns, whatever the caller asks: a page, an API answer and a download stay bounded.
LOG_LIMIT_BYTES = 2 * 1024 * 1024


class LogSource(StrEnum):
    """Where a replica's log comes from: the container's own output, or the simulated fleet's lifecycle."""

    KUBERNETES = "kubernetes"  # the pod log API: what the job's container wrote to stdout and stderr
    SIMULATED = "simulated"  # the simulated fleet's lifecycle of the replica; it runs no container, so no output


@dataclass(frozen=True, slots=True)
class ReplicaLog:
    """The last lines of one replica's log, as :meth:`ClusterGateway.job_logs` read them.

    ``text`` is empty when the replica has no log (never started, or its pod is gone); ``note`` then says why in
    the cluster's words. ``truncated``: the byte limit cut the text short (the lines asked for were longer).
    """

    replica: int
    text: str
    source: LogSource
    truncated: bool = False
    note: str = ""


@runtime_checkable
class ClusterGateway(Protocol):
    """The cluster seen by the scheduling loop. Every apply method is idempotent: calling it again with the
    same arguments after a success (or after a crash half-way) leaves the cluster as one call would."""

    name: str  # "simulated" | "kubernetes"

    def observe(self) -> Observation:
        """The nodes, the jobs' replicas and MIG states now.

        Read-only. Raises :class:`~scheduler.errors.GatewayRetryable` when the cluster cannot be read (the
        cycle then does nothing: it never plans on a partial view).
        """
        ...

    def namespace_ensure(self, *, namespace: str, team: str, checkpoint_claim: str = "") -> None:
        """Make the team's namespace exist (labelled with the team slug), with its checkpoint volume where the
        backend keeps one: ``checkpoint_claim`` names a volume claim the team brings itself ("": the backend
        creates its own, :attr:`BindRequest.checkpoint_claim`). Existing: no change.

        Raises ``GatewayRetryable`` on transient failures.
        """
        ...

    def job_bind(self, *, request: BindRequest) -> None:
        """Start every replica of ``request.job`` on its placement: all replicas or none.

        Idempotent: replicas already bound to the same node (and devices, where the backend tracks them) are
        left alone and the missing ones are created. If any replica cannot be placed, the replicas this call
        created are removed again before the error is raised, so a gang never runs partly.

        Raises ``GatewayConflict`` when a node is gone, cordoned or under reconfiguration, a device is held by
        another job, or the job's replicas are bound to other nodes; ``GatewayRetryable`` on transient
        failures (after undoing its partial work).
        """
        ...

    def job_evict(self, *, job: str, namespace: str, grace_s: float, reason: str) -> None:
        """Stop every replica of ``job``, giving them ``grace_s`` seconds to checkpoint and exit (a backend whose
        replicas carry a termination grace of their own keeps it unless ``grace_s`` is shorter: a deadline).

        ``reason`` is recorded on the cluster side (event/annotation) for operators: ``priority``,
        ``reclaim``, ``repartition``, ``node-lost``, ``cancelled``, ``completed`` (clean-up of finished pods),
        ``failed``, ``unknown-job``. The reasons after which the job does not come back (:data:`FINAL_EVICTIONS`)
        also remove what the backend keeps for the job's runs (its report credential). Idempotent: a job with no
        replicas left is a no-op. Raises ``GatewayRetryable`` on transient failures.
        """
        ...

    def job_move(self, *, request: BindRequest, generation: int) -> None:
        """Start every replica of ``request.job`` again on ``request.placements`` as replicas of ``generation``,
        while the replicas of older generations keep running (a move, make-before-break, as a rolling update
        surges new pods before it deletes old ones). All replicas of the generation or none, as :meth:`job_bind`.

        Idempotent: replicas of ``generation`` already on the same node (and devices) are left alone, the missing
        ones are created. The loop also calls it to re-apply a bind whose generation is above 0 (the job was
        moved before). Readiness shows in :attr:`ReplicaObservation.ready` of the new replicas; the caller then
        releases the old ones with :meth:`job_release`, or gives the move up with :meth:`job_move_abandon`.

        Raises ``GatewayConflict`` when a node is gone, cordoned or under reconfiguration, a device is held by
        another job (or by the job's own older replicas), or the generation's replicas are elsewhere;
        ``GatewayRetryable`` on transient failures (after undoing its partial work).
        """
        ...

    def job_release(self, *, job: str, namespace: str, generation: int, grace_s: float) -> None:
        """A move is complete: stop every replica of ``job`` of a generation older than ``generation``, within
        their termination grace as :meth:`job_evict` does (``grace_s`` a deadline), and keep ``generation``'s.
        Keeps what the job's runs share (its report credential, its rendezvous). Idempotent: nothing older left
        is a no-op. Raises ``GatewayRetryable`` on transient failures.
        """
        ...

    def job_move_abandon(self, *, job: str, namespace: str, generation: int, grace_s: float) -> None:
        """A move is given up (its new replicas failed or were not ready in time): stop the replicas of
        ``generation`` and of any newer one, keep the older ones, which still serve. Idempotent. Raises
        ``GatewayRetryable`` on transient failures.
        """
        ...

    def node_reconfigure(self, *, node: str, layouts: tuple[MigLayout, ...]) -> None:
        """Start changing ``node``'s MIG layouts to ``layouts`` (one entry per GPU index, ``()``: MIG off).

        Returns once the change is requested; its progress shows in :attr:`NodeObservation.mig_status`
        (``pending`` until done, then ``success`` with :attr:`NodeObservation.mig` = ``layouts``). The caller
        first evicts every job on the GPUs to be reconfigured; the backend keeps the node closed to new
        work while the change runs and drains whatever GPU pods are left. Asking for the layouts already in
        place, or already being applied, is a no-op.

        Raises ``GatewayConflict`` when the node is gone or a layout is not valid for its GPU model;
        ``GatewayRetryable`` on transient failures.
        """
        ...

    def node_cordon(self, *, node: str, cordoned: bool) -> None:
        """Carry an admin's cordon or drain (docs/node-states.md) to the cluster, as ``kubectl cordon`` and
        ``kubectl uncordon`` do, so that nothing else is placed there either.

        ``cordoned=True`` closes a node that is open, marked as Microcosm's cordon; a node already closed by
        somebody else is left as it is (and not marked). ``cordoned=False`` lifts only Microcosm's own cordon.
        Idempotent. A backend whose cordon *is* the inventory's state makes this a no-op. Raises
        ``GatewayConflict`` when the node is gone, ``GatewayRetryable`` on transient failures.
        """
        ...

    def job_logs(
        self, *, job: str, namespace: str, replica: int, tail_lines: int, limit_bytes: int = LOG_LIMIT_BYTES
    ) -> ReplicaLog:
        """The last ``tail_lines`` lines of replica ``replica`` of ``job``, at most ``limit_bytes`` bytes of them.

        Read-only. A replica whose pod is gone, or that has not started, is not an error: its log is empty and
        ``note`` says why (a pod's log goes with it). Never invents output: on the simulated fleet the lines are
        the replica's lifecycle as the fleet and the job's record hold it (bound, checkpoints, asked to stop,
        stopped). Raises ``GatewayRetryable`` on transient failures.
        """
        ...

    def utilization(self) -> tuple[UtilizationReading, ...]:
        """How busy each node's GPUs were since the previous call (may be empty when no metrics source is
        configured). Read-only; raises ``GatewayRetryable`` on transient failures."""
        ...


@dataclass(frozen=True, slots=True)
class MaintenanceEvent:
    """One step :meth:`MaintainedGateway.maintain` took on one node (for the task's summary and the log)."""

    node: str
    step: str  # what was done, backend-defined: "relabel", "succeed", "recover", "fail", "mig-live"…
    detail: str = ""


@runtime_checkable
class MaintainedGateway(Protocol):
    """Optional: a gateway with work of its own to drive between cycles (module doc, Maintenance).

    Contract of :meth:`maintain`:

    - moves every node's in-flight operation (a MIG reconfiguration requested with
      :meth:`ClusterGateway.node_reconfigure`) at most one step forward and returns the steps taken, in node
      order; ``()`` when nothing needed doing. Waiting is not a step: a change still in progress is left alone
      and not reported.
    - safe to call at any time and from any worker, any number of times: each step is decided from the
      cluster's current state, so a repeated or concurrent call finds nothing left to do (or the next step).
      The callers run it every ``MIG-watch`` period (15 s), not under the cycle's lock.
    - never binds or evicts Microcosm's jobs by itself beyond what an accepted ``node_reconfigure`` implied
      (draining the GPUs to be reconfigured), and records nothing in the database.
    - raises only :class:`~scheduler.errors.GatewayError` subclasses, like the rest of the gateway.
    """

    def maintain(self) -> tuple[MaintenanceEvent, ...]: ...


@runtime_checkable
class BatchingGateway(Protocol):
    """Optional: a gateway that applies a cycle's operations as one batch (module doc, Batches).

    Contract of :meth:`batch`, a context manager the loop enters around one cycle's operations:

    - the operations called inside it have exactly the effects, refusals and errors they have called one by one in
      the same order, except that they may all take effect at one instant (the gateway's clock read once);
    - each operation stays all-or-nothing on its own: a refused one (``GatewayConflict``) or a failed one
      (``GatewayRetryable``) leaves nothing behind and the next ones go on; what happened to the earlier ones
      stands once the batch ends;
    - the effects may become visible to other readers only when the batch ends (one transaction); an exception
      that is no :class:`~scheduler.errors.GatewayError` may undo the whole batch, which the next cycle's
      reconciliation repairs as it repairs any operation that was recorded but not applied;
    - entering a batch inside a batch is the one batch.

    A backend whose every operation is a separate API call anyway (Kubernetes) gains nothing from it and does
    not implement it: the loop then applies the operations one by one.
    """

    def batch(self) -> AbstractContextManager[None]: ...


@runtime_checkable
class BindingManyGateway(Protocol):
    """Optional: a gateway that binds many jobs in one call faster than one by one (the simulated fleet: its reads
    and writes shared by every bind of the call). The loop calls it, inside the batch, for each run of consecutive
    binds of a cycle.

    Contract of :meth:`jobs_bind`: the requests have exactly the effects and refusals that :meth:`job_bind` would
    give them called one by one in the same order (a refused one leaves nothing behind, and the ones after it go
    on); it returns the refused ones' reasons by job (those :meth:`job_bind` would raise as
    :class:`~scheduler.errors.GatewayConflict`). An error it raises applies none of them.
    """

    def jobs_bind(self, *, requests: Sequence[BindRequest]) -> Mapping[str, str]: ...


@dataclass(frozen=True, slots=True)
class NodeRequestSpec:
    """Everything a backend needs to ask its autoscaler for nodes for one job (a plan's ``Provision``)."""

    id: str  # unique; the backend names its objects after it and reports it back in NodeRequestObservation
    job: str
    namespace: str  # the job's team namespace (a ProvisioningRequest and its PodTemplate live there)
    pool: str
    nodes: int
    gpu_model: str
    gpus_per_node: int
    placement_group: bool  # all nodes in one placement group / under one leaf (a gang's)
    autoscaler: str  # "cluster-autoscaler" | "karpenter" | "simulated" (the pool's, AutoscaledPool.autoscaler)
    provisioning_class: str = ""  # the ProvisioningRequest class (Cluster Autoscaler / GKE); "" for Karpenter
    node_selector: Mapping[str, str] = field(default_factory=dict)  # labels that pick the pool's nodes
    price_per_gpu_hour: float = 0.0  # the simulated fleet's new nodes carry it
    # The class's own parameters, passed as they are (a ProvisioningRequest's spec.parameters: GKE queued
    # provisioning's maxRunDurationSeconds, atomic-scale-up's ValidUntilSeconds); empty: none.
    provisioning_parameters: Mapping[str, str] = field(default_factory=dict)


@runtime_checkable
class ProvisioningGateway(Protocol):
    """Optional: a gateway whose cluster can grow and shrink through an autoscaler (docs/scheduling-rules.md §9).

    - :meth:`nodes_request` asks for ``request.nodes`` nodes for one job, all or none; it returns at once, and the
      request's progress is reported in :attr:`Observation.node_requests` until :meth:`nodes_request_withdraw`.
      Asking again with an id it already holds does nothing (idempotent).
    - :meth:`nodes_request_withdraw` gives a request up (failed, timed out, or no longer needed) and forgets it;
      nodes it already brought stay until released. An unknown id does nothing.
    - :meth:`node_release` gives one autoscaled node back: it is cordoned at once (nothing new lands on it) and the
      autoscaler removes it as it does (Cluster Autoscaler: scale-down of an empty node; Karpenter: the NodeClaim's
      deletion). A node that no longer exists does nothing.

    Errors as every gateway method: GatewayRetryable, GatewayConflict.
    """

    def nodes_request(self, *, request: NodeRequestSpec) -> None: ...

    def nodes_request_withdraw(self, *, request: str, namespace: str) -> None: ...

    def node_release(self, *, node: str) -> None: ...


@dataclass(frozen=True, slots=True)
class JobWaiting:
    """Why a pending job waits, as the cycle explained it (:class:`RecordingGateway`)."""

    job: str
    namespace: str
    reason: str  # the explanation the portal shows (it changes with the queue position)
    kind: BlockerKind | None = None  # what blocks it (the plan's ``Waiting.blocker``)


@runtime_checkable
class RecordingGateway(Protocol):
    """Optional: a gateway that records on the cluster why the scheduler acts (Kubernetes: Events on the pods).

    - :meth:`job_preempt` is :meth:`ClusterGateway.job_evict` for the sake of job ``by``; the loop calls it instead
      of ``job_evict`` when the plan names the job an eviction makes room for.
    - :meth:`jobs_waiting` is told, once per cycle after the cycle's operations, every job still waiting and why;
      the gateway decides what is worth recording (only changes, rate-limited).

    Recording is best effort: a failure to record is logged and never fails the operation it records. A backend
    whose cluster has nowhere to record (the simulated fleet: the portal shows it all) does not implement it.
    """

    def job_preempt(self, *, job: str, namespace: str, grace_s: float, reason: str, by: str) -> None: ...

    def jobs_waiting(self, *, waiting: Sequence[JobWaiting]) -> None: ...


def device_check(where: str, device: Device, layout: MigLayout, held: set[tuple[int, int | None]]) -> None:
    """Raise :class:`~scheduler.errors.GatewayConflict` unless ``device`` can be given out on its GPU.

    ``layout`` is the GPU's current MIG layout (empty: MIG off); ``held`` the ``(gpu, mig_start)`` pairs other
    jobs hold on the node (``mig_start`` None for a whole GPU). The rule every backend shares: a partitioned GPU
    has no whole GPU to give, a held device is not given twice, and a MIG instance must exist in the layout.
    """
    busy = {start for gpu, start in held if gpu == device.gpu}
    if device.mig_profile is None:
        if layout:
            raise GatewayConflict(f"{where} is partitioned with MIG; it has no whole GPU to give")
        if busy:
            raise GatewayConflict(f"{where} is held by another job")
        return
    if (device.mig_profile, device.mig_start) not in layout:
        raise GatewayConflict(f"{where} has no MIG instance {device.mig_profile}@{device.mig_start}")
    if device.mig_start in busy or None in busy:
        raise GatewayConflict(f"{where} {device.mig_profile}@{device.mig_start} is held by another job")
