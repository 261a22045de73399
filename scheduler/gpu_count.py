"""Changing how many GPUs a node has: what the change creates or removes, the refusal to remove a GPU a live
allocation holds, and the write itself (node row and GPU rows together).

``scheduler.services.fleet.node_register`` states a node's whole shape and shares the refusal; the admin changes the
count alone, after showing :func:`gpu_count_change_summary` and asking for confirmation.
"""

from __future__ import annotations

from django.db import transaction

from jobs.models import Allocation
from scheduler.errors import InventoryError
from scheduler.models import Gpu, Node

MAX_GPUS_PER_NODE = 16  # Node.gpu_count's range; a 16-GPU HGX is the largest box we know of


def check_shrink(node: Node, gpu_count: int) -> None:
    """Raise :class:`InventoryError` when shrinking ``node`` to ``gpu_count`` would drop a GPU a live allocation
    holds."""
    held = (
        Allocation.objects.filter(node=node, gpu_index__gte=gpu_count, ended_at__isnull=True)
        .order_by("gpu_index")
        .values_list("gpu_index", flat=True)
        .first()
    )
    if held is not None:
        raise InventoryError(
            f"{node.name} cannot shrink to {gpu_count} GPUs: GPU {held} is held by a running allocation; "
            "drain the node first"
        )


def gpu_count_change_summary(*, name: str, old: int, new: int) -> str:
    """What going from ``old`` to ``new`` GPUs does, in words: which GPU indices it creates or removes."""
    if new == old:
        return f"{name} keeps its {old} GPUs"
    low, high = sorted((old, new))
    span = f"GPU {low}" if high - low == 1 else f"GPUs {low}–{high - 1}"
    count = f"{high - low} GPU{'s' if high - low != 1 else ''}"
    if new > old:
        return f"{name} goes from {old} to {new} GPUs: this creates {span} ({count}, MIG off)"
    return f"{name} goes from {old} to {new} GPUs: this removes {span} ({count}, with their MIG layouts)"


def node_set_gpu_count(*, node: Node, gpu_count: int) -> Node:
    """Give ``node`` exactly ``gpu_count`` GPUs (indices 0..n-1): GPUs above are removed, missing ones created
    with MIG off, GPUs kept keep their layouts. Raises :class:`InventoryError` (and writes nothing) for a count
    out of the model's range or a shrink that would drop a GPU a live allocation holds."""
    if isinstance(gpu_count, bool) or not isinstance(gpu_count, int) or not 1 <= gpu_count <= MAX_GPUS_PER_NODE:
        raise InventoryError(f"gpu_count must be a whole number from 1 to {MAX_GPUS_PER_NODE}, not {gpu_count!r}")
    with transaction.atomic():
        locked = Node.objects.select_for_update().get(pk=node.pk)
        check_shrink(locked, gpu_count)
        if locked.gpu_count != gpu_count:
            locked.gpu_count = gpu_count
            locked.save(update_fields=["gpu_count", "updated_at"])  # a save, not update(): the audit trail sees it
        locked.gpus.filter(index__gte=gpu_count).delete()
        present = set(locked.gpus.values_list("index", flat=True))
        Gpu.objects.bulk_create(Gpu(node=locked, index=i, mig_layout=[]) for i in range(gpu_count) if i not in present)
    node.gpu_count = gpu_count
    return node
