"""The fleet inventory: GPU models, nodes and their GPUs with MIG layouts."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any, NamedTuple

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q, QuerySet

from scheduler.core.gpus.catalog import GPU_CLASSES, LayoutError, validate_layout
from scheduler.core.model.vocabulary import CapacityTier, Fabric, Interconnect, NodeState, NodeStateSource, choices_of
from scheduler.gateways.protocol import Interruption, MigStatus, NodeObservation


class GpuModel(models.Model):
    name = models.CharField(max_length=64, unique=True, help_text="e.g. H100-SXM5-80GB")
    gpu_class = models.CharField(max_length=16, choices=[(c, c) for c in GPU_CLASSES])
    memory_mib = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    mig_capable = models.BooleanField(default=False)

    class Meta:
        ordering = ["name"]
        verbose_name = "GPU model"
        constraints = [
            models.CheckConstraint(condition=Q(memory_mib__gte=1), name="gpumodel_memory_positive"),
            models.CheckConstraint(condition=Q(gpu_class__in=list(GPU_CLASSES)), name="gpumodel_class_valid"),
        ]

    def __str__(self) -> str:
        return self.name


def admin_holds(*, state: str, source: str) -> bool:
    """An admin's cordon or drain: it holds until an admin marks the node ready. Only an admin cordons; a drain is
    an admin's unless a notice set it (a notice's drain ends with the notice)."""
    return state == NodeState.CORDONED or (state == NodeState.DRAINING and source == NodeStateSource.ADMIN)


class Node(models.Model):
    name = models.CharField(max_length=253, unique=True)
    gpu_model = models.ForeignKey(GpuModel, on_delete=models.PROTECT, related_name="nodes")
    gpu_count = models.PositiveSmallIntegerField(validators=[MinValueValidator(1), MaxValueValidator(16)])
    interconnect = models.CharField(max_length=16, choices=choices_of(Interconnect))
    leaf_switch = models.CharField(max_length=100, blank=True)
    spine = models.CharField(max_length=100, blank=True)
    tier = models.CharField(max_length=16, choices=choices_of(CapacityTier))
    price_per_gpu_hour = models.DecimalField(
        max_digits=10, decimal_places=4, validators=[MinValueValidator(Decimal(0))]
    )
    zone = models.CharField(max_length=100, blank=True)
    fabric = models.CharField(
        max_length=24,
        choices=choices_of(Fabric),
        default=Fabric.TCP,
        help_text="The network a gang spanning this node and others talks over (tcp: no fabric).",
    )
    fabric_devices = models.PositiveSmallIntegerField(
        default=0, help_text="Fabric devices (EFA interfaces, RDMA NICs, GPU NICs) the node offers; 0 without one."
    )
    placement_group = models.CharField(
        max_length=253, blank=True, help_text="The cloud placement group (or cluster network block) of the node."
    )
    state = models.CharField(max_length=16, choices=choices_of(NodeState), default=NodeState.READY)
    # Who set the state and why (Slurm's Reason=): an admin's cordon or drain holds until an admin lifts it; the
    # cluster sync changes only states it or a notice set (scheduler.node_states, docs/node-states.md).
    state_source = models.CharField(max_length=16, choices=choices_of(NodeStateSource), default=NodeStateSource.CLUSTER)
    state_reason = models.CharField(max_length=200, blank=True, help_text="Why the node is in its state.")
    state_changed_at = models.DateTimeField(null=True, blank=True)
    labels = models.JSONField(default=dict, blank=True, help_text="Kubernetes node labels as observed.")
    # An autoscaled node (scheduler.autoscaled): the pool that added it, the request that asked for it (billed from
    # the request: docs/billing.md), when it last became empty, and when Microcosm gave it back (its cost stops).
    pool = models.CharField(
        max_length=50, blank=True, default="", help_text="The autoscaled pool that added the node; empty: none."
    )
    node_request = models.ForeignKey(
        "scheduler.NodeRequest", on_delete=models.SET_NULL, null=True, blank=True, related_name="nodes_brought"
    )
    idle_since = models.DateTimeField(
        null=True, blank=True, help_text="An autoscaled node: since when it has held no work (empty: it holds some)."
    )
    released_at = models.DateTimeField(
        null=True, blank=True, help_text="An autoscaled node: when it was given back to its pool (its cost stops)."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=Q(gpu_count__gte=1) & Q(gpu_count__lte=16), name="node_gpu_count_range"),
            models.CheckConstraint(condition=Q(price_per_gpu_hour__gte=0), name="node_price_non_negative"),
            models.CheckConstraint(
                condition=Q(interconnect__in=[v.value for v in Interconnect]), name="node_interconnect_valid"
            ),
            models.CheckConstraint(condition=Q(tier__in=[v.value for v in CapacityTier]), name="node_tier_valid"),
            models.CheckConstraint(condition=Q(state__in=[v.value for v in NodeState]), name="node_state_valid"),
            models.CheckConstraint(
                condition=Q(state_source__in=[v.value for v in NodeStateSource]), name="node_state_source_valid"
            ),
            models.CheckConstraint(condition=Q(fabric__in=[v.value for v in Fabric]), name="node_fabric_valid"),
            # TCP is the absence of a fabric, so it has no fabric devices to request.
            models.CheckConstraint(
                condition=~Q(fabric=Fabric.TCP.value) | Q(fabric_devices=0), name="node_tcp_without_fabric_devices"
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def held_closed(self) -> bool:
        """Closed to new work by an admin, whatever the cluster says (:func:`admin_holds`)."""
        return admin_holds(state=self.state, source=self.state_source)

    def observation(
        self, *, schedulable: bool, interruption: Interruption | None = None, mig_status: MigStatus | None = None
    ) -> NodeObservation:
        """This row as a cluster reports the node (the GPUs prefetched): :func:`node_observation`."""
        layouts = {gpu.index: gpu.mig_layout for gpu in self.gpus.all()}
        return node_observation(
            self.facts(), layouts, schedulable=schedulable, interruption=interruption, mig_status=mig_status
        )

    def facts(self) -> NodeFacts:
        """This row as :func:`node_facts` reads it (the GPU model loaded)."""
        return NodeFacts(
            pk=self.pk,
            name=self.name,
            gpu_model=self.gpu_model.name,
            gpu_count=self.gpu_count,
            interconnect=self.interconnect,
            tier=self.tier,
            leaf_switch=self.leaf_switch,
            spine=self.spine,
            zone=self.zone,
            price_per_gpu_hour=self.price_per_gpu_hour,
            labels=self.labels,
            fabric=self.fabric,
            fabric_devices=self.fabric_devices,
            placement_group=self.placement_group,
            state=self.state,
            state_source=self.state_source,
            pool=self.pool,
        )

    def clean(self) -> None:
        if not isinstance(self.labels, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in self.labels.items()
        ):
            raise ValidationError({"labels": 'Labels must be an object of strings, e.g. {"zone": "a"}.'})


class NodeFacts(NamedTuple):
    """What a node's observation reads of its inventory row (:func:`node_observation`), as a value tuple: a cycle
    reads every node, and a model instance costs several times a tuple to load."""

    pk: int
    name: str
    gpu_model: str  # the GPU model's name
    gpu_count: int
    interconnect: str
    tier: str
    leaf_switch: str
    spine: str
    zone: str
    price_per_gpu_hour: Decimal
    labels: dict[str, str]
    fabric: str
    fabric_devices: int
    placement_group: str
    state: str
    state_source: str
    pool: str

    @property
    def held_closed(self) -> bool:
        """As :attr:`Node.held_closed`."""
        return admin_holds(state=self.state, source=self.state_source)


# The columns of NodeFacts, in its order: the GPU model's name through its relation.
_NODE_FACTS_COLUMNS = tuple("gpu_model__name" if name == "gpu_model" else name for name in NodeFacts._fields)


def node_facts(nodes: QuerySet[Node]) -> list[NodeFacts]:
    """``nodes`` as value tuples, in the query's order."""
    return [NodeFacts._make(row) for row in nodes.values_list(*_NODE_FACTS_COLUMNS)]


def gpu_layouts() -> dict[int, dict[int, list[list[Any]]]]:
    """Node id → GPU index → its MIG layout as stored (``[[profile, start], ...]``), for every GPU with MIG
    instances: a GPU left out has none (MIG off), as :func:`node_observation` reads a missing index."""
    layouts: dict[int, dict[int, list[list[Any]]]] = {}
    rows = Gpu.objects.exclude(mig_layout=[]).order_by().values_list("node_id", "index", "mig_layout")
    for node_id, index, layout in rows:
        layouts.setdefault(node_id, {})[index] = layout
    return layouts


def node_observation(
    node: NodeFacts,
    layouts: Mapping[int, Iterable[Iterable[Any]]],
    *,
    schedulable: bool,
    interruption: Interruption | None = None,
    mig_status: MigStatus | None = None,
) -> NodeObservation:
    """``node`` as a cluster reports it, ``layouts`` its GPUs' as stored (GPU index → ``[[profile, start], ...]``):
    its layouts, labels, price and fabric as recorded; whether it takes new work, a notice and a MIG
    reconfiguration in flight are the caller's to say."""
    mig = {index: tuple((str(p), int(s)) for p, s in layout) for index, layout in layouts.items()}
    return NodeObservation(
        name=node.name,
        gpu_model=node.gpu_model,
        gpu_count=node.gpu_count,
        interconnect=node.interconnect,
        tier=node.tier,
        leaf=node.leaf_switch,
        spine=node.spine,
        zone=node.zone,
        mig=tuple(mig.get(index, ()) for index in range(node.gpu_count)),
        schedulable=schedulable,
        interruption=interruption,
        mig_status=mig_status or MigStatus(),
        price_per_gpu_hour=float(node.price_per_gpu_hour),
        labels=dict(node.labels),
        fabric=node.fabric,
        fabric_devices=node.fabric_devices,
        placement_group=node.placement_group,
        pool=node.pool,
    )


class Gpu(models.Model):
    """One physical GPU; ``mig_layout`` lists its MIG instances as ``[profile, start]`` pairs (empty: no MIG)."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField(validators=[MaxValueValidator(15)])
    mig_layout = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["node__name", "index"]
        verbose_name = "GPU"
        constraints = [
            models.UniqueConstraint(fields=["node", "index"], name="gpu_unique_node_index"),
            models.CheckConstraint(condition=Q(index__lte=15), name="gpu_index_range"),
        ]

    def __str__(self) -> str:
        return f"{self.node.name}/{self.index}"

    def clean(self) -> None:
        # The node may be assigned but not saved yet (a GPU added together with its node): validate anyway.
        node: Node | None = self.node if (self.node_id is not None or "node" in self._state.fields_cache) else None
        if node is None:
            return
        if self.index is not None and self.index >= node.gpu_count:
            raise ValidationError({"index": f"{node.name} has {node.gpu_count} GPUs: use an index below that."})
        try:
            validate_layout(node.gpu_model.name, self.mig_layout or [])
        except LayoutError as exc:
            raise ValidationError({"mig_layout": str(exc)}) from None


# --- The scheduling loop's own state ----------------------------------------------------------------------


class SchedulerFence(models.Model):
    """The highest fencing token that has recorded decisions (one row per lock name).

    A cycle records its plan only if its token is at least this one (and then raises it): a cycle whose lock
    lease expired mid-cycle, so that a newer cycle got a higher token, cannot write stale decisions.
    """

    name = models.CharField(max_length=64, unique=True)
    token = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.name}: {self.token}"


class UtilizationSample(models.Model):
    """How busy one node's GPUs were over ``[at - interval_s, at)``: the portal's utilization graphs."""

    at = models.DateTimeField()
    interval_s = models.FloatField(validators=[MinValueValidator(0.0)])
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="utilization_samples")
    gpu_class = models.CharField(max_length=16)
    gpus = models.FloatField(help_text="Capacity in GPU-equivalents.")
    allocated_gpus = models.FloatField(help_text="GPU-equivalents held by running work.")
    busy_ratio = models.FloatField(help_text="0–1: engine activity averaged over the capacity.")

    class Meta:
        ordering = ["-at", "node_id"]
        indexes = [
            models.Index(fields=["gpu_class", "at"], name="utilization_class_at"),
            models.Index(fields=["node", "at"], name="utilization_node_at"),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(busy_ratio__gte=0) & Q(busy_ratio__lte=1), name="utilization_ratio"),
            models.CheckConstraint(condition=Q(allocated_gpus__gte=0), name="utilization_allocated_non_negative"),
        ]

    def __str__(self) -> str:
        return f"{self.node_id} {self.gpu_class} {self.busy_ratio:.0%} at {self.at:%H:%M:%S}"


class SimulatedPod(models.Model):
    """One replica of a job on the simulated fleet: what a pod is on a real cluster.

    Times are real (wall-clock) datetimes; work is in virtual seconds (``settings.SCHEDULER["simulated_speed"]``
    virtual seconds per real second).
    """

    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="simulated_pods")
    replica = models.PositiveSmallIntegerField()
    # The start of the job's replicas this pod belongs to (``Allocation.generation`` of the jobs app): a move
    # starts the next generation beside the current one, which is released once the new pods are ready.
    generation = models.PositiveSmallIntegerField(default=0)
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="simulated_pods")
    devices = models.JSONField(default=list, help_text="[[gpu, mig_profile or null, mig_start or null], ...]")
    namespace = models.CharField(max_length=63)
    bound_at = models.DateTimeField()
    work_start_s = models.FloatField(default=0.0, help_text="Virtual seconds of work done before this run.")
    duration_s = models.FloatField(null=True, blank=True, help_text="Total work; None runs until stopped.")
    checkpoint_interval_s = models.FloatField(null=True, blank=True)
    checkpoint_dir = models.CharField(max_length=255, blank=True, help_text="CHECKPOINT_DIR of the job's pods.")
    stop_requested_at = models.DateTimeField(
        null=True, blank=True, help_text="When the pod got SIGTERM (an eviction with a grace): it works no more."
    )
    exits_at = models.DateTimeField(null=True, blank=True, help_text="When a stopping pod's process exits.")

    class Meta:
        ordering = ["job_id", "generation", "replica"]
        constraints = [
            models.UniqueConstraint(
                fields=["job", "generation", "replica"], name="simpod_unique_job_generation_replica"
            )
        ]

    def __str__(self) -> str:
        return f"simulated pod {self.job_id}/{self.replica} on {self.node_id}"


class SimulatedNodeState(models.Model):
    """What the simulated cloud does to a node: interruption notices, disappearance, MIG reconfigurations in flight."""

    node = models.OneToOneField(Node, on_delete=models.CASCADE, related_name="simulated_state")
    notice_at = models.DateTimeField(null=True, blank=True, help_text="When a spot interruption notice came.")
    gone_at = models.DateTimeField(null=True, blank=True, help_text="When the node goes (or went) away.")
    back_at = models.DateTimeField(null=True, blank=True, help_text="When a replacement node comes back.")
    mig_desired = models.JSONField(null=True, blank=True, help_text="Per-GPU layouts being applied.")
    mig_since = models.DateTimeField(null=True, blank=True)
    mig_ready_at = models.DateTimeField(null=True, blank=True)
    interruptions_checked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"simulated state of {self.node_id}"


class SimulatedProgress(models.Model):
    """Work a job has saved in checkpoints on the simulated fleet (what survives an eviction)."""

    job = models.OneToOneField("jobs.Job", on_delete=models.CASCADE, related_name="simulated_progress")
    saved_work_s = models.FloatField(default=0.0)
    checkpointed_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"job {self.job_id}: {self.saved_work_s:g} s saved"


class SimulatedNodeRequest(models.Model):
    """A node request the simulated fleet's autoscaler holds (:mod:`scheduler.gateways.simulated.autoscaler`): what a
    ProvisioningRequest object is on a real cluster. Times are real datetimes."""

    request_id = models.CharField(max_length=64, unique=True, help_text="NodeRequestSpec.id")
    job = models.CharField(max_length=64)
    namespace = models.CharField(max_length=63)
    pool = models.CharField(max_length=50)
    nodes = models.PositiveSmallIntegerField()
    spec = models.JSONField(default=dict, help_text="The rest of the NodeRequestSpec, as asked.")
    asked_at = models.DateTimeField()
    ready_at = models.DateTimeField(help_text="When its nodes join (or it fails, when it finds no capacity).")
    fails = models.CharField(max_length=300, blank=True, help_text="Why it will fail when due; empty: it will not.")
    state = models.CharField(max_length=16, default="pending")
    message = models.CharField(max_length=300, blank=True)
    since = models.DateTimeField(null=True, blank=True)
    node_names = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["asked_at", "id"]

    def __str__(self) -> str:
        return f"simulated node request {self.request_id} ({self.state})"


class CycleStats(models.Model):
    """The scheduling loop's running totals since it was installed (one row per loop, like :class:`SchedulerFence`).

    Each cycle adds to them (:mod:`scheduler.loop.stats`) and ``/metrics`` reads them at scrape time
    (:mod:`portal.metrics`): the cycle runs in a Celery worker and the endpoint in a web pod, so the database is
    the one place both see. Totals only ever grow, so Prometheus reads them as counters; the row stays the same
    size however long the loop runs.
    """

    name = models.CharField(max_length=64, unique=True)
    cycles = models.BigIntegerField(default=0, help_text="Cycles that ran to the end.")
    last_success_at = models.DateTimeField(null=True, blank=True, help_text="When the last such cycle ended.")
    phases = models.JSONField(
        default=dict, blank=True, help_text='Per phase: {"count": n, "sum": seconds, "buckets": [cumulative counts]}.'
    )
    decisions = models.JSONField(default=dict, blank=True, help_text="Decisions recorded, per kind.")
    mig_in_flight = models.JSONField(
        default=dict, blank=True, help_text='MIG changes the last cycle saw in flight: {node: {"state", "since"}}.'
    )
    mig_outcomes = models.JSONField(default=dict, blank=True, help_text="MIG changes seen to end, per outcome.")
    notices = models.JSONField(
        default=dict, blank=True, help_text="Interruption notices the last cycle saw: {node: noticed_at}."
    )
    spot_interruptions = models.BigIntegerField(default=0, help_text="Interruption notices seen, each once.")
    eta_errors = models.JSONField(
        default=dict, blank=True, help_text="Start-estimate errors of the jobs that waited, as a phase's histogram."
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "cycle statistics"
        verbose_name_plural = "cycle statistics"
        constraints = [
            models.CheckConstraint(condition=Q(cycles__gte=0), name="cyclestats_cycles_non_negative"),
            models.CheckConstraint(
                condition=Q(spot_interruptions__gte=0), name="cyclestats_spot_interruptions_non_negative"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name}: {self.cycles} cycles"


class EtaHistory(models.Model):
    """The start times the loop has shown a pending job, as they changed: ``[[at, eta or None], ...]`` (Unix times).

    Kept while the job waits for its first start, so that once it starts the error of the estimate it was shown a
    quarter into its wait can be measured (:mod:`scheduler.loop.stats`, the B2 benchmark's ``eta_error``); then
    deleted. Only pending jobs have a row, so the table stays the size of the queue.
    """

    job = models.OneToOneField("jobs.Job", on_delete=models.CASCADE, related_name="eta_history")
    changes = models.JSONField(default=list)

    def __str__(self) -> str:
        return f"start estimates of job {self.job_id}"


# The autoscaled pools, their node requests and the on-demand budget live beside the inventory
# (scheduler.autoscaled); imported here so Django registers them with the app's models, and re-exported.
from scheduler.autoscaled import AutoscaledPool as AutoscaledPool  # noqa: E402
from scheduler.autoscaled import NodeRequest as NodeRequest  # noqa: E402
from scheduler.autoscaled import NodeRequestStatus as NodeRequestStatus  # noqa: E402
from scheduler.autoscaled import OnDemandBudget as OnDemandBudget  # noqa: E402
