"""Autoscaled pools, the node requests asked of them, and the cluster's on-demand budget (the engine's side
is scheduler/core/model/provisioning.py, the rules in docs/scheduling-rules.md §9).

An *autoscaled pool* is a pool of on-demand nodes an autoscaler can grow: a Cluster Autoscaler node group behind a
``ProvisioningRequest`` class, a Karpenter NodePool, or the simulated fleet's own. A platform admin keeps them in the
admin; the loop offers each enabled one to the engine (:mod:`scheduler.bridge.provisioning`) and records each
*node request* the engine asks of one (:mod:`scheduler.loop.provisioning`) before the gateway is asked.

Imported by :mod:`scheduler.models`, so the models here are the scheduler app's.
"""

from __future__ import annotations

from decimal import Decimal

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from scheduler.core import default_arrival_s
from scheduler.core.model.vocabulary import Fabric, Interconnect, choices_of
from scheduler.models import GpuModel
from scheduler.pool_labels import POOL_LABELS

# The ProvisioningRequest class a Cluster Autoscaler pool asks through unless the admin says otherwise: all of a
# request's nodes or none (a gang needs every node at once). kubernetes/autoscaler,
# cluster-autoscaler/apis/provisioningrequest/autoscaling.x-k8s.io/v1/types.go
# (ProvisioningClassBestEffortAtomicScaleUp).
BEST_EFFORT_ATOMIC = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
CHECK_CAPACITY = "check-capacity.autoscaling.x-k8s.io"
QUEUED_PROVISIONING = "queued-provisioning.gke.io"  # GKE's queued provisioning (docs/deploy.md)
# A ProvisioningRequest's parameters: at most 100, each value at most 255 characters (types.go Parameters,
# Parameter's MaxLength).
MAX_PARAMETERS, MAX_PARAMETER_LENGTH = 100, 255


class Autoscaler(models.TextChoices):
    CLUSTER_AUTOSCALER = "cluster-autoscaler", "Cluster Autoscaler (ProvisioningRequest)"
    KARPENTER = "karpenter", "Karpenter (NodePool)"
    SIMULATED = "simulated", "simulated fleet"


class AutoscaledPool(models.Model):
    """A pool of on-demand nodes of one type that an autoscaler adds on request (module doc)."""

    name = models.SlugField(max_length=50, unique=True, help_text="Names the pool; its nodes carry it.")
    autoscaler = models.CharField(max_length=24, choices=Autoscaler.choices, default=Autoscaler.CLUSTER_AUTOSCALER)
    provisioning_class = models.CharField(
        max_length=253,
        blank=True,
        default=BEST_EFFORT_ATOMIC,
        help_text=(
            f"The ProvisioningRequest class (Cluster Autoscaler, GKE); empty for Karpenter. {QUEUED_PROVISIONING} for "
            "a GKE node pool created with queued provisioning."
        ),
    )
    provisioning_parameters = models.JSONField(
        default=dict,
        blank=True,
        help_text=(
            "The class's own parameters, passed as they are, e.g. "
            '{"maxRunDurationSeconds": "86400"} (GKE queued provisioning: how long its nodes may run) or '
            '{"ValidUntilSeconds": "1800"} (atomic-scale-up: how long it retries). Empty: none.'
        ),
    )
    node_selector = models.JSONField(
        default=dict,
        blank=True,
        help_text=(
            "The node labels that pick the pool's nodes: its autoscaler's pool label valued with the pool's name, "
            'e.g. {"karpenter.sh/nodepool": "h100-od"} or {"cloud.google.com/gke-nodepool": "h100-od"}.'
        ),
    )
    gpu_model = models.ForeignKey(GpuModel, on_delete=models.PROTECT, related_name="autoscaled_pools")
    gpus_per_node = models.PositiveSmallIntegerField(validators=[MinValueValidator(1), MaxValueValidator(16)])
    interconnect = models.CharField(max_length=16, choices=choices_of(Interconnect), default=Interconnect.NVSWITCH)
    fabric = models.CharField(max_length=24, choices=choices_of(Fabric), default=Fabric.TCP)
    placement_group = models.BooleanField(
        default=False, help_text="One request's nodes share one placement group (one leaf): a gang may span them."
    )
    price_per_gpu_hour = models.DecimalField(
        max_digits=10,
        decimal_places=4,
        null=True,
        blank=True,
        validators=[MinValueValidator(Decimal(0))],
        help_text="Empty: the price catalog's on-demand price for the GPU model.",
    )
    max_nodes = models.PositiveIntegerField(
        validators=[MinValueValidator(1)], help_text="The pool's ceiling: its nodes plus the nodes asked for."
    )
    arrival_s = models.FloatField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1.0)],
        help_text=(
            "Seconds from a request to nodes ready, until the pool has history of its own; empty: the documented "
            "default for its GPU model (docs/benchmarks/cost.md, The provisioning model: about 527 s)."
        ),
    )
    enabled = models.BooleanField(default=True, help_text="Off: no new request is asked of the pool.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(autoscaler__in=[v.value for v in Autoscaler]), name="autoscaledpool_autoscaler_valid"
            ),
            models.CheckConstraint(
                condition=Q(gpus_per_node__gte=1) & Q(gpus_per_node__lte=16), name="autoscaledpool_gpus_range"
            ),
            models.CheckConstraint(condition=Q(max_nodes__gte=1), name="autoscaledpool_max_nodes_positive"),
            models.CheckConstraint(
                condition=Q(price_per_gpu_hour__isnull=True) | Q(price_per_gpu_hour__gte=0),
                name="autoscaledpool_price_non_negative",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        errors: dict[str, str] = {}
        selector = self.node_selector
        if not isinstance(selector, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in selector.items()
        ):
            errors["node_selector"] = (
                'Node labels must be an object of strings, e.g. {"karpenter.sh/nodepool": "h100-od"}.'
            )
        if self.autoscaler == Autoscaler.KARPENTER and self.provisioning_class:
            errors["provisioning_class"] = (
                "Karpenter takes no ProvisioningRequest class: leave it empty (its NodePool is picked by the node "
                "labels)."
            )
        parameters_error = self._parameters_error()
        if parameters_error:
            errors["provisioning_parameters"] = parameters_error
        if self.autoscaler == Autoscaler.CLUSTER_AUTOSCALER and not self.provisioning_class:
            errors["provisioning_class"] = (
                f"The Cluster Autoscaler needs a ProvisioningRequest class: {BEST_EFFORT_ATOMIC} (all nodes or none) "
                f"or {CHECK_CAPACITY} (or {QUEUED_PROVISIONING} for a GKE node pool with queued provisioning)."
            )
        if self.autoscaler in (Autoscaler.CLUSTER_AUTOSCALER, Autoscaler.KARPENTER) and not selector:
            errors["node_selector"] = (
                "Give the node labels that pick the pool's nodes (the autoscaler's node group or NodePool): without "
                "them its nodes cannot be told from others."
            )
        elif self._kubernetes_pool_unnamed(errors):
            errors["node_selector"] = (
                f"Pick the pool's nodes by the label their autoscaler puts on them, valued with the pool's name "
                f'{self.name!r}: e.g. {{"karpenter.sh/nodepool": "{self.name}"}} (Karpenter) or '
                f'{{"cloud.google.com/gke-nodepool": "{self.name}"}} (GKE); one of {", ".join(POOL_LABELS)}. '
                "Microcosm knows a node's pool by that label, so name the pool after the NodePool or node group."
            )
        if errors:
            raise ValidationError(errors)

    def _parameters_error(self) -> str:
        """What is wrong with ``provisioning_parameters`` ("" nothing): strings only, within the API's bounds, and for
        a ProvisioningRequest class only."""
        parameters = self.provisioning_parameters
        if not parameters:
            return ""
        if not isinstance(parameters, dict) or not all(
            isinstance(k, str) and k and isinstance(v, str) for k, v in parameters.items()
        ):
            return 'Parameters must be an object of strings, e.g. {"maxRunDurationSeconds": "86400"}.'
        if self.autoscaler != Autoscaler.CLUSTER_AUTOSCALER:
            return "Only a ProvisioningRequest class takes parameters: leave them empty for this autoscaler."
        if len(parameters) > MAX_PARAMETERS:
            return f"A ProvisioningRequest takes at most {MAX_PARAMETERS} parameters."
        long = sorted(k for k, v in parameters.items() if len(v) > MAX_PARAMETER_LENGTH)
        if long:
            return f"A parameter's value is at most {MAX_PARAMETER_LENGTH} characters: {', '.join(long)}."
        return ""

    def _kubernetes_pool_unnamed(self, errors: dict[str, str]) -> bool:
        """On Kubernetes a node's pool is the value of its autoscaler's own label (POOL_LABELS,
        scheduler.pool_labels ``pool_of``): a pool whose labels do not name it so would never see its
        nodes arrive, nor count them against its ceiling."""
        if self.autoscaler not in (Autoscaler.CLUSTER_AUTOSCALER, Autoscaler.KARPENTER) or "node_selector" in errors:
            return False
        return not any(self.node_selector.get(label) == self.name for label in POOL_LABELS)

    @property
    def arrival_default_s(self) -> float:
        """Seconds from a request to nodes ready when the pool has no history: its own default, else the documented
        one for its GPU model (scheduler.core.default_arrival_s)."""
        return float(self.arrival_s) if self.arrival_s else default_arrival_s(self.gpu_model.name)


class NodeRequestStatus(models.TextChoices):
    """Where a node request stands, as the loop records it (the gateway's NodeRequestState, and the loop's own
    outcomes: withdrawn, timed out, fulfilled)."""

    PENDING = "pending"  # asked; no node yet
    PROVISIONED = "provisioned"  # the autoscaler has the nodes coming or there
    FULFILLED = "fulfilled"  # every node it brought is in the inventory: ordinary on-demand nodes now
    FAILED = "failed"  # the autoscaler gave up (a stockout, a quota): withdrawn at the gateway
    REVOKED = "revoked"  # capacity provisioned earlier was taken back: withdrawn at the gateway
    WITHDRAWN = "withdrawn"  # the engine gave it up (its job no longer needs it)
    TIMED_OUT = "timed-out"  # not provisioned within SCHEDULER["node_request_timeout_s"]: withdrawn


# Rows the gateway may still hold and the engine counts as capacity coming.
IN_FLIGHT = (NodeRequestStatus.PENDING, NodeRequestStatus.PROVISIONED)
# Rows a job asks again after (Policy.provision_retry_s).
FAILURES = (NodeRequestStatus.FAILED, NodeRequestStatus.REVOKED, NodeRequestStatus.TIMED_OUT)
# Rows given up.
GIVEN_UP = (*FAILURES, NodeRequestStatus.WITHDRAWN)
# Rows done with: one the gateway still reports is withdrawn (a fulfilled one's nodes stay).
SETTLED = (*GIVEN_UP, NodeRequestStatus.FULFILLED)


class NodeRequest(models.Model):
    """Nodes asked of an autoscaled pool for one job (a plan's ``Provision``), recorded before the gateway is asked.

    The engine's id of a request (``NodeRequestSpec.id``) is its primary key as a string."""

    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="node_requests")
    pool = models.ForeignKey(AutoscaledPool, on_delete=models.PROTECT, related_name="node_requests")
    nodes = models.PositiveSmallIntegerField(validators=[MinValueValidator(1)])
    gpus_per_node = models.PositiveSmallIntegerField(validators=[MinValueValidator(1), MaxValueValidator(16)])
    placement_group = models.BooleanField(default=False)
    gpu_hours = models.DecimalField(
        max_digits=12,
        decimal_places=3,
        validators=[MinValueValidator(Decimal(0))],
        help_text="What the request charges the day's on-demand budget until its nodes bill.",
    )
    state = models.CharField(max_length=16, choices=NodeRequestStatus.choices, default=NodeRequestStatus.PENDING)
    requested_at = models.DateTimeField()
    state_since = models.DateTimeField()
    arrives_at = models.DateTimeField(help_text="The estimate when it was asked.")
    provisioned_at = models.DateTimeField(
        null=True, blank=True, help_text="When the autoscaler said its nodes were there: the pool's arrival history."
    )
    message = models.CharField(max_length=500, blank=True, help_text="The autoscaler's or the loop's words.")
    node_names = models.JSONField(default=list, blank=True, help_text="The nodes it brought, as the autoscaler said.")

    class Meta:
        ordering = ["-requested_at", "-id"]
        indexes = [
            models.Index(fields=["state"], name="noderequest_state"),
            models.Index(fields=["job", "requested_at"], name="noderequest_job_requested"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(state__in=[v.value for v in NodeRequestStatus]), name="noderequest_state_valid"
            ),
            models.CheckConstraint(condition=Q(nodes__gte=1), name="noderequest_nodes_positive"),
            models.CheckConstraint(condition=Q(gpu_hours__gte=0), name="noderequest_gpu_hours_non_negative"),
        ]

    def __str__(self) -> str:
        return f"node request {self.pk}: {self.nodes} × {self.pool_id} for job {self.job_id} ({self.state})"

    @property
    def in_flight(self) -> bool:
        return self.state in IN_FLIGHT


class OnDemandBudget(models.Model):
    """The whole cluster's on-demand budget: GPU-hours of autoscaled node time a UTC day (one row; each team's own is
    the team's ``on_demand_gpu_hours_per_day``, teams.Team).

    In GPU-hours rather than money: the engine weighs a request against it in the unit it plans in (a request's
    nodes × GPUs × expected hours, ``Provision.gpu_hours``), and a budget in GPU-hours keeps its meaning when the
    price catalog changes; finance sees the money in the ledger (docs/billing.md)."""

    name = models.CharField(max_length=32, unique=True, default="cluster", editable=False)
    gpu_hours_per_day = models.DecimalField(
        max_digits=12,
        decimal_places=3,
        null=True,
        blank=True,
        validators=[MinValueValidator(Decimal(0))],
        help_text="Empty: no cluster-wide budget (each team's own still applies).",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "on-demand budget"
        constraints = [
            models.CheckConstraint(
                condition=Q(gpu_hours_per_day__isnull=True) | Q(gpu_hours_per_day__gte=0),
                name="ondemandbudget_non_negative",
            )
        ]

    def __str__(self) -> str:
        limit = "none" if self.gpu_hours_per_day is None else f"{self.gpu_hours_per_day} GPU-h a day"
        return f"cluster on-demand budget: {limit}"
