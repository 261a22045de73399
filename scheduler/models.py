"""The fleet inventory: GPU models, nodes and their GPUs with MIG layouts."""

from __future__ import annotations

from decimal import Decimal

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from scheduler.core.catalog import GPU_CLASSES, LayoutError, validate_layout
from scheduler.core.vocabulary import CapacityTier, Interconnect, NodeState, choices_of


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
    state = models.CharField(max_length=16, choices=choices_of(NodeState), default=NodeState.READY)
    labels = models.JSONField(default=dict, blank=True, help_text="Kubernetes node labels as observed.")
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
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        if not isinstance(self.labels, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in self.labels.items()
        ):
            raise ValidationError({"labels": 'Labels must be an object of strings, e.g. {"zone": "a"}.'})


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
