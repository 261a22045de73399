"""Writes to the fleet inventory: GPU models, nodes and their GPUs.

The inventory is declarative: registering a node states its whole shape (GPU count, MIG layouts, labels),
so registering the same node twice changes nothing and a seed or a gateway sync can call it every time.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from decimal import Decimal, InvalidOperation

from django.db import transaction

from scheduler.core.gpus.catalog import GPU_MODEL_BY_NAME, GPU_MODELS, LayoutError, validate_layout
from scheduler.core.model.vocabulary import CapacityTier, Fabric, Interconnect
from scheduler.errors import InventoryError
from scheduler.gpu_count import MAX_GPUS_PER_NODE, check_shrink
from scheduler.models import Gpu, GpuModel, Node

# Kubernetes node names are DNS-1123 subdomains: the inventory must be able to name the real node.
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_MAX_FABRIC_DEVICES = 32767  # Node.fabric_devices is a PositiveSmallIntegerField
_MAX_PRICE = Decimal("999999.9999")  # Node.price_per_gpu_hour is DECIMAL(10, 4)

MigLayouts = Mapping[int, Sequence[Sequence[object]]]


def gpu_models_sync() -> int:
    """Make the GpuModel rows match ``scheduler.core.gpus.catalog.GPU_MODELS``; return how many were created.

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
    pool: str = "",
) -> Node:
    """Create or update node ``name`` with exactly ``gpu_count`` GPUs (indices 0..n-1); return the node.

    ``gpu_model`` is a catalog name (e.g. ``"H100-SXM5-80GB"``). ``mig_layouts`` maps a GPU index to its
    ``[profile, start]`` pairs; GPUs not listed have MIG off, so the call states every GPU's layout. GPUs
    above a shrunk count are removed. The node's ``state`` is left as it is: that belongs to the gateway.

    Raises :class:`InventoryError` (and writes nothing) for an unknown model, tier or interconnect, a count
    out of range, a negative price, non-string labels, an impossible MIG layout, an unknown fabric, fabric
    devices on a node without a fabric, or a shrink that would drop a GPU a live allocation holds. ``pool``: the
    autoscaled pool that added the node (``NodeObservation.pool``; "": none).
    """
    spec = GPU_MODEL_BY_NAME.get(gpu_model)
    if spec is None:
        raise InventoryError(f"unknown GPU model {gpu_model!r}; use one of: {', '.join(GPU_MODEL_BY_NAME)}")
    _check_name(name)
    _check_choice("tier", tier, CapacityTier)
    _check_choice("interconnect", interconnect, Interconnect)
    _check_choice("fabric", fabric, Fabric)
    _check_fabric_devices(Fabric(fabric), fabric_devices)
    if not isinstance(pool, str) or len(pool) > 50:
        raise InventoryError(f"pool must be an autoscaled pool's name of at most 50 characters, not {pool!r}")
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
            "pool": pool,
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


def _check_fabric_devices(fabric: Fabric, devices: int) -> None:
    if isinstance(devices, bool) or not isinstance(devices, int) or not 0 <= devices <= _MAX_FABRIC_DEVICES:
        raise InventoryError(f"fabric_devices must be a whole number from 0 to {_MAX_FABRIC_DEVICES}, not {devices!r}")
    if fabric == Fabric.TCP and devices:
        raise InventoryError(
            f"a node without a fabric (tcp) has no fabric devices, got {devices}: name its fabric or report 0"
        )
