"""``/dev/shm`` of a GPU pod, as plain JSON (no ``kubernetes`` import; docs/distributed-training.md, Shared memory).

A container's ``/dev/shm`` is 64 MiB unless the pod mounts something larger there, and NCCL and PyTorch's data
loader workers pass tensors through it (docs/gpu-facts.md, Running a multi-node training job on Kubernetes).
Every Microcosm pod therefore mounts a memory-backed ``emptyDir`` at ``/dev/shm``. Its ``sizeLimit`` is
``KUBE_SHM_FRACTION`` of the node's memory per GPU times the GPU-equivalents the replica holds (a whole GPU 1, a
MIG instance its memory slices ÷ 8), so pods sharing a node share its memory in proportion to their GPUs.
Where the node's memory or a MIG profile is unknown :func:`shm_size_limit` gives None and the gateway sizes shm
as a share of the replica's process memory instead. Either way the tmpfs is charged to the pod's memory cgroup
(kubernetes pkg/volume/emptydir/empty_dir.go bounds it by the pod's memory limit), so the container's memory
limit holds the shm on top of the process's own need (:mod:`scheduler.gateways.kube.host_resources`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from decimal import Decimal, InvalidOperation
from typing import Any

from scheduler.core.gpus.catalog import MEMORY_SLICES, profile_spec
from scheduler.gateways.protocol import Device

SHM_VOLUME = "dshm"
SHM_MOUNT = "/dev/shm"
DEFAULT_FRACTION = 0.5

_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|e[0-9]+)?$")
_FACTORS = {
    None: 1,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
}


def quantity_bytes(text: object) -> int | None:
    """A Kubernetes memory quantity (``2097152Ki``, ``512Gi``, ``1e9``) in bytes; None when it is not one."""
    match = _QUANTITY.match(str(text or "").strip())
    if not match:
        return None
    number, suffix = match.groups()
    try:
        factor = Decimal(10) ** int(suffix[1:]) if suffix and suffix.startswith("e") else Decimal(_FACTORS[suffix])
        return int(Decimal(number) * factor)
    except (InvalidOperation, KeyError, ValueError):
        return None


def gpu_equivalents(model: str, devices: Iterable[Device]) -> float | None:
    """The GPUs ``devices`` amount to on a ``model`` node: a whole GPU 1, a MIG instance its memory slices ÷ 8;
    None when a profile is not one of ``model``'s."""
    total = 0.0
    for device in devices:
        if device.mig_profile is None:
            total += 1
            continue
        spec = profile_spec(model, device.mig_profile)
        if spec is None:
            return None
        total += spec.memory_slices / MEMORY_SLICES
    return total


def shm_size_limit(
    *, node_memory: object, gpu_count: int, model: str, devices: Iterable[Device], fraction: float
) -> str | None:
    """``sizeLimit`` of the replica's ``/dev/shm`` (module doc), in MiB; None: no limit (memory or profile unknown)."""
    memory = quantity_bytes(node_memory)
    held = gpu_equivalents(model, devices)
    if not memory or gpu_count <= 0 or held is None:
        return None
    mib = int(fraction * memory / gpu_count * held) // 2**20
    return f"{mib}Mi" if mib > 0 else None


def shm_volume(size_limit: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(volume, mount)`` of a memory-backed ``/dev/shm`` with ``size_limit`` (None: none)."""
    empty_dir: dict[str, Any] = {"medium": "Memory"}
    if size_limit:
        empty_dir["sizeLimit"] = size_limit
    return {"name": SHM_VOLUME, "emptyDir": empty_dir}, {"name": SHM_VOLUME, "mountPath": SHM_MOUNT}
