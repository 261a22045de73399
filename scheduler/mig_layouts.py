"""A GPU's MIG layout in the inventory: the one write that changes it by hand, the refusal to change a layout
whose instances a live allocation holds, and the layout in NVIDIA's notation for people to read.

Any geometry change destroys every MIG instance of the GPU: mig-parted clears all GPU and compute instances,
then creates the new ones; it cannot change a GPU incrementally (docs/gpu-facts.md, MIG Manager reconfiguration
flow; NVIDIA/mig-parted ``pkg/mig/config/config.go``). So a change to a GPU that a live allocation holds — whole
or one instance of it — would evict that work; it is refused, naming the job, instead of evicting it silently.

The scheduler's own reconfigurations take another road (the reconfiguration plan, applied by the gateway, which
drains the GPUs it changes first); both are saves of ``Gpu.mig_layout``, so both are in the audit trail.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from django.db import transaction

from jobs.models import Allocation
from scheduler.core.gpus.catalog import LayoutError, validate_layout
from scheduler.core.sizing.layouts import format_layout
from scheduler.errors import InventoryError
from scheduler.models import Gpu

MIG_OFF = "MIG off"  # an empty layout: the GPU is not partitioned and is scheduled whole

StoredLayout = list[list[object]]  # Gpu.mig_layout: [[profile, start], ...] sorted by start


def layout_text(layout: Iterable[Sequence[object]]) -> str:
    """One GPU's layout in NVIDIA's notation, ``"3g.40gb@0,2g.20gb@4,1g.10gb@6"``, or ``"MIG off"``."""
    return format_layout((str(profile), int(str(start))) for profile, start in layout) or MIG_OFF


def node_layouts_text(layouts: Mapping[int, Sequence[Sequence[object]]], gpu_count: int) -> list[str]:
    """A node's layouts, one line per run of consecutive GPUs that share one: ``"GPU 0–3: 3g.40gb@0,3g.40gb@4"``.

    ``layouts`` maps a GPU index to its stored layout; an index it lacks is MIG off (as ``Node.observation``
    reads it). Eight identical GPUs are one line, so the node list stays narrow."""
    texts = [layout_text(layouts.get(index, [])) for index in range(gpu_count)]
    lines: list[str] = []
    first = 0
    for index in range(1, gpu_count + 1):
        if index == gpu_count or texts[index] != texts[first]:
            span = f"GPU {first}" if index - first == 1 else f"GPU {first}–{index - 1}"
            lines.append(f"{span}: {texts[first]}")
            first = index
    return lines


def gpu_layout_holder(gpu: Gpu) -> Allocation | None:
    """The first live allocation on ``gpu`` (the whole GPU or one of its MIG instances), if any."""
    return (
        Allocation.objects.filter(node_id=gpu.node_id, gpu_index=gpu.index, ended_at__isnull=True)
        .select_related("job__team")
        .order_by("started_at", "pk")
        .first()
    )


def check_unheld(gpu: Gpu) -> None:
    """Raise :class:`InventoryError` naming the job when a live allocation holds ``gpu`` or one of its instances."""
    holder = gpu_layout_holder(gpu)
    if holder is None:
        return
    what = f"MIG instance {holder.mig_profile}@{holder.mig_start}" if holder.mig_profile else "the whole GPU"
    job = holder.job
    raise InventoryError(
        f"GPU {gpu.index} of {gpu.node.name} is in use: job {job.pk} ({job.name}, team {job.team.slug}) "
        f"holds {what}. Changing the layout destroys every MIG instance of the GPU and would evict it; "
        "wait for the job to end or drain the node, then change the layout"
    )


def stored_layout(model: str, layout: Sequence[Sequence[object]]) -> StoredLayout:
    """``layout`` checked against the catalog for GPU ``model`` and in stored form (lists, sorted by start).

    Raises :class:`InventoryError` with the catalog's reason and how to write a layout."""
    try:
        normalised = validate_layout(model, layout)
    except LayoutError as exc:
        raise InventoryError(
            f"{exc}. Write PROFILE@START items, e.g. 3g.40gb@0,3g.40gb@4; leave empty for MIG off"
        ) from None
    # JSON has no tuples: lists, so a re-read compares equal to what was written.
    return [[profile, start] for profile, start in normalised]


def gpu_set_mig_layout(*, gpu: Gpu, layout: Sequence[Sequence[object]]) -> Gpu:
    """Give ``gpu`` the MIG ``layout`` (``[profile, start]`` pairs; empty: MIG off) and return it.

    Raises :class:`InventoryError` and writes nothing when the layout is not valid for the GPU's model or when
    a live allocation holds the GPU (the message names the job). A layout equal to the current one writes
    nothing. The write is a ``save()``, so the audit trail records it with whoever is acting.
    """
    with transaction.atomic():
        # Locked so two saves of one GPU cannot interleave. A cycle planned on the old layout that binds after
        # this write is refused by the gateway (no such MIG instance, scheduler.gateways.protocol) and requeues.
        locked = Gpu.objects.select_for_update().select_related("node__gpu_model").get(pk=gpu.pk)
        wanted = stored_layout(locked.node.gpu_model.name, layout)
        if locked.mig_layout != wanted:
            check_unheld(locked)
            locked.mig_layout = wanted
            locked.save(update_fields=["mig_layout"])
    gpu.mig_layout = wanted
    return gpu
