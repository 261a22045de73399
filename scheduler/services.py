"""Writes to the fleet inventory: GPU models, nodes and their GPUs.

The inventory is declarative: registering a node states its whole shape (GPU count, MIG layouts, labels),
so registering the same node twice changes nothing and a seed or a gateway sync can call it every time.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from django.db import transaction
from django.db.models import Max

from scheduler.core.catalog import GPU_MODEL_BY_NAME, GPU_MODELS, LayoutError, validate_layout
from scheduler.core.vocabulary import CapacityTier, Fabric, Interconnect, NodeState
from scheduler.errors import InventoryError
from scheduler.gateways.protocol import (
    ClusterGateway,
    MaintainedGateway,
    MigConfigState,
    Observation,
    UtilizationReading,
)
from scheduler.gpu_count import MAX_GPUS_PER_NODE, check_shrink
from scheduler.models import Gpu, GpuModel, Node, UtilizationSample
from scheduler.node_states import node_state_observe

log = logging.getLogger(__name__)

# Kubernetes node names are DNS-1123 subdomains: the inventory must be able to name the real node.
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_MAX_FABRIC_DEVICES = 32767  # Node.fabric_devices is a PositiveSmallIntegerField
_MAX_PRICE = Decimal("999999.9999")  # Node.price_per_gpu_hour is DECIMAL(10, 4)

MigLayouts = Mapping[int, Sequence[Sequence[object]]]


def gpu_models_sync() -> int:
    """Make the GpuModel rows match ``scheduler.core.catalog.GPU_MODELS``; return how many were created.

    Rows for models the catalog no longer lists are left alone: nodes may still point at them (PROTECT).
    """
    created = 0
    with transaction.atomic():
        for spec in GPU_MODELS:
            _, was_created = GpuModel.objects.update_or_create(
                name=spec.name,
                defaults={
                    "gpu_class": spec.gpu_class,
                    "memory_mib": spec.memory_mib,
                    "mig_capable": spec.mig_capable,
                },
            )
            created += was_created
    return created


def node_register(
    *,
    name: str,
    gpu_model: str,
    gpu_count: int,
    interconnect: str,
    leaf_switch: str,
    spine: str,
    tier: str,
    price_per_gpu_hour: Decimal | str | int,
    zone: str = "",
    labels: Mapping[str, str] | None = None,
    mig_layouts: MigLayouts | None = None,
    fabric: str = Fabric.TCP.value,
    fabric_devices: int = 0,
    placement_group: str = "",
) -> Node:
    """Create or update node ``name`` with exactly ``gpu_count`` GPUs (indices 0..n-1); return the node.

    ``gpu_model`` is a catalog name (e.g. ``"H100-SXM5-80GB"``). ``mig_layouts`` maps a GPU index to its
    ``[profile, start]`` pairs; GPUs not listed have MIG off, so the call states every GPU's layout. GPUs
    above a shrunk count are removed. The node's ``state`` is left as it is: that belongs to the gateway.

    Raises :class:`InventoryError` (and writes nothing) for an unknown model, tier or interconnect, a count
    out of range, a negative price, non-string labels, an impossible MIG layout, an unknown fabric, fabric
    devices on a node without a fabric, or a shrink that would drop a GPU a live allocation holds.
    """
    spec = GPU_MODEL_BY_NAME.get(gpu_model)
    if spec is None:
        raise InventoryError(f"unknown GPU model {gpu_model!r}; use one of: {', '.join(GPU_MODEL_BY_NAME)}")
    _check_name(name)
    _check_choice("tier", tier, CapacityTier)
    _check_choice("interconnect", interconnect, Interconnect)
    _check_choice("fabric", fabric, Fabric)
    _check_fabric_devices(Fabric(fabric), fabric_devices)
    if isinstance(gpu_count, bool) or not isinstance(gpu_count, int) or not 1 <= gpu_count <= MAX_GPUS_PER_NODE:
        raise InventoryError(f"gpu_count must be a whole number from 1 to {MAX_GPUS_PER_NODE}, not {gpu_count!r}")
    # Plain strings, so the returned Node holds exactly what a fresh read of the row would.
    tier, interconnect, fabric = CapacityTier(tier).value, Interconnect(interconnect).value, Fabric(fabric).value
    price = _price(price_per_gpu_hour)
    node_labels = _labels(labels)
    layouts = _layouts(gpu_model, gpu_count, mig_layouts or {})

    with transaction.atomic():
        model_row, _ = GpuModel.objects.get_or_create(
            name=spec.name,
            defaults={"gpu_class": spec.gpu_class, "memory_mib": spec.memory_mib, "mig_capable": spec.mig_capable},
        )
        # Lock the node row so two registrations of the same node cannot interleave their GPU edits.
        node = Node.objects.select_for_update().filter(name=name).first()
        if node is not None:
            check_shrink(node, gpu_count)
        values = {
            "gpu_model": model_row,
            "gpu_count": gpu_count,
            "interconnect": interconnect,
            "leaf_switch": leaf_switch,
            "spine": spine,
            "tier": tier,
            "price_per_gpu_hour": price,
            "zone": zone,
            "labels": node_labels,
            "fabric": fabric,
            "fabric_devices": fabric_devices,
            "placement_group": placement_group,
        }
        if node is None:
            node = Node.objects.create(name=name, **values)
        else:
            changed = [field for field, value in values.items() if getattr(node, field) != value]
            for field in changed:
                setattr(node, field, values[field])
            if changed:  # an unchanged node keeps its updated_at, so a re-seed is visibly a no-op
                node.save(update_fields=[*changed, "updated_at"])
        node.gpus.filter(index__gte=gpu_count).delete()
        existing = {gpu.index: gpu for gpu in node.gpus.all()}
        for index in range(gpu_count):
            gpu = existing.get(index)
            if gpu is None:
                Gpu.objects.create(node=node, index=index, mig_layout=layouts[index])
            elif gpu.mig_layout != layouts[index]:
                gpu.mig_layout = layouts[index]
                gpu.save(update_fields=["mig_layout"])
    return node


def _check_name(name: str) -> None:
    if not isinstance(name, str) or len(name) > 253 or not _DNS1123_SUBDOMAIN.match(name):
        raise InventoryError(
            f"{name!r} is not a Kubernetes node name: use at most 253 lowercase letters, digits, '-' and '.', "
            "starting and ending with a letter or digit (e.g. gpu-h100-01)"
        )


def _check_choice(field: str, value: str, enum: type[CapacityTier] | type[Interconnect] | type[Fabric]) -> None:
    allowed = [member.value for member in enum]
    if value not in allowed:
        raise InventoryError(f"unknown {field} {value!r}; use one of: {', '.join(allowed)}")


def _price(value: Decimal | str | int) -> Decimal:
    try:
        # Through str so a float argument keeps the digits its author wrote (3.43, not 3.4300000000000001).
        price = Decimal(str(value)) if not isinstance(value, Decimal) else value
    except InvalidOperation:
        raise InventoryError(f"price_per_gpu_hour {value!r} is not a number") from None
    if not price.is_finite() or price < 0 or price > _MAX_PRICE:
        raise InventoryError(f"price_per_gpu_hour must be between 0 and {_MAX_PRICE} USD, not {value!r}")
    return price.quantize(Decimal("0.0001"))


def _labels(labels: Mapping[str, str] | None) -> dict[str, str]:
    if labels is None:
        return {}
    if not isinstance(labels, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        raise InventoryError('labels must map strings to strings, e.g. {"nvidia.com/gpu.count": "8"}')
    return dict(labels)


def _layouts(model: str, gpu_count: int, mig_layouts: MigLayouts) -> list[list[list[object]]]:
    """One stored layout per GPU index, each validated against the catalog and sorted by start."""
    result: list[list[list[object]]] = [[] for _ in range(gpu_count)]
    for index, layout in mig_layouts.items():
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < gpu_count:
            raise InventoryError(
                f"mig_layouts names GPU {index!r}, but the node has GPUs 0 to {gpu_count - 1}; use an index in range"
            )
        try:
            normalised = validate_layout(model, layout)
        except LayoutError as exc:
            raise InventoryError(f"GPU {index}: {exc}") from None
        # JSON has no tuples: store lists so a re-read compares equal and a re-register is a no-op.
        result[index] = [[profile, start] for profile, start in normalised]
    return result


# --- The cluster as the gateway reports it ----------------------------------------------------------------


@dataclass
class SyncReport:
    """What ``cluster_sync`` saw and changed; ``as_json()`` is what ``cluster sync --json`` prints."""

    nodes: list[dict[str, object]] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # nodes the inventory cannot hold, with the reason

    def as_json(self) -> dict[str, object]:
        return {"nodes": self.nodes, "gone": self.gone, "skipped": self.skipped}


def _check_fabric_devices(fabric: Fabric, devices: int) -> None:
    if isinstance(devices, bool) or not isinstance(devices, int) or not 0 <= devices <= _MAX_FABRIC_DEVICES:
        raise InventoryError(f"fabric_devices must be a whole number from 0 to {_MAX_FABRIC_DEVICES}, not {devices!r}")
    if fabric == Fabric.TCP and devices:
        raise InventoryError(
            f"a node without a fabric (tcp) has no fabric devices, got {devices}: name its fabric or report 0"
        )


def cluster_sync(*, observation: Observation) -> SyncReport:
    """Make the inventory match ``observation``: every observed node registered with its shape and current
    MIG layouts (``node_register``), and its state changed as :func:`scheduler.node_states.observed_change`
    says (draining under an interruption notice, gone when no longer reported; an admin's cordon or drain
    holds), each change saved and audited.

    A node the inventory cannot hold (an unknown GPU model) is skipped and reported, never guessed at.
    """
    report = SyncReport()
    at = datetime.fromtimestamp(observation.observed_at, tz=UTC)
    seen: set[str] = set()
    existing = {node.name: node for node in Node.objects.all()}
    for obs in observation.nodes:
        row = existing.get(obs.name)
        if obs.price_per_gpu_hour is not None:
            price: Decimal = Decimal(str(obs.price_per_gpu_hour))
        else:
            price = row.price_per_gpu_hour if row is not None else Decimal(0)
        try:
            node = node_register(
                name=obs.name,
                gpu_model=obs.gpu_model,
                gpu_count=obs.gpu_count,
                interconnect=obs.interconnect,
                leaf_switch=obs.leaf,
                spine=obs.spine,
                tier=obs.tier,
                price_per_gpu_hour=price,
                zone=obs.zone,
                labels=dict(obs.labels),
                mig_layouts={i: [list(pair) for pair in layout] for i, layout in enumerate(obs.mig) if layout},
                fabric=obs.fabric,
                fabric_devices=obs.fabric_devices,
                placement_group=obs.placement_group,
            )
        except InventoryError as exc:
            report.skipped.append(f"{obs.name}: {exc}")
            continue
        seen.add(node.name)
        notice = obs.interruption.source if obs.interruption is not None else None
        node_state_observe(node=node, reported=True, notice=notice, at=at)
        report.nodes.append(
            {
                "name": node.name,
                "gpu_model": obs.gpu_model,
                "gpus": obs.gpu_count,
                "tier": obs.tier,
                "state": str(node.state),
                "mig": {str(i): [list(p) for p in layout] for i, layout in enumerate(obs.mig) if layout},
                "mig_state": str(obs.mig_status.state),
            }
        )
    observed = {o.name for o in observation.nodes}
    for name, row in sorted(existing.items()):
        if name not in observed and node_state_observe(node=row, reported=False, notice=None, at=at) == NodeState.GONE:
            report.gone.append(name)
    return report


def mig_watch(*, observation: Observation, stuck_after_s: float) -> dict[str, list[str]]:
    """MIG reconfigurations in flight, and those pending longer than ``stuck_after_s`` (the GPU Operator's known wedge,
    ``docs/gpu-facts.md``, MIG Manager reconfiguration flow: the Kubernetes gateway recovers them; here they are
    reported and logged)."""
    pending, stuck = [], []
    for obs in observation.nodes:
        status = obs.mig_status
        if status.state == MigConfigState.SUCCESS:
            continue
        pending.append(obs.name)
        if status.since is not None and observation.observed_at - status.since > stuck_after_s:
            stuck.append(obs.name)
            log.warning(
                "MIG reconfiguration on %s is %s for %.0f s",
                obs.name,
                status.state,
                observation.observed_at - status.since,
            )
    return {"pending": pending, "stuck": stuck}


def cluster_maintain(*, gateway: ClusterGateway, stuck_after_s: float) -> dict[str, Any]:
    """The MIG-watch period's work: let the gateway drive its own in-flight operations one step
    (:class:`~scheduler.gateways.protocol.MaintainedGateway`, e.g. the Kubernetes MIG relabel flow: drain, relabel,
    recover a wedged node, uncordon), then report from a fresh observation the MIG reconfigurations still in flight and
    the stuck ones (:func:`mig_watch`). A gateway without maintenance is only observed.

    Returns ``{"pending": [...], "stuck": [...], "steps": [{"node", "step", "detail"}, ...]}``. Raises what the
    gateway raises (:class:`~scheduler.errors.GatewayError` subclasses); nothing is written to the database.
    """
    steps = gateway.maintain() if isinstance(gateway, MaintainedGateway) else ()
    for event in steps:
        log.info("maintenance on %s: %s %s", event.node, event.step, event.detail)
    report: dict[str, Any] = dict(mig_watch(observation=gateway.observe(), stuck_after_s=stuck_after_s))
    report["steps"] = [{"node": e.node, "step": e.step, "detail": e.detail} for e in steps]
    return report


def utilization_record(*, readings: Sequence[UtilizationReading], at: datetime) -> int:
    """Store one :class:`UtilizationSample` per reading whose node is in the inventory; return how many."""
    nodes = {node.name: node for node in Node.objects.filter(name__in=[r.node for r in readings])}
    last = dict(
        UtilizationSample.objects.filter(node__in=nodes.values())
        .values("node_id")
        .annotate(at=Max("at"))
        .values_list("node_id", "at")
    )
    rows = []
    for reading in readings:
        node = nodes.get(reading.node)
        if node is None:
            continue
        previous = last.get(node.pk)
        rows.append(
            UtilizationSample(
                at=at,
                interval_s=max((at - previous).total_seconds(), 0.0) if previous else 0.0,
                node=node,
                gpu_class=reading.gpu_class,
                gpus=reading.gpus,
                allocated_gpus=max(reading.allocated_gpus, 0.0),
                busy_ratio=min(max(reading.busy_ratio, 0.0), 1.0),
            )
        )
    UtilizationSample.objects.bulk_create(rows)
    return len(rows)
