"""Which GPU pods a MIG reconfiguration must drain, without knowing which devices they hold (no ``kubernetes`` import).

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
device through a ResourceClaim and asks for no such resource: which device its claim holds is in the claim, not the
pod, so such a pod is in the way of every reconfiguration of its node (:func:`pod_in_the_way`), as conservative as the
rule above.

With ``WITH_REBOOT=true`` a MIG **mode** change that the GPU reset cannot make reboots the node
(NVIDIA/mig-parted ``pkg/mig/reconfigure/reconfigure.go``, ``applyMigModeChange``), which ends every pod on it: a
change that turns MIG on or off on any GPU then drains every GPU pod of the node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from scheduler.core.model.snapshot import MigLayout
from scheduler.gateways.kube.pods import GPU_RESOURCE, gpu_requests, mig_resource


def offered(layout: MigLayout) -> frozenset[str]:
    """The resource types one GPU offers: the whole GPU when MIG is off, else one per profile it holds."""
    return frozenset(mig_resource(profile) for profile, _start in layout) if layout else frozenset({GPU_RESOURCE})


def resources_in_the_way(
    current: Sequence[MigLayout], wanted: Sequence[MigLayout], *, with_reboot: bool = False
) -> frozenset[str]:
    """The resource types whose pods a change from ``current`` to ``wanted`` drains (module doc)."""
    changing = [i for i in range(len(wanted)) if i >= len(current) or current[i] != wanted[i]]
    mode_flips = any(i < len(current) and bool(current[i]) != bool(wanted[i]) for i in changing)
    gpus = range(len(current)) if with_reboot and mode_flips else changing
    return frozenset().union(*(offered(current[i]) for i in gpus if i < len(current)))


def pod_in_the_way(pod: Mapping[str, Any], resources: frozenset[str]) -> bool:
    """Must ``pod`` go for a change that drains ``resources`` (:func:`resources_in_the_way`)? A pod holding one of
    them does; so does one that takes its devices through ResourceClaims alone (module doc), whenever any does."""
    held = gpu_requests(pod)
    if resources.intersection(held):
        return True
    return bool(resources) and not held and bool((pod.get("spec") or {}).get("resourceClaims"))
