"""ResourceSlices as the fleet's inventory: what a DRA node publishes becomes its GPUs, MIG layout and fabric.

Pure functions on the API's raw JSON (``resource.k8s.io/v1`` ResourceSlices as plain dicts); no ``kubernetes``
import. :func:`read_slices` groups the slices into pools, keeps the complete ones and turns each node's pools into
a :class:`DraInventory`: the :class:`~scheduler.gateways.kube.dra_devices.DraNode` the claims are written from,
and what :func:`scheduler.gateways.kube.nodes.node_observation` needs (GPU model, count, MIG layout, EFA devices).

What the publishers write, and where upstream says so:

- **Pools** (kubernetes ``staging/src/k8s.io/api/resource/v1/types.go``, ResourcePool; the scheduler's reading of
  them in ``staging/src/k8s.io/dynamic-resource-allocation/structured/internal/stable/pools_stable.go``
  ``GatherPools``): a device is ``<driver>/<pool>/<name>``; a pool may span several slices; a consumer uses only
  the slices of the pool's highest ``pool.generation`` and treats the pool as incomplete until it has seen
  ``pool.resourceSliceCount`` of them, and as invalid when a device name repeats. Node-local drivers set
  ``spec.nodeName`` and name the pool after the node; slices with ``nodeSelector``, ``allNodes`` or
  ``perDeviceNodeSelection`` describe devices reachable from several nodes, which are no node's inventory here.
- **NVIDIA's GPU driver** (``gpu.nvidia.com``; kubernetes-sigs/dra-driver-nvidia-gpu ``cmd/gpu-kubelet-plugin/``):
  one pool per node named after it (``driver.go`` ``publishResources``); a whole GPU is ``gpu-<minor>``
  (``deviceinfo.go`` ``GpuInfo.CanonicalName``) with attributes ``type: gpu``, ``uuid``, ``productName`` (NVML's,
  e.g. "NVIDIA H100 80GB HBM3"), ``architecture``, ``cudaComputeCapability`` and capacity ``memory`` in bytes; a
  MIG device is ``gpu-<parent minor>-mig-<profile without dots>-<GI profile id>-<placement start>`` (``mig.go``
  ``ToCanonicalName``; v25.8 and before: ``gpu-<minor>-mig-<GI profile id>-<start>-<size>``) with ``type: mig``,
  ``profile``, ``parentUUID``, the parent's product attributes and ``memorySlice<i>`` capacities for its placement.
  Releases before v25.8 also published ``index``/``parentIndex`` attributes (removed in NVIDIA/k8s-dra-driver-gpu
  36fc80ab): the name is the one source every release has for the index, and a claim's selectors pin a device by
  ``uuid`` (a GPU, an existing MIG instance) or ``parentUUID`` and ``profile`` (a partition), which every release
  publishes (:mod:`scheduler.gateways.kube.dra_claims`).
  Static MIG: a MIG-enabled GPU publishes its existing instances (each with a ``uuid``) and not itself (``nvlib.go``);
  dynamic MIG (Hopper and newer, KEP-4815 partitionable devices: ``partitions.go``, ``driver.go``
  ``generateSplitResourceSlices``) publishes the whole GPU and every possible partition, each consuming counters of
  the GPU's shared counter set ``gpu-<minor>-counter-set``; a partition has no ``uuid`` until a claim creates it. An
  A100 cannot toggle MIG mode without a GPU reset, so under dynamic MIG (``nvlib.go`` ``GetPerGpuAllocatableDevices``,
  ``isDynamicMIGCapable``) a MIG-enabled A100 publishes its partitions and **not** itself, and a MIG-disabled one only
  itself: such a GPU is read as MIG-enabled (one instance spanning it, until Microcosm keeps a layout for it) or as
  whole, and its node as one whose GPUs never change MIG mode. Its DeviceClasses are ``gpu.nvidia.com`` (``type ==
  'gpu'``) and ``mig.nvidia.com`` (``type == 'mig'``)
  (``deployments/helm/dra-driver-nvidia-gpu/templates/deviceclass-*.yaml``).
- **The EFA DRA driver** (EKS's "DRANET", kubernetes-sigs/dranet: driver ``dra.net``, ``cmd/dranet/app.go``): one
  pool per node named after it (``pkg/driver/dra_hooks.go``), a device per network PCI function named
  ``pci-<address>`` (``pkg/names/names.go``) with ``dra.net/pciDevice`` among its attributes
  (``pkg/apis/attributes.go``); EKS's DeviceClass ``efa.networking.k8s.aws`` selects
  ``device.attributes["dra.net"].pciDevice == 'Elastic Fabric Adapter (EFA)'``
  (``examples/aws_eks_examples/gpu-efa/device-class.yaml``). Only those devices are fabric devices: an
  unfiltered DRANET also publishes the node's ENA interfaces.

Both drivers publish the standard attribute ``resource.kubernetes.io/pcieRoot`` (KEP-5491; kubernetes
``staging/src/k8s.io/dynamic-resource-allocation/deviceattribute/``: the PCIe root complex ``pci<domain>:<bus>`` a
PCI device's sysfs path starts from) where they can resolve it: the NVIDIA driver on a whole GPU (``deviceinfo.go``
``GpuInfo.Attributes``), DRANET on every NIC. A MIG device is read as under its GPU's root (its own attribute when
published, else its parent GPU's in the same pool). :mod:`scheduler.gateways.kube.dra_claims` aligns a replica's
EFA devices with its GPUs by it.

Attribute names may be written with or without their driver's domain (types.go, ``QualifiedName``): both are read.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from scheduler.core.gpus.catalog import GPU_MODEL_BY_NAME, MEMORY_SLICES, LayoutError, validate_layout
from scheduler.core.model.snapshot import MigLayout
from scheduler.gateways.kube.dra_devices import DraDevice, DraDeviceKind, DraNode
from scheduler.gateways.kube.dra_memo import InventoryMemo
from scheduler.gateways.kube.labels import gpu_model_of
from scheduler.gateways.kube.shared_memory import quantity_bytes

NVIDIA_GPU_DRIVER = "gpu.nvidia.com"
EFA_DRIVER = "dra.net"
EFA_PCI_DEVICE = "Elastic Fabric Adapter (EFA)"
GPU_DEVICE_CLASS = "gpu.nvidia.com"
MIG_DEVICE_CLASS = "mig.nvidia.com"
EFA_DEVICE_CLASS = "efa.networking.k8s.aws"
DRIVERS = (NVIDIA_GPU_DRIVER, EFA_DRIVER)
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"  # deviceattribute/attribute.go StandardDeviceAttributePCIeRoot

_GPU_NAME = re.compile(r"^gpu-(\d+)$")
# A MIG device's name: gpu-<parent minor>-mig-<profile>-<GI profile id>-<start> (mig.go canonicalMigNameRegex), and
# in NVIDIA/k8s-dra-driver-gpu v25.8 and before gpu-<parent minor>-mig-<GI profile id>-<start>-<size> (deviceinfo.go
# MigDeviceInfo.CanonicalName at v25.8.1): the profile part has a letter, the old id does not.
_MIG_NAME = re.compile(r"^gpu-(\d+)-mig-([0-9a-z-]*[a-z][0-9a-z-]*)-(\d+)-(\d+)$")
_OLD_MIG_NAME = re.compile(r"^gpu-(\d+)-mig-(\d+)-(\d+)-(\d+)$")
_NODE_SELECTIONS = ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection")
_ATTRIBUTE_KINDS = ("string", "int", "bool", "version")  # types.go DeviceAttribute: exactly one is set


@dataclass(frozen=True, slots=True)
class DraInventory:
    """One node's devices as its complete pools publish them, and what they mean for the scheduler.

    ``waiting`` says why the node's DRA devices cannot be used yet (a pool incomplete, invalid or unreadable): no
    new work goes there until its drivers have finished publishing, rather than counted from half a pool.
    """

    node: DraNode
    gpu_pool: bool = False  # the NVIDIA DRA driver publishes this node's GPUs (complete or not)
    product: str = ""  # the GPUs' productName ("" without a GPU pool)
    gpu_model: str | None = None  # the catalog model of ``product``; None when unknown
    gpu_count: int = 0
    mig: tuple[MigLayout, ...] = ()  # existing MIG instances per GPU (static MIG); () entries: whole GPUs
    dynamic_mig: bool = False  # the driver creates MIG partitions on allocation (KEP-4815)
    # Dynamic MIG on GPUs that cannot change MIG mode without a reset (an A100: nvlib.go isDynamicMIGCapable): the
    # indices of the GPUs published as partitions only (MIG enabled: read as one instance spanning the GPU until
    # Microcosm keeps a layout for it) and as a whole GPU only (MIG disabled).
    mig_only: frozenset[int] = frozenset()
    whole_only: frozenset[int] = frozenset()
    efa_devices: int = 0  # EFA interfaces the EFA DRA driver publishes
    waiting: str = ""


@dataclass(frozen=True, slots=True)
class DraRead:
    """Every node's :class:`DraInventory` and the slices that could not be read (each reason a sentence)."""

    inventories: Mapping[str, DraInventory] = field(default_factory=dict)
    problems: tuple[str, ...] = ()


@dataclass
class _Pool:
    driver: str
    name: str
    node: str
    generation: int
    count: int
    slices: list[Mapping[str, Any]]
    invalid: str = ""


def attribute(device: Mapping[str, Any], driver: str, name: str) -> object:
    """The value of a device attribute (``string``, ``int``, ``bool`` or ``version``), named with or without the
    driver's domain; None when absent."""
    attributes = device.get("attributes")
    if not isinstance(attributes, dict):  # raw JSON: dicts (an abc check costs 4× more, per device per cycle)
        return None
    value = attributes.get(name) or attributes.get(f"{driver}/{name}")
    if not isinstance(value, dict):
        return None
    for kind in _ATTRIBUTE_KINDS:
        if kind in value:
            return value[kind]
    return None


def read_slices(slices: Iterable[Mapping[str, Any]], *, memo: InventoryMemo | None = None) -> DraRead:
    """The complete pools of the known drivers, per node (module doc); malformed slices are skipped, each with
    its reason in :attr:`DraRead.problems`, and a node whose pool is incomplete or invalid gets a ``waiting``
    reason instead of devices. ``memo`` keeps each node's inventory until its slices change
    (:mod:`scheduler.gateways.kube.dra_memo`; the same inventories without it)."""
    problems: list[str] = []
    pools: dict[tuple[str, str], _Pool] = {}
    for raw in slices:
        found = _slice_pool(raw, problems)
        if found is None:
            continue
        pool = pools.get((found.driver, found.name))
        if pool is None or found.generation > pool.generation:
            pools[(found.driver, found.name)] = found  # pools_stable.go addSlice: a newer generation replaces all
        elif found.generation == pool.generation:
            if found.node != pool.node:
                pool.invalid = pool.invalid or f"its slices name two nodes ({pool.node}, {found.node})"
            pool.slices.extend(found.slices)
    by_node: dict[str, dict[str, _Pool]] = {}
    for pool in pools.values():
        by_node.setdefault(pool.node, {})[pool.driver] = pool
    inventories: dict[str, DraInventory] = {}
    for node, node_pools in sorted(by_node.items()):
        if memo is None:
            inventories[node] = _inventory(node, node_pools)
            continue
        versions = _versions(node_pools)
        kept = memo.get(node, versions)
        inventories[node] = kept if kept is not None else _inventory(node, node_pools)
        memo.put(node, versions, inventories[node])
    if memo is not None:
        memo.done()
    return DraRead(inventories=inventories, problems=tuple(problems))


def _versions(pools: Mapping[str, _Pool]) -> tuple[tuple[str, str], ...] | None:
    """The names and resourceVersions of a node's slices (what the memo keys on); None when one has no version."""
    found = []
    for pool in pools.values():
        for raw in pool.slices:
            meta = raw.get("metadata") or {}
            if not meta.get("resourceVersion"):
                return None
            found.append((str(meta.get("name")), str(meta["resourceVersion"])))
    return tuple(sorted(found))


def _slice_pool(raw: Mapping[str, Any], problems: list[str]) -> _Pool | None:
    """One slice as a one-slice pool of its node; None (with a problem when it is malformed) when it is not one of
    a known driver's node-local slices."""
    name = str((raw.get("metadata") or {}).get("name") or "?")
    spec = raw.get("spec")
    if not isinstance(spec, Mapping):
        problems.append(f"ResourceSlice {name} has no spec")
        return None
    driver = spec.get("driver")
    if driver not in DRIVERS:
        return None  # another vendor's devices: not GPUs or fabrics this scheduler places
    pool = spec.get("pool")
    if not isinstance(pool, Mapping) or not pool.get("name"):
        problems.append(f"ResourceSlice {name} ({driver}) names no pool")
        return None
    generation, count = pool.get("generation"), pool.get("resourceSliceCount")
    if not isinstance(generation, int) or isinstance(generation, bool) or generation < 0:
        problems.append(f"ResourceSlice {name} ({driver}): pool.generation {generation!r} is not a number ≥ 0")
        return None
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        problems.append(f"ResourceSlice {name} ({driver}): pool.resourceSliceCount {count!r} is not a number ≥ 1")
        return None
    selections = [key for key in _NODE_SELECTIONS if spec.get(key) not in (None, False, "")]
    if len(selections) != 1:
        problems.append(
            f"ResourceSlice {name} ({driver}) sets {', '.join(selections) or 'none'} of nodeName, nodeSelector, "
            "allNodes and perDeviceNodeSelection; exactly one is required"
        )
        return None
    if selections != ["nodeName"]:
        return None  # devices reachable from several nodes: no node's inventory
    if not isinstance(spec.get("devices") or [], list):
        problems.append(f"ResourceSlice {name} ({driver}): its devices are not a list")
        return None
    node = str(spec["nodeName"])
    return _Pool(str(driver), str(pool["name"]), node, generation, count, [raw])


def _devices(pool: _Pool) -> list[Mapping[str, Any]]:
    return [device for raw in pool.slices for device in (raw["spec"].get("devices") or [])]


def _pool_problem(pool: _Pool) -> str:
    """Why ``pool`` cannot be used yet ('' when it is complete and valid: pools_stable.go GatherPools)."""
    where = f"pool {pool.driver}/{pool.name}"
    if pool.invalid:
        return f"{where} is invalid: {pool.invalid}"
    if len(pool.slices) != pool.count:
        return (
            f"{where} is incomplete: {len(pool.slices)} of its {pool.count} ResourceSlices of generation "
            f"{pool.generation} are published; waiting for the driver to finish"
        )
    # Per device, so here and not in _slice_pool: the memo (dra_memo) skips this for a pool that has not changed.
    if not all(isinstance(d, dict) and d.get("name") for d in _devices(pool)):
        return f"{where} is invalid: a device has no name"
    repeated = [name for name, n in Counter(str(d["name"]) for d in _devices(pool)).items() if n > 1]
    if repeated:
        return f"{where} is invalid: duplicate device name {sorted(repeated)[0]}"
    return ""


def _inventory(node: str, pools: Mapping[str, _Pool]) -> DraInventory:
    devices: list[DraDevice] = []
    gpu = _gpu_reading(node, pools.get(NVIDIA_GPU_DRIVER))
    devices += gpu.devices
    efa = 0
    waiting = gpu.waiting
    efa_pool = pools.get(EFA_DRIVER)
    if efa_pool is not None:
        problem = _pool_problem(efa_pool)
        if problem:
            # A gang placed here must not fall back to TCP unnoticed: the node waits until its fabric is known.
            waiting = waiting or problem
        else:
            for device in _devices(efa_pool):
                if attribute(device, EFA_DRIVER, "pciDevice") == EFA_PCI_DEVICE:
                    efa += 1
                    devices.append(
                        DraDevice(
                            EFA_DRIVER,
                            efa_pool.name,
                            str(device["name"]),
                            DraDeviceKind.FABRIC,
                            pcie_root=_root(device),
                        )
                    )
    return DraInventory(
        node=DraNode(node, tuple(devices)),
        gpu_pool=gpu.present,
        product=gpu.product,
        gpu_model=gpu.model,
        gpu_count=gpu.count,
        mig=gpu.mig,
        dynamic_mig=gpu.dynamic,
        mig_only=gpu.mig_only,
        whole_only=gpu.whole_only,
        efa_devices=efa,
        waiting=waiting,
    )


@dataclass
class _GpuReading:
    present: bool = False  # the node has a GPU pool, complete or not
    devices: list[DraDevice] = field(default_factory=list)
    product: str = ""
    model: str | None = None
    count: int = 0
    mig: tuple[MigLayout, ...] = ()
    dynamic: bool = False
    mig_only: frozenset[int] = frozenset()
    whole_only: frozenset[int] = frozenset()
    waiting: str = ""


def _gpu_reading(node: str, pool: _Pool | None) -> _GpuReading:
    """The NVIDIA pool of ``node`` as GPUs, MIG devices and a layout (module doc)."""
    if pool is None:
        return _GpuReading()
    problem = _pool_problem(pool)
    if problem:
        return _GpuReading(present=True, waiting=problem)
    minors: set[int] = set()
    products: set[str] = set()
    memory_mib: int | None = None
    # (name, kind, minor, profile, start, partition, uuid, parent uuid)
    read: list[tuple[str, str, int, str, int, bool, str, str]] = []
    roots: dict[str, str] = {}  # device name -> its pcieRoot, where published (GPUs and MIG instances)
    gpu_roots: dict[int, str] = {}  # minor -> its whole GPU's pcieRoot
    # Partitions' raw devices: one is read for its own pcieRoot only when its GPU has none (a dynamic-MIG GPU
    # publishes dozens of partitions, all under the GPU's root: one read per GPU instead of one per partition).
    partitions: dict[str, Mapping[str, Any]] = {}
    counter_sets: dict[str, str] = {}  # device name -> the shared counter set it consumes from (dynamic MIG)
    for device in _devices(pool):
        name = str(device["name"])
        counter_sets[name] = _counter_set(device)
        kind = attribute(device, NVIDIA_GPU_DRIVER, "type")
        product = attribute(device, NVIDIA_GPU_DRIVER, "productName")
        if kind == "gpu":
            match = _GPU_NAME.match(name)
            if match is None:
                return _GpuReading(present=True, waiting=f"pool {pool.driver}/{pool.name}: GPU {name} is not gpu-<n>")
            minor = int(match.group(1))
            size = quantity_bytes(((device.get("capacity") or {}).get("memory") or {}).get("value"))
            memory_mib = size // (1024 * 1024) if size else memory_mib
            read.append((name, "gpu", minor, "", 0, False, _text(device, "uuid"), ""))
            gpu_roots[minor] = roots[name] = _root(device)
        elif kind == "mig":
            profile = attribute(device, NVIDIA_GPU_DRIVER, "profile")
            placed = _mig_placement(name)
            if placed is None or not isinstance(profile, str):
                return _GpuReading(
                    present=True,
                    waiting=f"pool {pool.driver}/{pool.name}: MIG device {name} has no readable parent or profile",
                )
            minor, start = placed
            uuid = _text(device, "uuid")
            partition = not uuid and bool(device.get("consumesCounters"))
            if partition:
                partitions[name] = device
            else:
                roots[name] = _root(device)
            # A partition is pinned by its parent's uuid (dra_claims.device_selector); an instance by its own.
            parent = _text(device, "parentUUID") if partition else ""
            read.append((name, "mig", minor, profile, start, partition, uuid, parent))
        else:
            continue  # vfio passthrough devices and future types: not what the scheduler places
        minors.add(minor)
        if isinstance(product, str) and product:
            products.add(product)
    if not minors:
        return _GpuReading()
    waiting_where = f"pool {pool.driver}/{pool.name}"
    if len(products) != 1:
        what = ", ".join(sorted(products)) or "none"
        return _GpuReading(present=True, waiting=f"{waiting_where}: one GPU product per node expected, found {what}")
    product = products.pop()
    model = gpu_model_of(product.replace(" ", "-"), memory_mib)
    if model is None:
        return _GpuReading(present=True, waiting=f"{waiting_where}: GPU {product!r} is not in the catalog")
    # The engine numbers a node's GPUs 0..n-1: a GPU's index is its rank among the published minors (contiguous on
    # a healthy node; a GPU the driver does not publish closes the gap rather than leave a hole the engine fills).
    index = {minor: rank for rank, minor in enumerate(sorted(minors))}
    dynamic = any(found[5] for found in read)
    devices: list[DraDevice] = []
    layouts: list[list[tuple[str, int]]] = [[] for _ in index]
    for name, kind, minor, profile, start, partition, uuid, parent_uuid in read:
        counter_set = counter_sets[name]
        memory_slices = _memory_slices(model, profile, start) if counter_set else frozenset()
        if kind == "gpu":
            devices.append(
                DraDevice(
                    pool.driver,
                    pool.name,
                    name,
                    DraDeviceKind.GPU,
                    gpu_index=index[minor],
                    uuid=uuid,
                    counter_set=counter_set,
                    memory_slices=memory_slices,
                    pcie_root=roots[name],
                )
            )
            continue
        devices.append(
            DraDevice(
                pool.driver,
                pool.name,
                name,
                DraDeviceKind.MIG,
                gpu_index=index[minor],
                profile=profile,
                mig_start=start,
                partition=partition,
                uuid=uuid,
                parent_uuid=parent_uuid,
                counter_set=counter_set,
                memory_slices=memory_slices,
                # Its own root (mig.go CommonAttributesMig copies its GPU's), else its GPU's; a partition's own read
                # only when its GPU has none.
                pcie_root=(roots.get(name) or gpu_roots.get(minor) or (_root(partitions[name]) if partition else "")),
            )
        )
        if not partition:
            layouts[index[minor]].append((profile, start))
    whole = {index[found[2]] for found in read if found[1] == "gpu"}
    partitioned = {index[found[2]] for found in read if found[5]}
    mig_only = frozenset(partitioned - whole) if dynamic else frozenset()
    whole_only = frozenset(whole - partitioned) if dynamic else frozenset()
    mig: list[MigLayout] = []
    for rank, layout in enumerate(layouts):
        if rank in mig_only:
            # MIG enabled under dynamic MIG: no instance exists until a claim is prepared, and the GPU is not whole
            # (module doc): read as the one instance spanning it, which it offers, until a layout is kept for it.
            mig.append(spanning_layout(model))
            continue
        if not layout:
            mig.append(())
            continue
        try:
            mig.append(tuple(validate_layout(model, layout)))
        except LayoutError as exc:
            return _GpuReading(
                present=True, waiting=f"{waiting_where}: the MIG devices of GPU {sorted(minors)[rank]}: {exc}"
            )
    return _GpuReading(
        present=True,
        devices=devices,
        product=product,
        model=model,
        count=len(index),
        mig=tuple(mig),
        dynamic=dynamic,
        mig_only=mig_only,
        whole_only=whole_only,
    )


@lru_cache(maxsize=64)
def spanning_layout(model: str) -> MigLayout:
    """One MIG instance spanning a GPU of ``model``: its profile with every compute slice and the most memory, at
    slice 0 (an A100-80GB's ``7g.80gb``): what a MIG-enabled GPU offers whole."""
    profiles = GPU_MODEL_BY_NAME[model].profiles()
    name = max(profiles, key=lambda p: (profiles[p].compute_slices, profiles[p].memory_slices, not p.endswith("+me")))
    return tuple(validate_layout(model, [(name, 0)]))


def _root(device: Mapping[str, Any]) -> str:
    """The standard ``resource.kubernetes.io/pcieRoot`` string ("" when absent); a direct lookup, as its name is
    always fully qualified (its domain is no driver's), read for thousands of devices a cycle."""
    attributes = device.get("attributes")
    value = attributes.get(PCIE_ROOT) if isinstance(attributes, dict) else None
    found = value.get("string") if isinstance(value, dict) else None
    return found if isinstance(found, str) else ""


def _counter_set(device: Mapping[str, Any]) -> str:
    """The shared counter set a device consumes from ("" when none: static MIG, a GPU without dynamic MIG)."""
    for use in device.get("consumesCounters") or ():
        if isinstance(use, dict) and use.get("counterSet"):
            return str(use["counterSet"])
    return ""


@lru_cache(maxsize=1024)  # a handful of (model, profile, start): the catalog's profiles() builds a dict a call
def _memory_slices(model: str, profile: str, start: int) -> frozenset[int]:
    """The memory slices a dynamic-MIG device consumes: a partition its placement's (``start`` and its profile's
    size), the whole GPU every one. What its counters say (partitions.go ``addCountersForMemSlices``: a
    ``memory-slice-<i>`` counter per slice of the placement), from the name's placement and the catalog: reading
    each device's counters cost 0.6 s a cycle for 1,000 dynamic-MIG nodes without the memo."""
    if not profile:
        return _ALL_SLICES
    found = GPU_MODEL_BY_NAME[model].profiles().get(profile)
    return frozenset(range(start, start + found.memory_slices)) if found is not None else frozenset({start})


_ALL_SLICES = frozenset(range(MEMORY_SLICES))


def _text(device: Mapping[str, Any], name: str) -> str:
    """A string attribute of an NVIDIA device; "" when absent."""
    value = attribute(device, NVIDIA_GPU_DRIVER, name)
    return value if isinstance(value, str) else ""


def _mig_placement(name: str) -> tuple[int, int] | None:
    """``(parent minor, placement start)`` from a MIG device's name, in either release's form (``_MIG_NAME``)."""
    old = _OLD_MIG_NAME.match(name)
    if old is not None:
        return int(old.group(1)), int(old.group(3))
    new = _MIG_NAME.match(name)
    return (int(new.group(1)), int(new.group(4))) if new is not None else None


def device_classes(raw: Sequence[Mapping[str, Any]]) -> frozenset[str]:
    """The names of the DeviceClasses the cluster has (a claim names one: ``gpu.nvidia.com``, ``mig.nvidia.com``,
    ``efa.networking.k8s.aws`` when their drivers' charts installed them)."""
    return frozenset(str((c.get("metadata") or {}).get("name") or "") for c in raw) - {""}
