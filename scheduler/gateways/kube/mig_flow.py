"""The MIG relabel flow of :class:`scheduler.gateways.kube.gateway.KubeGateway`, as a collaborator it holds.

Requesting a change (:meth:`MigFlow.apply`) writes the mig-parted config, cordons the node and drains the
GPU pods in the way; :meth:`MigFlow.watch` (the gateway's maintenance step) then moves each node one step:
relabel once drained and the config has reached MIG Manager, success → uncordon, retry once a failure soon after
a config write, recover a node wedged in ``pending``, fail after the timeout. What
each step is comes from the pure :mod:`scheduler.gateways.kube.mig`; this module sequences the API calls
through the small :class:`NodeApi` it is given (:class:`~scheduler.gateways.kube.client.KubeClient` in
production) and, like every module of this package but ``client``, does not import ``kubernetes``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from scheduler.core.gpus.catalog import LayoutError, validate_layout
from scheduler.core.model.snapshot import MigLayout
from scheduler.errors import GatewayConflict, GatewayError
from scheduler.gateways.kube.labels import (
    GPU_COUNT,
    GPU_MEMORY,
    GPU_PRODUCT,
    MIG_CAPABLE,
    MIG_CONFIG,
    MIG_CONFIG_STATE,
    MIG_LAYOUTS_ANNOTATION,
    current_mig,
    format_layouts_annotation,
    gpu_model_of,
)
from scheduler.gateways.kube.mig import (
    CORDONED_BY_US,
    FLOW_ANNOTATIONS,
    RECOVERIES,
    SINCE,
    Flow,
    Phase,
    Step,
    config_name,
    flow_annotations,
    flow_of,
    next_step,
    paused_deploy_labels,
    same_counts_per_gpu,
)
from scheduler.gateways.kube.mig_drain import HeldGpus, gpus_in_the_way, pod_in_the_way, resources_in_the_way
from scheduler.gateways.kube.nodes import annotations_of, int_or_none, labels_of, name_of
from scheduler.gateways.kube.pods import (
    MANAGED_BY,
    SCHEDULER_NAME,
    finished,
    terminating,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class MigEvent:
    """One step :meth:`MigFlow.watch` took on one node, for the task's log."""

    node: str
    step: Step
    detail: str = ""


class NodeApi(Protocol):
    """The API calls the flow makes: what it needs of :class:`~scheduler.gateways.kube.client.KubeClient`."""

    def nodes(self) -> list[dict[str, Any]]: ...
    def node_read(self, node: str) -> dict[str, Any]: ...
    def node_patch(self, node: str, body: Mapping[str, Any]) -> None: ...
    def pods_on(self, node: str) -> list[dict[str, Any]]: ...
    def mig_managers(self, node: str) -> list[dict[str, Any]]: ...
    def pod_delete(self, pod: Mapping[str, Any], *, grace_s: float | None = None) -> None: ...
    def pod_evict(self, pod: Mapping[str, Any], *, grace_s: float | None = None) -> None: ...
    def mig_config_write(
        self, name: str, layouts: Sequence[MigLayout], *, also_keep: set[str], now: float
    ) -> float: ...


class MigFlow:
    """MIG reconfiguration on Kubernetes (module doc): ``api`` makes the calls, ``clock`` dates each step.

    ``propagation_s``: how long after a ConfigMap write MIG Manager's mounted copy may still be the old one
    (``MIG_CONFIG_PROPAGATION_S``). ``with_reboot``: MIG Manager runs with ``WITH_REBOOT=true``, so a change of
    MIG mode may reboot the node, and a drain for one takes every GPU pod (``MIG_WITH_REBOOT``). ``held_gpus``: for a
    node, which of its GPUs a pod holds through its ResourceClaims (a static-MIG DRA node:
    :func:`scheduler.gateways.kube.mig_drain.claim_gpus`); without it such a pod goes whenever anything drains.
    """

    def __init__(
        self,
        api: NodeApi,
        *,
        clock: Callable[[], float],
        timeout_s: float,
        eviction_grace_s: int,
        propagation_s: float = 120.0,
        with_reboot: bool = False,
        held_gpus: Callable[[str], HeldGpus] | None = None,
    ) -> None:
        self.api = api
        self.clock = clock
        self.timeout_s = timeout_s
        self.eviction_grace_s = eviction_grace_s
        self.propagation_s = propagation_s
        self.with_reboot = with_reboot
        self.held_gpus = held_gpus
        self._configs_ensured = False

    def apply(self, *, node: str, layouts: tuple[MigLayout, ...]) -> None:
        raw = self.api.node_read(node)
        labels, annotations = labels_of(raw), annotations_of(raw)
        model = gpu_model_of(labels.get(GPU_PRODUCT, ""), int_or_none(labels.get(GPU_MEMORY)))
        count = int_or_none(labels.get(GPU_COUNT)) or 0
        if model is None or not count:
            raise GatewayConflict(f"node {node} has no GPU the catalog knows; its MIG layout cannot be set")
        if any(layouts) and labels.get(MIG_CAPABLE, "").lower() != "true":
            raise GatewayConflict(f"node {node}'s GPUs are not MIG-capable (label {MIG_CAPABLE} is not true)")
        if len(layouts) > count:
            raise GatewayConflict(f"node {node} has {count} GPUs, the request names {len(layouts)}")
        try:
            wanted = tuple(tuple(validate_layout(model, layouts[i] if i < len(layouts) else ())) for i in range(count))
        except LayoutError as exc:
            raise GatewayConflict(f"node {node}: {exc}") from None
        flow = flow_of(annotations, model, count)
        current = current_mig(model, count, labels, annotations)
        if flow is not None and flow.phase != Phase.FAILED and flow.desired == wanted:
            return  # already being applied
        if flow is None and current == wanted:
            return
        if (
            flow is None
            and labels.get(MIG_CONFIG_STATE, "success") == "success"
            and same_counts_per_gpu(current, wanted)
        ):
            # Same instances per GPU, other starts: starts are our bookkeeping, nothing to reconfigure.
            self.api.node_patch(
                node, {"metadata": {"annotations": {MIG_LAYOUTS_ANNOTATION: format_layouts_annotation(wanted)}}}
            )
            return
        name = config_name(wanted)
        now = self.clock()
        written = self.api.mig_config_write(name, wanted, also_keep={labels.get(MIG_CONFIG, "")}, now=now)
        cordoned_by_us = CORDONED_BY_US in annotations or not (raw.get("spec") or {}).get("unschedulable")
        new_flow = Flow(Phase.DRAINING, wanted, name, now, visible_at=written + self.propagation_s)
        body: dict[str, Any] = {
            "spec": {"unschedulable": True},
            "metadata": {
                "annotations": {**flow_annotations(new_flow), **({CORDONED_BY_US: "true"} if cordoned_by_us else {})}
            },
        }
        self.api.node_patch(node, body)
        if self._drain(node, current, wanted) == 0 and now >= new_flow.visible_at:
            self._relabel(node, new_flow, labels)

    def _drain(self, node: str, current: Sequence[MigLayout], wanted: Sequence[MigLayout]) -> int:
        """Ask the GPU pods that may stand in the way of the change from ``current`` to ``wanted`` to go; return how
        many are still there.

        A pod asks for a count of a resource type and the device plugin picks the devices
        (:mod:`scheduler.gateways.kube.mig_drain`), so every pod holding a type a changing GPU offers goes; a pod
        holding its devices through ResourceClaims goes when they are on a changing GPU. Microcosm's own go with
        their grace period, other owners' through the eviction subresource (their disruption budgets). Pods still
        terminating count as there.
        """
        in_the_way = resources_in_the_way(current, wanted, with_reboot=self.with_reboot)
        gpus = gpus_in_the_way(current, wanted, with_reboot=self.with_reboot)
        held = self.held_gpus(node) if self.held_gpus is not None and in_the_way else None
        left = 0
        for pod in self.api.pods_on(node):
            if finished(pod) or not pod_in_the_way(pod, in_the_way, gpus, held):
                continue
            ours = labels_of(pod).get(MANAGED_BY) == SCHEDULER_NAME
            left += 1
            if terminating(pod):
                continue
            if ours:
                self.api.pod_delete(pod, grace_s=self.eviction_grace_s)
                logger.info("node %s: draining pod %s for a MIG reconfiguration", node, name_of(pod))
            else:
                # A MIG reconfiguration has no deadline: the pod's own termination grace applies (kubectl drain's -1).
                self.api.pod_evict(pod)
        return left

    def _relabel(self, node: str, flow: Flow, labels: Mapping[str, str]) -> None:
        applying = Flow(
            Phase.APPLYING, flow.desired, flow.config, self.clock(), flow.recoveries, "", flow.visible_at, flow.retries
        )
        self.api.node_patch(
            node, {"metadata": {"labels": {MIG_CONFIG: flow.config}, "annotations": flow_annotations(applying)}}
        )
        if labels.get(MIG_CONFIG) == flow.config and labels.get(MIG_CONFIG_STATE) != "success":
            # The label already has this value (a retry after a failure): only a value change or a restart
            # makes MIG Manager act (docs/gpu-facts.md, MIG Manager reconfiguration flow), so restart it.
            self._restart_mig_manager(node, flow)

    def watch(self) -> tuple[MigEvent, ...]:
        """Move every node's MIG flow one step (:mod:`scheduler.gateways.kube.mig`); call it periodically.

        Drains what is left, relabels drained nodes, records success and uncordons, recovers a node stuck
        in ``pending`` (restore the paused deploy labels, restart MIG Manager) and declares failure after
        ``mig_config_timeout_s``. Returns what it did, for the log.
        """
        now = self.clock()
        self._ensure_configs(now)
        events = []
        for raw in self.api.nodes():
            labels, annotations, name = labels_of(raw), annotations_of(raw), name_of(raw)
            model = gpu_model_of(labels.get(GPU_PRODUCT, ""), int_or_none(labels.get(GPU_MEMORY)))
            count = int_or_none(labels.get(GPU_COUNT)) or 0
            flow = flow_of(annotations, model, count) if model and count else None
            if flow is None or flow.phase == Phase.FAILED:
                continue
            current = current_mig(model, count, labels, annotations) if model else ()
            left = 0
            if flow.phase == Phase.DRAINING:
                left = self._drain(name, current, flow.desired)
            step = next_step(
                flow, labels, gpu_pods_left=left, now=now, timeout_s=self.timeout_s, propagation_s=self.propagation_s
            )
            detail = self._step_take(step, name, flow, labels, annotations, left)
            if step != Step.WAIT:
                events.append(MigEvent(node=name, step=step, detail=detail))
        return tuple(events)

    def _step_take(
        self, step: Step, node: str, flow: Flow, labels: Mapping[str, str], annotations: Mapping[str, str], left: int
    ) -> str:
        if step == Step.RELABEL:
            self._relabel(node, flow, labels)
            return f"drained; {MIG_CONFIG}={flow.config}"
        if step == Step.SUCCEED:
            body: dict[str, Any] = {
                "metadata": {
                    "annotations": {
                        MIG_LAYOUTS_ANNOTATION: format_layouts_annotation(flow.desired),
                        CORDONED_BY_US: None,
                        **dict.fromkeys(FLOW_ANNOTATIONS),
                    }
                }
            }
            if CORDONED_BY_US in annotations:
                body["spec"] = {"unschedulable": False}
            self.api.node_patch(node, body)
            logger.info("node %s: MIG layout %s is live", node, flow.config)
            return "live; uncordoned" if CORDONED_BY_US in annotations else "live (left cordoned: not ours)"
        if step == Step.RETRY:
            # MIG Manager may have asserted against a mounted copy older than the write: wait out another
            # propagation, drain what may have come back, then relabel (a restart, the label being unchanged).
            now = self.clock()
            again = Flow(
                Phase.DRAINING,
                flow.desired,
                flow.config,
                now,
                flow.recoveries,
                "",
                now + self.propagation_s,
                flow.retries + 1,
            )
            self.api.node_patch(node, {"metadata": {"annotations": flow_annotations(again)}})
            logger.warning(
                "node %s: MIG reconfiguration to %s failed soon after its config was written; retrying",
                node,
                flow.config,
            )
            return f"{MIG_CONFIG_STATE}=failed soon after the config was written; relabel in {self.propagation_s:g}s"
        if step == Step.RECOVER:
            return self._restart_mig_manager(node, flow, recovering=True)
        if step == Step.FAIL:
            state = labels.get(MIG_CONFIG_STATE, "absent")
            reason = (
                f"drain timed out with {left} GPU pods left"
                if flow.phase == Phase.DRAINING
                else f"MIG Manager reported {state} for {flow.config}"
                if state == "failed"
                else f"no success within {self.timeout_s:g}s (state {state})"
            )
            failed = Flow(Phase.FAILED, flow.desired, flow.config, self.clock(), flow.recoveries, reason)
            self.api.node_patch(node, {"metadata": {"annotations": flow_annotations(failed)}})
            logger.error(
                "node %s: MIG reconfiguration to %s failed: %s; the node stays cordoned", node, flow.config, reason
            )
            return reason
        return ""

    def _ensure_configs(self, now: float) -> None:
        """Once per process: the ConfigMap holds every name the GPU Operator would offer, before ClusterPolicy is
        pointed at it (docs/deploy.md, the MIG Manager cut-over) and before any flow needs it."""
        if self._configs_ensured:
            return
        try:
            self.api.mig_config_write("", (), also_keep=set(), now=now)
        except GatewayError as exc:
            logger.warning("could not write the mig-parted ConfigMap's operator configs: %s; trying again later", exc)
            return
        self._configs_ensured = True

    def _restart_mig_manager(self, node: str, flow: Flow, *, recovering: bool = False) -> str:
        """The known wedge's remedy (``docs/gpu-facts.md``, MIG Manager reconfiguration flow): restore the operator's
        deploy labels, then restart the node's MIG Manager, which re-applies the current label value on start-up; with
        no MIG Manager pod to restart, flip the label to another value and back."""
        raw = self.api.node_read(node)
        paused = paused_deploy_labels(labels_of(raw))
        annotations = {SINCE: repr(self.clock())}
        if recovering:
            annotations[RECOVERIES] = str(flow.recoveries + 1)
        self.api.node_patch(node, {"metadata": {"labels": dict.fromkeys(paused, "true"), "annotations": annotations}})
        managers = self.api.mig_managers(node)
        for pod in managers:
            # Its own grace: a MIG Manager stopped mid-apply by a force delete leaves the GPUs half changed.
            self.api.pod_delete(pod)
        if not managers:
            self.api.node_patch(node, {"metadata": {"labels": {MIG_CONFIG: flow.config + "-flip"}}})
            self.api.node_patch(node, {"metadata": {"labels": {MIG_CONFIG: flow.config}}})
        how = f"restarted {len(managers)} MIG Manager pod(s)" if managers else f"flipped {MIG_CONFIG}"
        logger.warning(
            "node %s: MIG reconfiguration stuck; restored %s and %s", node, paused or "no deploy labels", how
        )
        return f"restored {len(paused)} deploy labels; {how}"
