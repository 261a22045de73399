"""The NVIDIA device plugin (with the kubelet's device manager) on each node: which devices a pod really gets.

A pod asks for a count of a resource type; the kubelet asks the plugin for a preferred allocation and the plugin
picks (NVIDIA/k8s-device-plugin ``internal/rm/nvml_manager.go``, ``getPreferredAllocation``): whole GPUs through
go-gpuallocator's best-effort policy (``vendor/github.com/NVIDIA/go-gpuallocator/gpuallocator/besteffort_policy.go``:
on GPUs with equal links every set scores the same, so the first set in the available order wins), MIG devices
through the greedy ``distributed`` policy (``internal/rm/allocate.go``; MIG devices have no replicas, so every
candidate ties). Either way: the first free devices in the plugin's order. Microcosm's ``microcosm.io/devices``
annotation plays no part, which is the point of this double.

Registered as a bind hook (``GatewayEmulator.bind_hooks``): the kubelet admits the pod once it is bound. Pods created
already on a node (other owners') are admitted by :meth:`DevicePlugin.admit_all`. The GPUs' real MIG state
(:attr:`DevicePlugin.gpus`) is what :mod:`tests.scheduler.kube_harness.mig_manager` applies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import kmock

PODS = "v1/pods"
GPU = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"


@dataclass(frozen=True, slots=True)
class DeviceId:
    """One device the plugin advertises: a whole GPU (``instance`` -1) or a MIG device on GPU ``gpu``."""

    resource: str
    gpu: int
    instance: int = -1


class DevicePlugin:
    """Devices per node from :attr:`gpus` (per GPU: ``()`` whole, else its MIG profiles) and who holds which."""

    def __init__(self, emulator: Any) -> None:
        self.emulator = emulator
        self.gpus: dict[str, list[tuple[str, ...]]] = {}
        self.assigned: dict[tuple[str, str], tuple[str, tuple[DeviceId, ...]]] = {}  # (ns, pod) → (node, devices)
        self.refused: list[tuple[str, str]] = []  # pods the kubelet refused (UnexpectedAdmissionError)

    def devices(self, node: str) -> list[DeviceId]:
        """What the plugin advertises on ``node`` under the mixed strategy, in its order (GPU index, instance)."""
        found = []
        for index, profiles in enumerate(self.gpus.get(node, [])):
            if not profiles:
                found.append(DeviceId(GPU, index))
            for k, profile in enumerate(profiles):
                found.append(DeviceId(MIG_PREFIX + profile.replace("+", "."), index, k))
        return found

    def _pod(self, namespace: str, name: str) -> Any | None:
        key = (kmock.resource(PODS), namespace, name)
        if key not in self.emulator.objects:
            return None
        obj = self.emulator.objects[key]
        return None if obj.deleted else obj

    def live(self, namespace: str, name: str) -> bool:
        pod = self._pod(namespace, name)
        return pod is not None and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")

    def in_use(self, node: str) -> set[DeviceId]:
        return {
            d
            for (ns, name), (on, devices) in self.assigned.items()
            if on == node and self.live(ns, name)
            for d in devices
        }

    def on_bind(self, namespace: str, name: str, node: str) -> None:
        """The bind hook: the kubelet on ``node`` admits the pod and the plugin allocates its devices."""
        self.admit(namespace, name, node)

    def admit(self, namespace: str, name: str, node: str) -> None:
        pod = self._pod(namespace, name)
        if pod is None or (namespace, name) in self.assigned:
            return
        wanted: dict[str, int] = {}
        for container in (pod.get("spec") or {}).get("containers") or []:
            resources = container.get("resources") or {}
            for key, value in {**(resources.get("requests") or {}), **(resources.get("limits") or {})}.items():
                if key == GPU or key.startswith(MIG_PREFIX):
                    wanted[key] = wanted.get(key, 0) + int(str(value))
        if not wanted:
            return
        used = self.in_use(node)
        picked: list[DeviceId] = []
        for resource, count in wanted.items():
            free = [d for d in self.devices(node) if d.resource == resource and d not in used]
            if len(free) < count:
                self.refused.append((namespace, name))
                return
            picked += free[:count]
        self.assigned[(namespace, name)] = (node, tuple(picked))

    def admit_all(self) -> None:
        """Admit every pod already on a node that has no devices yet (pods created with ``nodeName`` set)."""
        for key in list(self.emulator.objects):
            if key[0] != kmock.resource(PODS):
                continue
            pod = self._pod(key[1], key[2])
            node = ((pod or {}).get("spec") or {}).get("nodeName")
            if node:
                self.admit(key[1], key[2], node)

    def holders(self, node: str, gpus: set[int]) -> list[tuple[str, str]]:
        """Live pods truly holding a device of one of ``gpus`` on ``node``."""
        return sorted(
            (ns, name)
            for (ns, name), (on, devices) in self.assigned.items()
            if on == node and self.live(ns, name) and any(d.gpu in gpus for d in devices)
        )
