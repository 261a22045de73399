"""Which GPU pods a MIG reconfiguration must drain (no ``kubernetes`` import).

A pod asks for a count of a resource type (``nvidia.com/gpu: 1``, ``nvidia.com/mig-3g.40gb: 1``); the device
plugin, not Microcosm, picks the devices (NVIDIA/k8s-device-plugin ``internal/rm/nvml_manager.go``,
``getPreferredAllocation``: an aligned, topology-scored pick for whole GPUs, a greedy one for MIG devices), and
``microcosm.io/devices`` only records what Microcosm asked for. A pod left running on a GPU being reconfigured makes
MIG Manager fail the change (``docs/gpu-facts.md``, MIG Manager reconfiguration flow). So every pod holding a type
that a changing GPU offers today may be on it and must go: ``nvidia.com/gpu`` pods when a changing GPU is whole,
``nvidia.com/mig-<profile>`` pods when a changing GPU has that profile.

Narrower would need the real assignment, which only the node knows: the kubelet's PodResources API
(``/var/lib/kubelet/pod-resources/kubelet.sock``, ``List``) names the device IDs each container holds, so a node
agent reading it could report them (docs/deploy.md, How a MIG reconfiguration runs).

On a DRA node in static MIG (an A100 under the NVIDIA DRA driver keeps the relabel flow) a pod holds its GPU or MIG
device through a ResourceClaim and asks for no such resource, and there the assignment *is* known: the scheduler that
allocated the claim wrote it in the claim's ``status.allocation.devices.results`` (driver, pool, device), and the
node's ResourceSlices say which GPU each device is (a whole GPU ``gpu-<minor>``, a MIG instance its parent's:
:mod:`scheduler.gateways.kube.dra_slices`). So such a pod is in the way only when its claims hold a device of a GPU
being reconfigured (:func:`claim_gpus`, :func:`pod_in_the_way`), as precise as a node agent's PodResources reading
would be. The pod's claims are those its ``spec.resourceClaims`` name, directly or, for a claim made from a template,
through ``status.resourceClaimStatuses`` (kubernetes ``staging/src/k8s.io/dynamic-resource-allocation/resourceclaim/
resourceclaim.go`` ``Name``). When that cannot be told (a claim not found or not allocated, a GPU driver's device the
node does not publish) the pod is taken whenever anything drains, as before.

With ``WITH_REBOOT=true`` a MIG **mode** change that the GPU reset cannot make reboots the node
(NVIDIA/mig-parted ``pkg/mig/reconfigure/reconfigure.go``, ``applyMigModeChange``), which ends every pod on it: a
change that turns MIG on or off on any GPU then drains every GPU pod of the node.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from scheduler.core.model.snapshot import MigLayout
from scheduler.gateways.kube.dra_claims import device_key, results_of
from scheduler.gateways.kube.dra_devices import DraNode
from scheduler.gateways.kube.dra_slices import NVIDIA_GPU_DRIVER
from scheduler.gateways.kube.pods import GPU_RESOURCE, gpu_requests, mig_resource


def offered(layout: MigLayout) -> frozenset[str]:
    """The resource types one GPU offers: the whole GPU when MIG is off, else one per profile it holds."""
    return frozenset(mig_resource(profile) for profile, _start in layout) if layout else frozenset({GPU_RESOURCE})


def gpus_in_the_way(
    current: Sequence[MigLayout], wanted: Sequence[MigLayout], *, with_reboot: bool = False
) -> frozenset[int]:
    """The GPUs (by index) whose pods a change from ``current`` to ``wanted`` drains: those it changes, or every GPU
    of the node when a reboot may turn MIG on or off (module doc)."""
    changing = [i for i in range(len(wanted)) if i >= len(current) or current[i] != wanted[i]]
    mode_flips = any(i < len(current) and bool(current[i]) != bool(wanted[i]) for i in changing)
    gpus = range(len(current)) if with_reboot and mode_flips else changing
    return frozenset(i for i in gpus if i < len(current))


def resources_in_the_way(
    current: Sequence[MigLayout], wanted: Sequence[MigLayout], *, with_reboot: bool = False
) -> frozenset[str]:
    """The resource types whose pods a change from ``current`` to ``wanted`` drains (module doc)."""
    gpus = gpus_in_the_way(current, wanted, with_reboot=with_reboot)
    return frozenset().union(*(offered(current[i]) for i in gpus))


HeldGpus = Callable[[Mapping[str, Any]], frozenset[int] | None]  # a pod → the GPUs its claims hold (None: unknown)


def pod_in_the_way(
    pod: Mapping[str, Any],
    resources: frozenset[str],
    gpus: frozenset[int] = frozenset(),
    held_gpus: HeldGpus | None = None,
) -> bool:
    """Must ``pod`` go for a change that drains ``resources`` on the GPUs ``gpus`` (:func:`resources_in_the_way`,
    :func:`gpus_in_the_way`)? A pod holding one of those resources does. One that takes its devices through
    ResourceClaims alone does when its claims hold a device of one of ``gpus`` (``held_gpus``: :func:`claim_gpus`),
    and whenever anything drains if that cannot be told (module doc)."""
    held = gpu_requests(pod)
    if resources.intersection(held):
        return True
    if not resources or held or not (pod.get("spec") or {}).get("resourceClaims"):
        return False
    found = held_gpus(pod) if held_gpus is not None else None
    return found is None or bool(found & gpus)


def pod_claim_names(pod: Mapping[str, Any]) -> list[str] | None:
    """The names of the ResourceClaims ``pod`` uses (resourceclaim.go ``Name``): one its ``spec.resourceClaims`` names
    directly, or the one made for it from a template, as ``status.resourceClaimStatuses`` records it; None when a
    template's claim is not recorded yet (which claim it is cannot be told)."""
    statuses = {
        str(s.get("name", "")): s.get("resourceClaimName")
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
    }
    names: list[str] = []
    for claim in (pod.get("spec") or {}).get("resourceClaims") or []:
        if claim.get("resourceClaimName"):
            names.append(str(claim["resourceClaimName"]))
        elif claim.get("resourceClaimTemplateName"):
            made = statuses.get(str(claim.get("name", "")))
            if not made:
                return None
            names.append(str(made))
    return names


def claim_gpus(
    pod: Mapping[str, Any], claims: Mapping[tuple[str, str], Mapping[str, Any]], node: DraNode | None
) -> frozenset[int] | None:
    """The GPUs of ``node`` (by index) whose devices ``pod``'s claims hold, from the claims' allocation results
    (``claims``: every claim by namespace and name); None when that cannot be told (module doc). Devices of other
    drivers (an EFA interface) hold no GPU."""
    names = pod_claim_names(pod)
    if names is None or node is None:
        return None
    namespace = str((pod.get("metadata") or {}).get("namespace", ""))
    published = {device_key(d): d for d in node.devices}
    gpus: set[int] = set()
    for name in names:
        claim = claims.get((namespace, name))
        if claim is None or not (claim.get("status") or {}).get("allocation"):
            return None
        for key in results_of(claim):
            device = published.get(key)
            if device is not None and device.gpu_index is not None:
                gpus.add(device.gpu_index)
            elif key[0] == NVIDIA_GPU_DRIVER:
                return None  # a GPU driver's device the node does not publish (any more): which GPU is not known
    return frozenset(gpus)
