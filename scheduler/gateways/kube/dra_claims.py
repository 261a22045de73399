"""The ResourceClaim of one replica on a Dynamic Resource Allocation node: what Microcosm writes as its scheduler.

On a DRA node (``resource.k8s.io/v1``) a pod gets its GPUs, MIG devices and fabric devices through a ResourceClaim,
not through ``nvidia.com/gpu`` / ``vpc.amazonaws.com/efa`` limits. Microcosm is the pod's scheduler, so it does what
kube-scheduler's DynamicResources plugin does for the pods it schedules (kubernetes
pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go): it allocates the claim (``status.allocation``
naming the devices, which the engine chose) and reserves it for the pod (``status.reservedFor``) *before* the
Binding (``PreBind`` → ``bindClaim``), because the kubelet refuses to start a pod whose claim is not reserved for it
(pkg/kubelet/cm/dra/manager.go ``prepareResources``: "pod … is not allowed to use ResourceClaim …").

One claim per replica (its pod's ``spec.resourceClaims`` names it, the job container's ``resources.claims`` uses
it), created after the pod so that the pod owns it (a controller ownerReference, as the resourceclaim controller
gives a claim it generates from a pod's ResourceClaimTemplate: pkg/controller/resourceclaim/controller.go; the
controller and the garbage collector then remove it with the pod even if Microcosm does not). Each engine device is
one request of count 1 of its device class with a CEL selector that pins it (:func:`device_selector`: a GPU's or MIG
instance's uuid; a dynamic-MIG partition's parent uuid and profile), so the claim says what it holds to a human and
to any allocator; the fabric devices of a multi-node replica are one request of their count. The allocation result
names the published :class:`~scheduler.gateways.kube.dra_devices.DraDevice` (driver, pool, device) each engine
device maps to.

PCIe alignment: GPUDirect RDMA moves a gang's gradients between a GPU and an EFA interface peer to peer, which
only stays off the CPU's interconnect when both sit under one PCIe root (NVIDIA's GPUDirect RDMA guide, "Supported
Systems": the devices "share the same upstream PCI Express root complex"; AWS's p4d/p5 EFA layouts pair each GPU
with the EFA interfaces behind its PCIe switch). So a replica's fabric devices are the free ones on its GPUs' roots
first (the standard ``resource.kubernetes.io/pcieRoot`` attribute, :mod:`scheduler.gateways.kube.dra_slices`), and
when its GPUs and fabric devices all share one root the claim says so: a ``spec.devices.constraints`` entry
``matchAttribute: resource.kubernetes.io/pcieRoot`` over those requests (k8s.io/api resource/v1 types.go
``DeviceConstraint``: every device allocated for the listed requests has the attribute, with one value; the
structured allocator's ``matchAttributeConstraint``), so that any allocator that re-allocates the claim keeps
the alignment. A node that publishes no pcieRoot gets its fabric devices in name order and no constraint.

Pure: no ``kubernetes`` import; the calls are :class:`~scheduler.gateways.kube.client.KubeClient`'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.errors import GatewayConflict
from scheduler.gateways.kube.dra_devices import DraDevice, DraDeviceKind, DraNode
from scheduler.gateways.kube.fabrics import EFA_RESOURCE, MAIN_CONTAINER
from scheduler.gateways.kube.pods import GPU_RESOURCE, MIG_RESOURCE_PREFIX, pod_name
from scheduler.gateways.protocol import Device

GROUP = "resource.k8s.io"
VERSION = "v1"
# The DeviceClasses the NVIDIA GPU DRA driver installs (kubernetes-sigs/dra-driver-nvidia-gpu, its Helm chart's
# DeviceClasses; MIG devices are in their own class): whole GPUs and MIG devices.
GPU_CLASS = "gpu.nvidia.com"
MIG_CLASS = "mig.nvidia.com"
# The finalizer kube-scheduler puts on a claim it allocates, so the claim cannot vanish while its devices are
# allocated (k8s.io/api/resource/v1 types.go ``Finalizer``; dynamicresources.go bindClaim adds it in a normal
# update before writing the allocation). The resourceclaim controller removes it once the claim is deallocated.
DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"
CLAIM_REF = "devices"  # the pod's name for its claim (spec.resourceClaims[].name, containers' resources.claims)
CLAIM_SUFFIX = "-devices"
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"  # deviceattribute/attribute.go StandardDeviceAttributePCIeRoot
RESERVED_FOR_MAX = 256  # types.go ResourceClaimReservedForMaxSize

DeviceKey = tuple[str, str, str]  # (driver, pool, device): a device's identity in allocation results


def claim_name(job: str, replica: int, generation: int = 0) -> str:
    """The claim of a replica's pod: the pod's name and ``-devices``."""
    return pod_name(job, replica, generation) + CLAIM_SUFFIX


def device_key(device: DraDevice) -> DeviceKey:
    return (device.driver, device.pool, device.name)


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    """One request of the claim and the devices Microcosm allocates for it (its count is their number)."""

    name: str  # a DNS label, unique in the claim (validation.go validateRequestName)
    device_class: str
    selectors: tuple[str, ...]  # CEL expressions
    devices: tuple[DraDevice, ...]
    # One of the requests whose devices all share one PCIe root: the claim's pcieRoot constraint lists it.
    aligned: bool = False


def _engine_device(device: Device) -> str:
    if device.mig_profile is None:
        return f"GPU {device.gpu}"
    start = "" if device.mig_start is None else f" at slice {device.mig_start}"
    return f"MIG {device.mig_profile} on GPU {device.gpu}{start}"


def device_selector(device: DraDevice) -> str:
    """The CEL selector that pins ``device`` by the attributes the NVIDIA driver publishes in every release
    (cmd/gpu-kubelet-plugin deviceinfo.go ``GpuInfo.Attributes``, ``MigDeviceInfo.GetDevice``; mig.go
    ``CommonAttributesMig``): a whole GPU or an existing MIG instance by its ``uuid``; a dynamic-MIG partition, which
    has no instance and so no uuid until its claim is prepared, by its GPU's ``parentUUID`` and its ``profile``. No
    attribute says a partition's placement (the memory slices are counters, partitions.go ``PartConsumesCounters``):
    the allocation result names the very device. Not ``index``/``parentIndex``: releases since v25.8 publish neither
    (NVIDIA/k8s-dra-driver-gpu 36fc80ab), and CEL fails on an attribute a device lacks, so no allocator could
    satisfy such a claim. A device read without a uuid (a driver that publishes none) is pinned by its type only."""
    attributes = f'device.attributes["{device.driver}"]'
    kind = "gpu" if device.kind is DraDeviceKind.GPU else "mig"
    terms = [f'{attributes}.type == "{kind}"']
    if device.partition:
        if device.parent_uuid:
            terms.append(f'{attributes}.parentUUID == "{device.parent_uuid}"')
        terms.append(f'{attributes}.profile == "{device.profile}"')
    elif device.uuid:
        terms.append(f'{attributes}.uuid == "{device.uuid}"')
    return " && ".join(terms)


def replica_requests(
    devices: Sequence[Device],
    node: DraNode,
    *,
    fabric_count: int = 0,
    taken: Iterable[DeviceKey] = (),
    fabric_class: str = "",
) -> tuple[ClaimRequest, ...]:
    """The requests for a replica's engine ``devices`` on ``node``, and ``fabric_count`` fabric devices not in
    ``taken`` (held by other claims). GatewayConflict when the node publishes none of an engine device (its inventory
    changed since observe: refuse rather than guess) or has too few free fabric devices.

    ``fabric_class`` ("": the fabric driver's name): the DeviceClass of the fabric driver's devices."""
    requests: list[ClaimRequest] = []
    for index, device in enumerate(devices):
        found = node.device_for(device)
        if found is None:
            raise GatewayConflict(
                f"node {node.node} publishes no {_engine_device(device)} in its ResourceSlices (the inventory changed "
                "since the cycle observed it); the next cycle re-plans"
            )
        if found.kind is DraDeviceKind.GPU:
            requests.append(ClaimRequest(f"gpu-{index}", GPU_CLASS, (device_selector(found),), (found,)))
        else:
            requests.append(ClaimRequest(f"mig-{index}", MIG_CLASS, (device_selector(found),), (found,)))
    if fabric_count > 0:
        held = set(taken)
        free = [d for d in sorted(node.fabrics(), key=device_key) if device_key(d) not in held]
        if len(free) < fabric_count:
            raise GatewayConflict(
                f"node {node.node} has {len(free)} free fabric devices of {len(node.fabrics())}; the replica needs "
                f"{fabric_count}"
            )
        roots = {d.pcie_root for r in requests for d in r.devices}
        # The free fabric devices on the GPUs' roots first (module doc); a stable sort keeps name order otherwise.
        free.sort(key=lambda d: not (d.pcie_root and d.pcie_root in roots))
        chosen = tuple(free[:fabric_count])
        driver = chosen[0].driver
        fabric = ClaimRequest("fabric", fabric_class or driver, (f'device.driver == "{driver}"',), chosen)
        if aligned(requests, chosen):
            requests = [ClaimRequest(r.name, r.device_class, r.selectors, r.devices, aligned=True) for r in requests]
            fabric = ClaimRequest(fabric.name, fabric.device_class, fabric.selectors, chosen, aligned=True)
        requests.append(fabric)
    return tuple(requests)


def aligned(requests: Sequence[ClaimRequest], fabrics: Sequence[DraDevice]) -> bool:
    """Do the GPU devices of ``requests`` and the ``fabrics`` all sit under one published PCIe root (so that the
    claim can say so with a matchAttribute constraint)? False without GPU devices or where a root is unknown."""
    roots = {d.pcie_root for r in requests for d in r.devices} | {d.pcie_root for d in fabrics}
    return bool(requests) and len(roots) == 1 and "" not in roots


def constraints(requests: Sequence[ClaimRequest]) -> list[dict[str, Any]]:
    """``spec.devices.constraints``: the pcieRoot match over the aligned requests (none when none is aligned)."""
    names = [r.name for r in requests if r.aligned]
    return [{"requests": names, "matchAttribute": PCIE_ROOT}] if names else []


def claim_manifest(
    *,
    name: str,
    namespace: str,
    requests: Sequence[ClaimRequest],
    labels: Mapping[str, str],
    pod: str,
    pod_uid: str,
) -> dict[str, Any]:
    """The ResourceClaim (API JSON, no status: the API server ignores a status on create), owned by its pod and
    protected by kube-scheduler's finalizer until Microcosm or the resourceclaim controller deallocates it."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ResourceClaim",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(labels),
            "finalizers": [DELETE_PROTECTION],
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": pod,
                    "uid": pod_uid,
                    "controller": True,
                    # No blockOwnerDeletion: setting it needs the pods/finalizers grant under the API server's
                    # OwnerReferencesPermissionEnforcement admission, and nothing waits on the claim's deletion.
                }
            ],
        },
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": r.name,
                        "exactly": {
                            "deviceClassName": r.device_class,
                            "allocationMode": "ExactCount",
                            "count": len(r.devices),
                            "selectors": [{"cel": {"expression": s}} for s in r.selectors],
                        },
                    }
                    for r in requests
                ],
                **({"constraints": found} if (found := constraints(requests)) else {}),
            }
        },
    }


def allocation(requests: Sequence[ClaimRequest], node: str) -> dict[str, Any]:
    """``status.allocation``: one result per allocated device, and the node selector the structured allocator
    writes for node-local devices (k8s.io/dynamic-resource-allocation structured allocator: a slice's ``nodeName``
    becomes ``matchFields`` on ``metadata.name``), which keeps the pod on the node its devices are on."""
    return {
        "devices": {
            "results": [
                {"request": r.name, "driver": d.driver, "pool": d.pool, "device": d.name}
                for r in requests
                for d in r.devices
            ]
        },
        "nodeSelector": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
        },
    }


def consumer(pod: str, uid: str) -> dict[str, str]:
    """A ``status.reservedFor`` entry for a pod (dynamicresources.go bindClaim: Resource "pods", Name, UID)."""
    return {"resource": "pods", "name": pod, "uid": uid}


def results_of(claim: Mapping[str, Any]) -> set[DeviceKey]:
    """The devices a claim's allocation holds; empty when it is not allocated."""
    allocated = ((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}
    return {
        (str(r.get("driver", "")), str(r.get("pool", "")), str(r.get("device", "")))
        for r in allocated.get("results") or []
    }


def reserved_for(claim: Mapping[str, Any], uid: str) -> bool:
    return any(ref.get("uid") == uid for ref in (claim.get("status") or {}).get("reservedFor") or [])


def owner_of(claim: Mapping[str, Any]) -> tuple[str, str]:
    """The pod that owns the claim (name, uid); ("", "") when none (controller.go ``owningPod``)."""
    for ref in (claim.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("apiVersion") == "v1" and ref.get("kind") == "Pod":
            return str(ref.get("name", "")), str(ref.get("uid", ""))
    return "", ""


def pod_with_claim(manifest: Mapping[str, Any], claim: str) -> dict[str, Any]:
    """``manifest`` (a replica's pod) taking its devices through ``claim``: the GPU, MIG and EFA extended resources
    leave every container's limits and requests (a DRA node advertises none, so the kubelet would refuse the pod),
    the pod names the claim and the job container uses it."""
    pod = {**manifest, "spec": dict(manifest["spec"])}
    spec = pod["spec"]

    def device_resource(name: str) -> bool:
        return name in (GPU_RESOURCE, EFA_RESOURCE) or name.startswith(MIG_RESOURCE_PREFIX)

    def strip(container: Mapping[str, Any], *, uses: bool) -> dict[str, Any]:
        resources = dict(container.get("resources") or {})
        for key in ("limits", "requests"):
            if key in resources:
                resources[key] = {k: v for k, v in resources[key].items() if not device_resource(k)}
        if uses:
            resources["claims"] = [{"name": CLAIM_REF}]
        return {**container, "resources": resources}

    spec["containers"] = [strip(c, uses=c.get("name") == MAIN_CONTAINER) for c in spec.get("containers") or []]
    if spec.get("initContainers"):
        spec["initContainers"] = [strip(c, uses=False) for c in spec["initContainers"]]
    spec["resourceClaims"] = [{"name": CLAIM_REF, "resourceClaimName": claim}]
    return pod
