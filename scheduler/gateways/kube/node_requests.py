"""Asking a cloud's autoscaler for nodes and giving them back: the calls behind
:class:`~scheduler.gateways.protocol.ProvisioningGateway` on Kubernetes. What the objects are and what their states
mean: :mod:`scheduler.gateways.kube.provisioning`; every API call: :class:`~scheduler.gateways.kube.client.KubeClient`.

- :meth:`NodeRequests.request` creates the request's PodTemplate, then its ProvisioningRequest (Cluster Autoscaler)
  or its placeholder pods (Karpenter). Asking again creates only what is missing; a refusal halfway removes what
  this call created (never half a request).
- :meth:`NodeRequests.observe` reads them back once a cycle: one LIST of ProvisioningRequests, one of PodTemplates,
  and, only while a Karpenter request is in flight, one of placeholder pods and one of NodeClaims.
- :meth:`NodeRequests.consume` is what a bind does on the request's nodes: on the Cluster Autoscaler the job's pods
  carry ``autoscaling.x-k8s.io/consume-provisioning-request``, so the CA counts them against the request and ends
  its booking (``processors/provreq/processor.go`` bookCapacity: ``CapacityBookingConsumed``) instead of holding
  phantom pods on those nodes for 10 minutes; on Karpenter the placeholders on those nodes are deleted (the job's pods
  need their GPUs; the device plugin gives a device to one pod only) and the PodTemplate records the nodes.
- :meth:`NodeRequests.withdraw` deletes every object of a request; nodes it brought stay until released.
- :meth:`NodeRequests.release` cordons the node (nothing new lands on it) and lets its autoscaler remove it: the
  Cluster Autoscaler scales an empty node down by itself after ``--scale-down-unneeded-time`` (10 min by default;
  ``cluster-autoscaler/core/scaledown/eligibility/eligibility.go``: a node below the GPU utilization threshold is
  unneeded unless annotated ``cluster-autoscaler.kubernetes.io/scale-down-disabled``; a cordon does not stop it);
  Karpenter's node is removed by deleting its NodeClaim, whose termination finalizer drains the node and terminates
  the instance (the Karpenter docs, aws/karpenter-provider-aws ``website/content/en/docs/concepts/disruption.md``,
  Manual methods) — not left to consolidation,
  which a NodePool may disable (``consolidateAfter: Never``).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from scheduler.errors import GatewayConflict, GatewayError
from scheduler.gateways.kube.client import KubeClient
from scheduler.gateways.kube.nodes import labels_of, name_of
from scheduler.gateways.kube.provisioning import (
    ASKED_AT_ANNOTATION,
    CLASS_ANNOTATION,
    CLUSTER_AUTOSCALER,
    CONSUME_ANNOTATION,
    DEFAULT_CLASS,
    KARPENTER,
    NODES_ANNOTATION,
    REQUEST_LABEL,
    ca_observation,
    consumed_nodes,
    insufficient_capacity,
    karpenter_observation,
    launch_failures,
    object_name,
    placeholder_manifest,
    pod_template_manifest,
    provisioning_request_manifest,
)
from scheduler.gateways.protocol import NodeRequestObservation, NodeRequestSpec
from scheduler.pool_labels import KARPENTER_POOL_LABEL

logger = logging.getLogger(__name__)

AUTOSCALER_ANNOTATION = "microcosm.io/autoscaler"
RELEASED_ANNOTATION = "microcosm.io/released"  # the cordon is a release's: the node is going back to its pool
SCALE_DOWN_DISABLED = "cluster-autoscaler.kubernetes.io/scale-down-disabled"  # eligibility.go ScaleDownDisabledKey


@dataclass
class _Held:
    """What the last observation saw of one job's request (for :meth:`NodeRequests.consume`)."""

    autoscaler: str
    namespace: str
    name: str
    pool: str
    provisioning_class: str = ""
    placeholders: list[dict[str, Any]] = field(default_factory=list)
    nodes: tuple[str, ...] = ()


class NodeRequests:
    """Node requests through the cluster's autoscaler (module doc)."""

    def __init__(self, client: KubeClient, *, clock: Callable[[], float]) -> None:
        self.client = client
        self.clock = clock
        self._held: dict[tuple[str, str], _Held] = {}  # (namespace, job) → its request, as last observed

    # -- asking ----------------------------------------------------------------------------------------------

    def request(self, spec: NodeRequestSpec, *, observed: bool = True) -> None:
        """Ask for ``spec``'s nodes (module doc). ``observed`` False: the deployment does not read requests back
        (``KUBE_NODE_REQUESTS`` off), so a request would never be seen to arrive: refused, saying so."""
        if not observed:
            raise GatewayConflict(
                f"node request {spec.id}: pool {spec.pool} is autoscaled but the worker does not observe node "
                "requests; set KUBE_NODE_REQUESTS=1 (docs/deploy.md, On-demand capacity through the cloud's autoscaler)"
            )
        _check(spec)
        name = object_name(spec.id)
        template = _marked(pod_template_manifest(spec), spec.autoscaler)
        # When it was asked, by the worker's clock: what an autoscaler's words must be newer than to be this
        # request's (provisioning.karpenter_observation).
        asked = datetime.fromtimestamp(self.clock(), tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        template["metadata"]["annotations"][ASKED_AT_ANNOTATION] = asked
        created: list[Callable[[], None]] = []
        try:
            if self.client.pod_template_create(template):
                created.append(lambda: self.client.pod_template_delete(spec.namespace, name))
            if spec.autoscaler == CLUSTER_AUTOSCALER:
                manifest = _marked(provisioning_request_manifest(spec), spec.autoscaler)
                self.client.provisioning_request_create(manifest)
            else:
                for index in range(spec.nodes):
                    pod = _marked(placeholder_manifest(spec, index), spec.autoscaler)
                    if self.client.placeholder_create(pod):
                        created.append(functools.partial(self.client.pod_delete, pod, grace_s=0))
        except GatewayError:
            for undo in reversed(created):
                try:
                    undo()
                except GatewayError as exc:  # the next withdraw of the id removes what is left
                    logger.error("node request %s: could not remove a part of it: %s", spec.id, exc)
            raise
        logger.info("node request %s: %d node(s) of pool %s for job %s", spec.id, spec.nodes, spec.pool, spec.job)

    def withdraw(self, *, request: str, namespace: str) -> None:
        name = object_name(request)
        self.client.provisioning_request_delete(namespace, name)
        for pod in self.client.placeholders(namespace=namespace, request=name):
            self.client.pod_delete(pod, grace_s=0)
        self.client.pod_template_delete(namespace, name)
        for key, held in list(self._held.items()):
            if held.namespace == namespace and held.name == name:
                del self._held[key]

    # -- reading back ----------------------------------------------------------------------------------------

    def observe(self, nodes: Sequence[Mapping[str, Any]]) -> tuple[NodeRequestObservation, ...]:
        """Every request Microcosm holds, whatever its state (module doc: what it reads)."""
        found: list[NodeRequestObservation] = []
        held: dict[tuple[str, str], _Held] = {}
        for pr in self.client.provisioning_requests():
            observation = ca_observation(pr)
            meta = pr.get("metadata") or {}
            klass = str((pr.get("spec") or {}).get("provisioningClassName") or DEFAULT_CLASS)
            held[(meta.get("namespace", ""), observation.job)] = _Held(
                CLUSTER_AUTOSCALER, meta.get("namespace", ""), meta.get("name", ""), observation.pool, klass
            )
            found.append(observation)
        templates = [
            t
            for t in self.client.pod_templates()
            if ((t.get("metadata") or {}).get("annotations") or {}).get(AUTOSCALER_ANNOTATION) == KARPENTER
        ]
        pending = [t for t in templates if not consumed_nodes(t)]
        placeholders = self.client.placeholders() if pending else []
        by_request: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for pod in placeholders:
            meta = pod.get("metadata") or {}
            by_request.setdefault((meta.get("namespace", ""), labels_of(pod).get(REQUEST_LABEL, "")), []).append(pod)
        ready = {name_of(n) for n in nodes if _ready(n)}
        failures = launch_failures(self.client.node_claims()) if pending else {}
        stockouts = self._stockouts() if pending else {}
        for template in templates:
            meta = template.get("metadata") or {}
            key = (meta.get("namespace", ""), meta.get("name", ""))
            pods = by_request.get(key, [])
            observation = karpenter_observation(
                template, pods, ready_nodes=ready, failures=failures, stockouts=stockouts
            )
            held[(key[0], observation.job)] = _Held(KARPENTER, key[0], key[1], observation.pool, placeholders=pods)
            found.append(observation)
        self._held = held
        return tuple(found)

    def _stockouts(self) -> dict[str, tuple[str, float]]:
        """Karpenter's insufficient-capacity Events per pool; none, with a warning, when they cannot be read (a
        missing grant, deploy/rbac.yaml): they only put words on a wait, the requests are read all the same."""
        try:
            return insufficient_capacity(self.client.node_claim_events())
        except GatewayError as exc:
            logger.warning("Karpenter's NodeClaim events could not be read: %s", exc)
            return {}

    # -- a bind onto the request's nodes ---------------------------------------------------------------------

    def consume(self, *, namespace: str, job: str, nodes: Mapping[str, str]) -> dict[str, str]:
        """What a bind of ``job`` onto ``nodes`` (name → pool) does about the job's request (module doc): the
        annotations its pods carry (Cluster Autoscaler: only when they land in the request's pool; elsewhere the
        booking runs out by itself), or the placeholders on those nodes removed (Karpenter). Reads the last
        :meth:`observe`: a job with no request seen there is left alone."""
        held = self._held.get((namespace, job))
        if held is None:
            return {}
        if held.autoscaler == CLUSTER_AUTOSCALER:
            if held.pool not in nodes.values():
                return {}
            return {CONSUME_ANNOTATION: held.name, CLASS_ANNOTATION: held.provisioning_class}
        mine = [p for p in held.placeholders if (p.get("spec") or {}).get("nodeName") in nodes]
        if mine:
            taken = sorted({str(p["spec"]["nodeName"]) for p in mine} | set(held.nodes))
            self.client.pod_template_patch(
                namespace, held.name, {"metadata": {"annotations": {NODES_ANNOTATION: ",".join(taken)}}}
            )
            for pod in mine:
                self.client.pod_delete(pod, grace_s=0)
            held.placeholders = [p for p in held.placeholders if p not in mine]
            held.nodes = tuple(taken)
        return {}

    # -- giving back -----------------------------------------------------------------------------------------

    def release(self, *, node: str) -> None:
        try:
            raw = self.client.node_read(node)
        except GatewayConflict:
            return  # gone already: released is released
        annotations = (raw.get("metadata") or {}).get("annotations") or {}
        if not (raw.get("spec") or {}).get("unschedulable") or RELEASED_ANNOTATION not in annotations:
            self.client.node_patch(
                node, {"spec": {"unschedulable": True}, "metadata": {"annotations": {RELEASED_ANNOTATION: "true"}}}
            )
        if labels_of(raw).get(KARPENTER_POOL_LABEL):
            claims = [c for c in self.client.node_claims() if (c.get("status") or {}).get("nodeName") == node]
            for claim in claims:
                self.client.node_claim_delete(name_of(claim))
            if not claims:
                logger.warning("node %s: no NodeClaim names it; Karpenter's consolidation must remove it", node)
            return
        if annotations.get(SCALE_DOWN_DISABLED) == "true":
            logger.warning(
                "node %s is annotated %s=true: the Cluster Autoscaler will never remove it; the platform must",
                node,
                SCALE_DOWN_DISABLED,
            )


def _check(spec: NodeRequestSpec) -> None:
    """Bad input is refused before anything is created, naming the field."""
    if spec.autoscaler not in (CLUSTER_AUTOSCALER, KARPENTER):
        raise GatewayConflict(
            f"node request {spec.id}: autoscaler {spec.autoscaler!r} is not one Kubernetes runs; the pool's autoscaler "
            f"must be {CLUSTER_AUTOSCALER!r} or {KARPENTER!r}"
        )
    if spec.nodes < 1 or spec.gpus_per_node < 1:
        raise GatewayConflict(
            f"node request {spec.id}: nodes ({spec.nodes}) and gpus_per_node ({spec.gpus_per_node}) must be at least 1"
        )
    if not spec.node_selector:
        raise GatewayConflict(
            f"node request {spec.id}: pool {spec.pool} has no node_selector; give it the label its nodes carry "
            "(karpenter.sh/nodepool, cloud.google.com/gke-nodepool, eks.amazonaws.com/nodegroup or "
            "kubernetes.azure.com/agentpool) or the autoscaler could place the request on any node"
        )
    if spec.autoscaler == KARPENTER and spec.provisioning_class:
        raise GatewayConflict(
            f"node request {spec.id}: provisioning_class {spec.provisioning_class!r} is the Cluster Autoscaler's; a "
            "Karpenter pool takes none"
        )


def _marked(manifest: dict[str, Any], autoscaler: str) -> dict[str, Any]:
    manifest["metadata"]["annotations"][AUTOSCALER_ANNOTATION] = autoscaler
    return manifest


def _ready(node: Mapping[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
