"""The GPU Operator's MIG Manager, one per node, stepped by the test on its manual clock.

Modelled on NVIDIA/mig-parted ``cmd/nvidia-mig-manager/main.go`` and ``pkg/mig/reconfigure/reconfigure.go``
(snapshot 2026-08-21) and NVIDIA/gpu-operator ``assets/state-mig-manager/0600_daemonset.yaml`` with
``controllers/object_controls.go``:

- **The config is a mounted ConfigMap.** With ``spec.migManager.config.name`` set, the operator mounts that
  ConfigMap at ``/mig-parted-config`` and sets ``CONFIG_FILE=/mig-parted-config/config.yaml``; nothing watches it
  or rolls the pods on a change. The kubelet refreshes a mounted ConfigMap on its periodic sync from a TTL cache
  (kubernetes/kubernetes ``pkg/kubelet/volume/configmap`` via ``pkg/kubelet/configmap/configmap_manager.go`` and
  ``pkg/kubelet/util/manager/cache_based_manager.go``, ``defaultTTL = time.Minute``; kubelet ``--sync-frequency``
  1 m): a write shows in the file only ``propagation_s`` later (60–90 s by default).
- **Only a change of the label's value acts** (``ContinuouslySyncMigConfigChanges``: ``UpdateFunc`` sets the value
  when old ≠ new; every watch event counts, so a flip to another value and back is seen); **start-up applies the
  current value** (``AddFunc``), so deleting the pod (the DaemonSet makes a new one) re-applies it.
- **Reconfigure, in order** (``Reconfigure.Run``): assert the name is in the file (``assert --valid-config``),
  else state ``failed``; already applied → ``success``; state ``pending``; stop the GPU clients; the MIG **mode**
  change (a GPU reset): if it fails and ``WITH_REBOOT=true``, state ``rebooting`` and reboot the host; then apply
  the geometry, which fails while a process holds an instance of a GPU being changed (mig-parted cannot destroy
  instances in use: ``docs/gpu-facts.md``, MIG Manager reconfiguration flow), → ``failed``; else ``success``.
- GPU Feature Discovery then publishes ``nvidia.com/mig-<profile>.count`` (k8s-device-plugin
  ``docs/gpu-feature-discovery/README.md``, mixed strategy), which Microcosm reads.

What holds a GPU comes from :class:`tests.scheduler.kube_harness.device_plugin.DevicePlugin`, never from
Microcosm's annotations.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import yaml
from kubernetes.client.exceptions import ApiException

from tests.scheduler.kube_harness.device_plugin import DevicePlugin

CONFIG = "nvidia.com/mig.config"
STATE = "nvidia.com/mig.config.state"
MANAGER_APP = "nvidia-mig-manager"
# The PCI device ID mig-parted matches device-filter against, per GFD product (NVIDIA/gpu-operator
# assets/state-mig-manager/0400_configmap.yaml, the all-balanced filters).
DEVICE_IDS = {
    "NVIDIA-H100-80GB-HBM3": "0x233010DE",
    "NVIDIA-A100-SXM4-80GB": "0x20B210DE",
    "NVIDIA-A100-SXM4-40GB": "0x20B010DE",
    "NVIDIA-H100-NVL": "0x232110DE",
    "NVIDIA-H200": "0x233510DE",
}


@dataclass
class NodeManager:
    """One node's MIG Manager: what it has seen of the node's label and the ConfigMap."""

    node: str
    device_id: str
    seen_versions: int = 0  # node history entries already delivered to the informer
    last_value: str | None = None
    rebooting: str = ""  # the value being applied across a reboot
    runs: list[str] = field(default_factory=list)  # "value: outcome", for assertions and debugging


class MigManagers:
    """Every node's MIG Manager (module doc); call :meth:`step` after each gateway call the test makes."""

    def __init__(
        self,
        cluster: Any,
        plugin: DevicePlugin,
        *,
        namespace: str = "gpu-operator",
        config_map: str = "microcosm-mig-config",
        propagation_s: float = 90.0,
        with_reboot: bool = False,
        reset_blocked: bool = False,
    ) -> None:
        self.cluster = cluster
        self.plugin = plugin
        self.namespace = namespace
        self.config_map = config_map
        self.propagation_s = propagation_s
        self.with_reboot = with_reboot
        self.reset_blocked = reset_blocked  # a cloud VM's passthrough GPU: a reset cannot change the MIG mode
        self.versions: list[tuple[float, str]] = []  # (when written, config.yaml), as the API server holds them
        self.managers: dict[str, NodeManager] = {}

    # -- setting up --------------------------------------------------------------------------------------

    def add(self, node: str, gpus: list[tuple[str, ...]], *, now: float) -> None:
        """Start a MIG Manager on ``node`` whose GPUs are ``gpus`` (per GPU: ``()`` whole, else its profiles)."""
        raw = self.cluster.node(node)
        product = raw["metadata"]["labels"].get("nvidia.com/gpu.product", "")
        self.plugin.gpus[node] = list(gpus)
        manager = NodeManager(node, DEVICE_IDS.get(product, ""))
        manager.seen_versions = len(self._history(node))
        manager.last_value = raw["metadata"]["labels"].get(CONFIG)
        self.managers[node] = manager
        self._pod_create(node)
        self._poll_config(now)

    # -- the file MIG Manager reads ----------------------------------------------------------------------

    def _poll_config(self, now: float) -> None:
        try:
            cm = self.cluster.core.read_namespaced_config_map(self.config_map, self.namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
            return
        text = (cm.data or {}).get("config.yaml", "")
        if not self.versions or self.versions[-1][1] != text:
            self.versions.append((now, text))

    def mounted(self, now: float) -> str:
        """``/mig-parted-config/config.yaml`` on the node at ``now``: the latest write older than the delay."""
        seen = [text for written, text in self.versions if written + self.propagation_s <= now]
        return seen[-1] if seen else ""

    # -- stepping ----------------------------------------------------------------------------------------

    def step(self, now: float) -> None:
        """Deliver what happened since the last step: ConfigMap writes, label changes, MIG Manager restarts."""
        self._poll_config(now)
        self.plugin.admit_all()
        for manager in self.managers.values():
            if manager.rebooting:
                booted, manager.rebooting = manager.rebooting, ""
                self._reconfigure(manager, booted, now, after_reboot=True)
                continue
            values = [
                (v["metadata"].get("labels") or {}).get(CONFIG) for v in self._history(manager.node) if v is not None
            ]
            fresh, manager.seen_versions = values[manager.seen_versions :], len(values)
            changed = False
            for value in fresh:
                if value != manager.last_value:
                    changed, manager.last_value = True, value
            restarted = not self._pod_exists(manager.node)
            if restarted:
                self._pod_create(manager.node)
            if (changed or restarted) and manager.last_value:
                self._reconfigure(manager, manager.last_value, now)

    def _reconfigure(self, manager: NodeManager, value: str, now: float, *, after_reboot: bool = False) -> None:
        node = manager.node
        document = yaml.safe_load(self.mounted(now) or "{}") or {}
        configs = document.get("mig-configs") or {}
        if value not in configs:  # validateMigConfig: "selected mig-config not present"
            self._finish(manager, value, "failed", "not in the mounted config")
            return
        current = self.plugin.gpus[node]
        wanted = self._resolve(configs[value], manager.device_id, current)
        if wanted == current:  # isConfigAlreadyApplied
            self._finish(manager, value, "success", "already applied")
            return
        self._label(node, {STATE: "pending"})
        changing = {i for i in range(len(current)) if current[i] != wanted[i]}
        mode = {i for i in changing if bool(current[i]) != bool(wanted[i])}
        mode_fails = bool(mode) and not after_reboot and (self.reset_blocked or bool(self.plugin.holders(node, mode)))
        if mode_fails and self.with_reboot:  # applyMigModeChange failed: rebooting, then `chroot /host reboot`
            self._label(node, {STATE: "rebooting"})
            for namespace, pod in self._pods_on(node):  # a reboot ends every pod on the node
                self.cluster.core.delete_namespaced_pod(pod, namespace, grace_period_seconds=0)
            manager.rebooting = value
            manager.runs.append(f"{value}: rebooting")
            return
        if mode_fails:  # without WITH_REBOOT the run goes on and applyMigConfig fails on the unchanged mode
            self._finish(manager, value, "failed", "MIG mode change failed")
            return
        if self.plugin.holders(node, changing):  # applyMigConfig: instances in use cannot be destroyed
            self._finish(manager, value, "failed", f"in use: {self.plugin.holders(node, changing)}")
            return
        self.plugin.gpus[node] = wanted
        self._gfd_labels(node, wanted)
        self._finish(manager, value, "success", "applied")

    @staticmethod
    def _resolve(
        entries: list[dict[str, Any]], device_id: str, current: list[tuple[str, ...]]
    ) -> list[tuple[str, ...]]:
        """Per-GPU profiles a config gives (mig-parted ``api/spec/v1``: ``device-filter``, ``devices``,
        ``mig-enabled``, ``mig-devices``); a GPU no entry matches keeps its state."""
        wanted = list(current)
        for entry in entries:
            filters = entry.get("device-filter")
            if filters is not None:
                filters = [filters] if isinstance(filters, str) else filters
                if device_id.lower() not in {f.lower() for f in filters}:
                    continue
            devices = entry.get("devices", "all")
            indices = range(len(current)) if devices == "all" else devices
            for i in indices:
                counts = Counter(entry.get("mig-devices") or {}) if entry.get("mig-enabled") else Counter()
                wanted[i] = tuple(sorted(counts.elements()))
        return wanted

    # -- API writes, as MIG Manager and GFD make them ----------------------------------------------------

    def _finish(self, manager: NodeManager, value: str, state: str, why: str) -> None:
        self._label(manager.node, {STATE: state})
        manager.runs.append(f"{value}: {state} ({why})")

    def _label(self, node: str, labels: dict[str, str | None]) -> None:
        self.cluster.patch_node(node, {"metadata": {"labels": labels}})
        manager = self.managers[node]
        manager.seen_versions = len(self._history(node))  # its own writes do not change mig.config

    def _gfd_labels(self, node: str, gpus: list[tuple[str, ...]]) -> None:
        labels = self.cluster.node(node)["metadata"]["labels"]
        counts = Counter(p for profiles in gpus for p in profiles)
        body: dict[str, str | None] = {
            k: None for k in labels if k.startswith("nvidia.com/mig-") and k.endswith(".count")
        }
        body.update({f"nvidia.com/mig-{p.replace('+', '.')}.count": str(n) for p, n in counts.items()})
        self._label(node, body)

    def _history(self, node: str) -> list[Any]:
        return list(self.cluster.handler.objects["v1/nodes", None, node].history)

    def _pods_on(self, node: str) -> list[tuple[str, str]]:
        return [
            (p["metadata"]["namespace"], p["metadata"]["name"])
            for p in self.cluster.pods()
            if p["spec"].get("nodeName") == node and (p["metadata"].get("labels") or {}).get("app") != MANAGER_APP
        ]

    def _pod_name(self, node: str) -> str:
        return f"nvidia-mig-manager-{node}"

    def _pod_exists(self, node: str) -> bool:
        return any(p["metadata"]["name"] == self._pod_name(node) for p in self.cluster.pods(self.namespace))

    def _pod_create(self, node: str) -> None:
        self.cluster.add_pod(self.namespace, self._pod_name(node), node=node, resources={}, labels={"app": MANAGER_APP})
