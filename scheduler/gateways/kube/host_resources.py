"""The CPU and memory of a GPU pod, as plain JSON (no ``kubernetes`` import; docs/deploy.md, Pod resources).

A pod that requests only GPUs is BestEffort: the kubelet evicts it first under memory pressure
(kubernetes pkg/kubelet/eviction/helpers.go ranks first the pods whose usage exceeds their requests, which a
pod without requests always does), a namespace ResourceQuota on
``requests.cpu``/``requests.memory`` refuses it outright, and its memory-backed ``/dev/shm`` is bounded by the node
alone. So every replica's container gets CPU and memory with **requests equal to limits**, which makes the pod
Guaranteed (:func:`pod_qos_class`, following kubernetes pkg/apis/core/helper/qos/qos.go: *every* container,
init containers and native sidecars included, must have cpu and memory limits equal to its requests).

What a replica gets:

- **CPU**: the job's ``cpu`` (cores), else ``KUBE_CPU_PER_GPU`` per GPU-equivalent it holds.
- **Memory**: the job's ``host_memory_gib`` (its processes' own need), else ``KUBE_HOST_MEMORY_GIB_PER_GPU`` per
  GPU-equivalent, **plus its /dev/shm**: an ``emptyDir`` of medium ``Memory`` is tmpfs, and the kubelet charges
  its pages to the pod's memory cgroup (kubernetes pkg/volume/emptydir/empty_dir.go: a memory-medium volume's
  size defaults to the pod's memory limit and counts against it), so a limit without room for shm would OOM-kill
  the job when its data loader fills shm.

A GPU-equivalent is a whole GPU 1 and a MIG instance its compute fraction (compute slices ÷ 7: a ``3g.40gb``
is 3/7 of the GPU's SMs, and host CPU feeds SMs). Where the node reports allocatable CPU or memory, the
*defaults* are capped at the replica's share of it (allocatable ÷ the node's GPUs × its GPU-equivalents), so the
kubelet's admission (pkg/kubelet/lifecycle/predicate.go: OutOfcpu / OutOfmemory) never refuses a pod whose job
asked for nothing in particular; a job's own figures are taken as stated.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from scheduler.core.gpus.catalog import COMPUTE_SLICES, profile_spec
from scheduler.gateways.kube.shared_memory import quantity_bytes
from scheduler.gateways.protocol import Device

GIB = 2**30
MIB = 2**20
# Defaults per GPU-equivalent. The smallest common 8-GPU servers give 12 vCPU and 144 GiB per GPU (AWS
# p4d.24xlarge: 96 vCPU, 1,152 GiB, AWS's instance-type page) and a DGX A100 32 threads and 128 GiB (256 threads,
# 1 TiB: NVIDIA's DGX A100 user guide); 8 cores and 64 GiB
# leave room on those for /dev/shm, the node's daemons and the kubelet's reserve, and are what a data loader with
# a handful of workers per GPU needs.
DEFAULT_CPU_PER_GPU = 8.0
DEFAULT_HOST_MEMORY_GIB_PER_GPU = 64.0
# A fabric's receive-datapath daemon (scheduler.gateways.kube.fabrics) is a native sidecar; Google's manifests
# set no resources for it, which would make the pod Burstable. Microcosm's figure: the daemon moves packet
# headers, not payloads, so one core and 1 GiB are ample.
SIDECAR_CPU_MILLI = 1000
SIDECAR_MEMORY_BYTES = 1 * GIB
MIN_CPU_MILLI = 100  # a container below a tenth of a core is throttled to uselessness

_CPU = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(m)?$")


@dataclass(frozen=True, slots=True)
class HostSettings:
    """The platform admin's defaults (``settings.KUBERNETES``: ``cpu_per_gpu``, ``host_memory_gib_per_gpu``)."""

    cpu_per_gpu: float = DEFAULT_CPU_PER_GPU
    host_memory_gib_per_gpu: float = DEFAULT_HOST_MEMORY_GIB_PER_GPU


DEFAULT_HOST_SETTINGS = HostSettings()


@dataclass(frozen=True, slots=True)
class HostResources:
    """One replica's container: CPU in millicores, memory in bytes (``/dev/shm`` included) and its shm's size."""

    cpu_milli: int
    memory_bytes: int
    shm_bytes: int

    def container_resources(self) -> dict[str, str]:
        """``{"cpu": ..., "memory": ...}`` for both the requests and the limits (Guaranteed QoS)."""
        return {"cpu": cpu_quantity(self.cpu_milli), "memory": memory_quantity(self.memory_bytes)}

    @property
    def shm_size_limit(self) -> str:
        return memory_quantity(self.shm_bytes)


def cpu_quantity(milli: int) -> str:
    """Millicores as the API writes them: whole cores plain (``8``), else in ``m`` (``2500m``)."""
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def memory_quantity(size: int) -> str:
    """Bytes as a quantity in whole MiB (``65536Mi``), the unit the API server keeps when it round-trips it."""
    return f"{max(size // MIB, 1)}Mi"


def cpu_milli(text: object) -> int | None:
    """A Kubernetes CPU quantity (``8``, ``2500m``, ``0.5``) in millicores; None when it is not one."""
    match = _CPU.match(str(text or "").strip())
    if not match:
        return None
    number, milli = match.groups()
    try:
        value = Decimal(number) if milli else Decimal(number) * 1000
    except InvalidOperation:
        return None
    return math.ceil(value)


def gpu_equivalents(model: str, devices: Iterable[Device]) -> float:
    """The GPUs ``devices`` amount to for host resources: a whole GPU 1, a MIG instance its compute slices ÷ 7
    (a profile the catalog does not know counts as a whole GPU: too much CPU is better than a starved job)."""
    total = 0.0
    for device in devices:
        spec = profile_spec(model, device.mig_profile) if device.mig_profile is not None else None
        total += 1.0 if spec is None else spec.compute_slices / COMPUTE_SLICES
    return total


def replica_host_resources(
    *,
    cpu: float | None,
    host_memory_gib: float | None,
    model: str,
    devices: Iterable[Device],
    gpu_count: int,
    allocatable: Mapping[str, Any] | None,
    shm_bytes: int | None,
    shm_fraction: float,
    settings: HostSettings = DEFAULT_HOST_SETTINGS,
) -> HostResources:
    """What one replica's container requests (= limits): module doc. ``shm_bytes`` is the /dev/shm size the node
    gives (:func:`scheduler.gateways.kube.shared_memory.shm_size_limit`); None (node memory unknown): a
    ``shm_fraction`` of the process memory, so shm always has a size and always fits inside the limit."""
    held = gpu_equivalents(model, devices)
    share = held / gpu_count if gpu_count > 0 else None
    offered = allocatable or {}
    if cpu is not None:
        milli = math.ceil(Decimal(str(cpu)) * 1000)
    else:
        milli = math.ceil(settings.cpu_per_gpu * held * 1000)
        node_cpu = cpu_milli(offered.get("cpu"))
        if node_cpu and share is not None:
            milli = min(milli, int(node_cpu * share))
    milli = max(milli, MIN_CPU_MILLI)
    process = int((host_memory_gib if host_memory_gib is not None else settings.host_memory_gib_per_gpu * held) * GIB)
    shm = shm_bytes if shm_bytes is not None else int(process * shm_fraction)
    node_memory = quantity_bytes(offered.get("memory"))
    if host_memory_gib is None and node_memory and share is not None and process + shm > node_memory * share:
        # Defaults that would not fit the replica's share of the node: both shrink in proportion.
        scale = node_memory * share / (process + shm)
        process, shm = int(process * scale), int(shm * scale)
    shm = max(shm // MIB, 1) * MIB
    return HostResources(cpu_milli=milli, memory_bytes=max(process // MIB, 1) * MIB + shm, shm_bytes=shm)


def sidecar_resources() -> dict[str, str]:
    """Requests (= limits) of a fabric's native sidecar (:data:`SIDECAR_CPU_MILLI`, :data:`SIDECAR_MEMORY_BYTES`)."""
    return {"cpu": cpu_quantity(SIDECAR_CPU_MILLI), "memory": memory_quantity(SIDECAR_MEMORY_BYTES)}


def pod_qos_class(pod: Mapping[str, Any]) -> str:
    """``Guaranteed``, ``Burstable`` or ``BestEffort``, as kubernetes pkg/apis/core/helper/qos/qos.go ComputePodQOS
    decides it (without pod-level resources, which Microcosm never sets): only cpu and memory count; a container's
    unset request defaults to its limit (pkg/apis/core/v1/defaults.go); Guaranteed needs every container and init
    container to limit both, and the summed requests to equal the summed limits."""
    spec = pod.get("spec") or {}
    requests: dict[str, int] = {}
    limits: dict[str, int] = {}
    guaranteed = True
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        resources = container.get("resources") or {}
        limited = {k: v for k, v in (resources.get("limits") or {}).items() if k in ("cpu", "memory")}
        asked = {**limited, **{k: v for k, v in (resources.get("requests") or {}).items() if k in ("cpu", "memory")}}
        found = set()
        for name, value in asked.items():
            amount = _amount(name, value)
            if amount > 0:
                requests[name] = requests.get(name, 0) + amount
        for name, value in limited.items():
            amount = _amount(name, value)
            if amount > 0:
                found.add(name)
                limits[name] = limits.get(name, 0) + amount
        if found != {"cpu", "memory"}:
            guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    if guaranteed and len(requests) == len(limits) and all(limits.get(n) == a for n, a in requests.items()):
        return "Guaranteed"
    return "Burstable"


def _amount(name: str, value: object) -> int:
    parsed = cpu_milli(value) if name == "cpu" else quantity_bytes(value)
    return parsed or 0
