"""Dynamic MIG through DRA: the MIG layout Microcosm keeps for a node whose driver creates MIG devices on allocation.

On a Hopper-or-newer DRA node in the NVIDIA driver's dynamic-MIG mode (KEP-4815 partitionable devices;
kubernetes-sigs/dra-driver-nvidia-gpu ``cmd/gpu-kubelet-plugin/partitions.go``) the driver publishes, per GPU, the
whole GPU and every partition it could create (each profile at each placement), all consuming counters of the GPU's
shared counter set; it creates a partition's MIG instance when a claim allocating it is prepared on the node
(``device_state.go`` ``Prepare`` → ``createMigDevice``) and destroys it at unprepare. The slices do not change when
that happens (``driver.go``: only the passthrough feature republishes after a prepare): the partitions stay
published, and what is in use is what the claims allocate. So no instance exists before it is used, and there is no
MIG Manager, no ``nvidia.com/mig.config`` label, no drain of the GPU's other instances: a GPU is "reconfigured" the
moment its next claim allocates a partition of the new layout.

The engine still plans in layouts (which profiles sit where, from the queued demand, with its hysteresis): it must
not place a 3g.40gb where a 1g.10gb of another job will be. The layout it chose for such a node is kept on the node
as :data:`LAYOUT_ANNOTATION` (one patch, the whole node's layout; :func:`layout_annotation`), and observe reads it
back as the node's layout (:func:`layouts_of`); without one, every GPU is whole. What a layout may hold is what the
driver publishes: each instance must be a published partition of its GPU and each whole GPU a published GPU
(:func:`unpublished`). An A100 cannot toggle MIG mode without a GPU reset, so the driver offers it no partitions
while MIG is off (``nvlib.go`` ``isDynamicMIGCapable``): A100s keep the relabel flow
(:mod:`scheduler.gateways.kube.mig_flow`), as every node whose driver publishes no partition does.

Pure: no ``kubernetes`` import.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence

from scheduler.core.gpus.catalog import LayoutError, validate_layout
from scheduler.core.model.snapshot import MigLayout
from scheduler.gateways.kube.dra_devices import DraNode
from scheduler.gateways.kube.dra_slices import DraInventory
from scheduler.gateways.protocol import Device

logger = logging.getLogger(__name__)

LAYOUT_ANNOTATION = "microcosm.io/dra-mig-layout"


def dynamic(node: DraNode | None) -> bool:
    """Does ``node``'s driver create MIG devices on allocation (it publishes partitions)?"""
    return node is not None and bool(node.partitions())


def layout_annotation(layouts: Sequence[MigLayout]) -> str:
    """The annotation's value: per GPU, its instances as ``[profile, start]`` pairs (``[]``: a whole GPU)."""
    return json.dumps([[[profile, start] for profile, start in layout] for layout in layouts], separators=(",", ":"))


def layouts_of(annotations: Mapping[str, str], model: str, count: int) -> tuple[MigLayout, ...] | None:
    """The layout kept on a dynamic-MIG node; None when there is none or it cannot be read (logged: the node is then
    read as whole GPUs, which the next reconfiguration overwrites)."""
    raw = annotations.get(LAYOUT_ANNOTATION)
    if not raw:
        return None
    try:
        value = json.loads(raw)
        if not isinstance(value, list) or len(value) != count:
            raise ValueError(f"{count} GPUs expected")
        layouts = []
        for gpu in value:
            pairs = [(str(profile), int(start)) for profile, start in gpu]
            layouts.append(tuple(validate_layout(model, pairs)) if pairs else ())
    except (ValueError, TypeError, LayoutError) as exc:
        logger.warning("annotation %s=%r is not a layout of %d %s GPUs: %s", LAYOUT_ANNOTATION, raw, count, model, exc)
        return None
    return tuple(layouts)


def kept_layouts(annotations: Mapping[str, str], inventory: DraInventory) -> tuple[MigLayout, ...] | None:
    """The layout kept on a dynamic-MIG node (:func:`layouts_of`), each GPU's as far as its driver can allocate it: a
    GPU kept whole that the driver publishes as partitions only (a MIG-enabled A100), or kept in MIG that it publishes
    whole only (a MIG-disabled A100), is read as the driver publishes it (its MIG mode changed since, by a GPU reset):
    never a layout a bind would be refused."""
    assert inventory.gpu_model is not None
    kept = layouts_of(annotations, inventory.gpu_model, inventory.gpu_count)
    if kept is None:
        return None
    stale = [
        i for i, gpu in enumerate(kept) if (i in inventory.mig_only and not gpu) or (i in inventory.whole_only and gpu)
    ]
    if not stale:
        return kept
    logger.warning(
        "annotation %s: GPUs %s cannot take the MIG mode kept for them (the driver publishes them otherwise); read "
        "as published",
        LAYOUT_ANNOTATION,
        sorted(stale),
    )
    return tuple(inventory.mig[i] if i in stale else gpu for i, gpu in enumerate(kept))


def unpublished(node: DraNode, layouts: Sequence[MigLayout]) -> list[str]:
    """The instances of ``layouts`` the node's driver publishes no partition for (``[]``: all can be allocated)."""
    missing = []
    for gpu, layout in enumerate(layouts):
        if not layout and node.device_for(Device(gpu)) is None:
            # An A100 in MIG mode under DynamicMIG publishes its partitions but not itself: MIG mode cannot be turned
            # off without a GPU reset (nvlib.go isDynamicMIGCapable), so the GPU cannot become whole here.
            missing.append(f"the whole GPU {gpu}")
        for profile, start in layout:
            found = node.device_for(Device(gpu, profile, start))
            if found is None or not found.partition:
                missing.append(f"{profile} at slice {start} on GPU {gpu}")
    return missing
