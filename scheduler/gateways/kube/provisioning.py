"""Node requests on Kubernetes, as pure data: the objects Microcosm creates to ask a cloud's autoscaler for nodes, and
what it reads back from them (docs/deploy.md, On-demand capacity through the cloud's autoscaler). The calls are
:class:`~scheduler.gateways.kube.node_requests.NodeRequests`'; nothing here talks to the API.

**Why objects, not pods.** Microcosm creates a job's pods only once it has placed them and binds them itself, so no
pod of Microcosm's ever carries ``PodScheduled=False, reason=Unschedulable`` — the only thing the Cluster Autoscaler
and Karpenter provision for. Each autoscaler is asked the way it listens instead:

- **Cluster Autoscaler and GKE** (``autoscaler == "cluster-autoscaler"``): a ``ProvisioningRequest``
  (``autoscaling.x-k8s.io/v1``) whose one pod set is ``nodes`` pods of a ``PodTemplate`` that asks for a whole
  node's GPUs in the pool (kubernetes/autoscaler ``cluster-autoscaler/apis/provisioningrequest/autoscaling.x-k8s.io/
  v1/types.go``). The class defaults to ``best-effort-atomic-scale-up.autoscaling.x-k8s.io``: all the nodes or none
  (``cluster-autoscaler/provisioningrequest/besteffortatomic/provisioning_class.go``). Its conditions map to
  :class:`~scheduler.gateways.protocol.NodeRequestState` in :func:`request_state`.
- **Karpenter** (``autoscaler == "karpenter"``): ``nodes`` placeholder pods (``registry.k8s.io/pause``) that the
  default scheduler schedules, with the pool's node selector and a node's GPUs each — the documented path: Karpenter
  provisions for pending pods that kube-scheduler marked unschedulable (kubernetes-sigs/karpenter
  ``pkg/controllers/provisioning/provisioner.go``, ``GetPendingPods`` and ``pkg/utils/pod/scheduling.go``
  ``IsProvisionable``), on every v1 release. Creating NodeClaims by hand is documented only from Karpenter v1.9
  (the Karpenter docs, aws/karpenter-provider-aws ``website/content/en/docs/concepts/nodeclaims.md``: "You can
  also create NodeClaims manually") and would make Microcosm name the cloud's NodeClass kind (EC2NodeClass,
  AKSNodeClass); placeholders need neither. Replicas bound to a Karpenter node carry :data:`DO_NOT_DISRUPT`. A
  ``PodTemplate`` labelled like the placeholders records the request (pool, job, the nodes it brought) for as long
  as the request lives: the placeholders go once the job's own pods take their place (:func:`consumed_nodes`).
  Karpenter batches pending pods (``pkg/controllers/provisioning/batcher.go``: ``batchIdleDuration`` 1 s,
  ``batchMaxDuration`` 10 s) and launches NodeClaims one by one, so a gang is **not atomic** there: some nodes may
  come and others not (an insufficient-capacity launch deletes its NodeClaim and the pod stays pending,
  ``pkg/controllers/nodeclaim/lifecycle/launch.go``). The request is PROVISIONED only when every placeholder runs on
  a Ready node; until then it is PENDING and names the nodes that came, which the loop releases if it withdraws, and
  says what holds the rest up in Karpenter's words (:func:`karpenter_observation`): a NodeClaim's launch failure, the
  ``InsufficientCapacityError`` Event of a NodeClaim of the pool deleted for want of capacity
  (:func:`insufficient_capacity`), else kube-scheduler's verdict on a placeholder.

**Pools.** A node's pool (:func:`scheduler.pool_labels.pool_of`) is the value of the first of its ``POOL_LABELS`` it
carries: the label
each autoscaler puts on the nodes it adds. The pool's ``node_selector`` names the same label, so the placeholders and
the template land only on that pool's nodes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from scheduler.gateways.kube.labels import TOLERATED_TAINTS
from scheduler.gateways.kube.pods import GPU_RESOURCE, JOB_LABEL, MANAGED_BY, SCHEDULER_NAME
from scheduler.gateways.protocol import NodeRequestObservation, NodeRequestSpec, NodeRequestState
from scheduler.pool_labels import KARPENTER_POOL_LABEL

CLUSTER_AUTOSCALER = "cluster-autoscaler"
KARPENTER = "karpenter"

PR_GROUP, PR_VERSION, PR_PLURAL = "autoscaling.x-k8s.io", "v1", "provisioningrequests"
NODECLAIM_GROUP, NODECLAIM_VERSION, NODECLAIM_PLURAL = "karpenter.sh", "v1", "nodeclaims"
# types.go: ProvisioningClassBestEffortAtomicScaleUp (all or nothing, with the cloud's scale-up) and
# ProvisioningClassCheckCapacity (only checks what the cluster has).
BEST_EFFORT_ATOMIC = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
CHECK_CAPACITY = "check-capacity.autoscaling.x-k8s.io"
# GKE's cluster autoscaler: a node pool created with queued provisioning takes nodes only through requests of this
# class, all at once, and its nodes carry the taint labels.TOLERATED_TAINTS tolerates (cloud.google.com
# kubernetes-engine/docs/how-to/provisioningrequest; the GKE API's NodePool.QueuedProvisioning).
QUEUED_PROVISIONING = "queued-provisioning.gke.io"
DEFAULT_CLASS = BEST_EFFORT_ATOMIC
# types.go: ProvisioningRequestPodAnnotationKey / ProvisioningClassPodAnnotationKey, what a pod that uses the
# request's capacity carries (the CA counts them: processors/provreq/processor.go bookCapacity).
CONSUME_ANNOTATION = "autoscaling.x-k8s.io/consume-provisioning-request"
CLASS_ANNOTATION = "autoscaling.x-k8s.io/provisioning-class-name"

REQUEST_LABEL = "microcosm.io/node-request"  # the request's id, on every object of it
POOL_ANNOTATION = "microcosm.io/pool"  # a pool name need not be a valid label value
NODES_ANNOTATION = "microcosm.io/node-request-nodes"  # Karpenter: the nodes the placeholders held, once consumed
NODE_COUNT_ANNOTATION = "microcosm.io/nodes"  # how many nodes the request asked for
ASKED_AT_ANNOTATION = "microcosm.io/asked-at"  # on the PodTemplate: when the worker asked (UTC, RFC 3339)
REQUESTS = REQUEST_LABEL  # the label selector of every request object (the key exists)

# Karpenter's reasons (pkg/events/reason.go; the Launched condition's reason in lifecycle/launch.go) and where
# client-go's recorder puts the Events of a cluster-scoped NodeClaim (tools/record/event.go makeEvent).
INSUFFICIENT_CAPACITY = "InsufficientCapacityError"
LAUNCH_FAILED = "LaunchFailed"
EVENT_NAMESPACE = "default"
# A NodeClaim's name: its NodePool's and the five characters the API server adds to the generateName "<nodepool>-"
# (kubernetes-sigs/karpenter pkg/controllers/provisioning/scheduling/nodeclaimtemplate.go; k8s.io/apimachinery
# pkg/util/rand's alphabet).
_NODECLAIM_NAME = re.compile(r"(.+)-[bcdfghjklmnpqrstvwxz2456789]{5}")
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"  # on a pod: Karpenter never voluntarily disrupts its node
PLACEHOLDER_IMAGE = "registry.k8s.io/pause:3.10"
# A gang's nodes in one zone at least: the autoscalers honour pod affinity in their scheduling simulation; the pool's
# own placement (an EC2 placement group in its launch template, a GKE compact placement policy) gives one leaf.
ZONE_LABEL = "topology.kubernetes.io/zone"

_NAME_JUNK = re.compile(r"[^a-z0-9-]+")


def object_name(request: str) -> str:
    """``mc-nr-<id>``: the ProvisioningRequest's and the PodTemplate's name (a DNS label)."""
    return f"mc-nr-{_NAME_JUNK.sub('-', request.lower()).strip('-')}"[:63].rstrip("-")


def placeholder_name(request: str, index: int) -> str:
    return f"{object_name(request)[:56]}-{index}"


def _labels(spec: NodeRequestSpec) -> dict[str, str]:
    return {REQUEST_LABEL: object_name(spec.id), JOB_LABEL: spec.job}


def _meta(spec: NodeRequestSpec, name: str, *, managed: bool = True) -> dict[str, Any]:
    labels = _labels(spec)
    if managed:
        labels[MANAGED_BY] = SCHEDULER_NAME
    return {
        "name": name,
        "namespace": spec.namespace,
        "labels": labels,
        "annotations": {POOL_ANNOTATION: spec.pool, REQUEST_LABEL: spec.id, NODE_COUNT_ANNOTATION: str(spec.nodes)},
    }


def pod_spec(spec: NodeRequestSpec) -> dict[str, Any]:
    """One node's worth of the request: a pause container asking for the node's GPUs, on the pool's nodes only."""
    gpus = {GPU_RESOURCE: str(spec.gpus_per_node)}
    body: dict[str, Any] = {
        "containers": [
            {
                "name": "capacity",
                "image": PLACEHOLDER_IMAGE,
                "resources": {"requests": dict(gpus), "limits": dict(gpus)},
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "runAsNonRoot": True,
                    "runAsUser": 65535,
                    "capabilities": {"drop": ["ALL"]},
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
            }
        ],
        "nodeSelector": dict(spec.node_selector),
        "tolerations": [
            {"key": key, "operator": "Exists"} if value is None else {"key": key, "operator": "Equal", "value": value}
            for key, value in TOLERATED_TAINTS
        ],
        # Seconds, not the default 30: a placeholder holds nothing worth draining.
        "terminationGracePeriodSeconds": 0,
        "restartPolicy": "Always",
    }
    if spec.placement_group and spec.nodes > 1:
        selector = {"matchLabels": {REQUEST_LABEL: object_name(spec.id)}}
        body["affinity"] = {
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": selector, "topologyKey": ZONE_LABEL}
                ]
            }
        }
    return body


def pod_template_manifest(spec: NodeRequestSpec) -> dict[str, Any]:
    """The request's PodTemplate: the pods a ProvisioningRequest's pod set stands for (types.go ``PodSet``) and, for
    Karpenter, the record of the request (module doc)."""
    return {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": _meta(spec, object_name(spec.id)),
        "template": {"metadata": {"labels": _labels(spec)}, "spec": pod_spec(spec)},
    }


def provisioning_request_manifest(spec: NodeRequestSpec) -> dict[str, Any]:
    """The ProvisioningRequest: one pod set of ``nodes`` pods of the template (types.go ``ProvisioningRequestSpec``),
    and the pool's class parameters as they are (types.go ``Parameters``: strings of at most 255 characters, at most
    100 of them; the pool's admin form checks both). Which parameters a class reads is the class's: the open-source
    classes read none of them (``processors/provreq/processor.go`` keeps its 10-minute booking and 7-day expiry
    fixed); ``atomic-scale-up.kubernetes.io`` reads ``ValidUntilSeconds``, how long it retries; GKE's
    ``queued-provisioning.gke.io`` reads ``maxRunDurationSeconds``, how long its nodes may run."""
    name = object_name(spec.id)
    body: dict[str, Any] = {
        "provisioningClassName": spec.provisioning_class or DEFAULT_CLASS,
        "podSets": [{"podTemplateRef": {"name": name}, "count": spec.nodes}],
    }
    if spec.provisioning_parameters:
        body["parameters"] = {str(k): str(v) for k, v in spec.provisioning_parameters.items()}
    return {
        "apiVersion": f"{PR_GROUP}/{PR_VERSION}",
        "kind": "ProvisioningRequest",
        "metadata": _meta(spec, name),
        "spec": body,
    }


def placeholder_manifest(spec: NodeRequestSpec, index: int) -> dict[str, Any]:
    """Karpenter's placeholder ``index``: scheduled by kube-scheduler (no ``schedulerName``), so an unschedulable one
    is what Karpenter provisions for. Without ``app.kubernetes.io/managed-by``: not one of Microcosm's job pods, its
    caches and observations leave it out."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _meta(spec, placeholder_name(spec.id, index), managed=False),
        "spec": pod_spec(spec),
    }


# -- reading them back ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Condition:
    type: str
    status: str
    reason: str
    message: str
    since: float | None


def conditions_of(obj: Mapping[str, Any]) -> dict[str, Condition]:
    return {
        str(c.get("type")): Condition(
            type=str(c.get("type")),
            status=str(c.get("status")),
            reason=str(c.get("reason") or ""),
            message=str(c.get("message") or ""),
            since=parse_time(c.get("lastTransitionTime")),
        )
        for c in ((obj.get("status") or {}).get("conditions") or [])
    }


def parse_time(value: Any) -> float | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _said(condition: Condition) -> str:
    return f"{condition.reason}: {condition.message}" if condition.message else condition.reason


def request_state(pr: Mapping[str, Any]) -> tuple[NodeRequestState, str, float | None]:
    """A ProvisioningRequest's conditions as a state, the autoscaler's words and since when (upstream: types.go's
    condition types; who sets them: ``processors/provreq/injector.go`` Accepted, ``provisioningrequest/
    besteffortatomic/provisioning_class.go`` Provisioned, ``processors/provreq/processor.go`` BookingExpired and
    Failed/Expired).

    - ``Failed=True``: FAILED (the CA gave up: expired after 7 days unprovisioned, or could not make the pods).
    - ``CapacityRevoked=True``: REVOKED (the capacity it provisioned is no longer there).
    - ``Provisioned=True``: PROVISIONED, also after ``BookingExpired`` (the nodes exist; only the CA's hold on them,
      which keeps them from scale-down, ended: 10 min after Provisioned, or once pods consumed it).
    - ``Provisioned=False`` (``CapacityIsNotFound``: a stockout, which the CA retries with backoff) and anything
      earlier: PENDING, with the autoscaler's words: the loop's own timeout withdraws it.
    """
    conditions = conditions_of(pr)
    for kind, state in (("Failed", NodeRequestState.FAILED), ("CapacityRevoked", NodeRequestState.REVOKED)):
        found = conditions.get(kind)
        if found is not None and found.status == "True":
            return state, _said(found), found.since
    provisioned = conditions.get("Provisioned")
    if provisioned is not None and provisioned.status == "True":
        expired = conditions.get("BookingExpired")
        note = f"; {_said(expired)}" if expired is not None and expired.status == "True" else ""
        return NodeRequestState.PROVISIONED, _said(provisioned) + note, provisioned.since
    if provisioned is not None:
        return NodeRequestState.PENDING, _said(provisioned), provisioned.since
    accepted = conditions.get("Accepted")
    if accepted is not None and accepted.status == "True":
        return NodeRequestState.PENDING, _said(accepted), accepted.since
    return NodeRequestState.PENDING, "not accepted by the Cluster Autoscaler yet", None


def _meta_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def request_id(obj: Mapping[str, Any]) -> str:
    """The request id Microcosm gave an object (its annotation; the label holds the name-safe form)."""
    meta = _meta_of(obj)
    return str((meta.get("annotations") or {}).get(REQUEST_LABEL) or (meta.get("labels") or {}).get(REQUEST_LABEL, ""))


def ca_observation(pr: Mapping[str, Any]) -> NodeRequestObservation:
    meta = _meta_of(pr)
    state, message, since = request_state(pr)
    return NodeRequestObservation(
        id=request_id(pr),
        job=str((meta.get("labels") or {}).get(JOB_LABEL, "")),
        pool=str((meta.get("annotations") or {}).get(POOL_ANNOTATION, "")),
        state=state,
        message=message,
        since=since,
    )


def consumed_nodes(template: Mapping[str, Any]) -> tuple[str, ...]:
    text = str((_meta_of(template).get("annotations") or {}).get(NODES_ANNOTATION) or "")
    return tuple(sorted(n for n in text.split(",") if n))


def karpenter_observation(
    template: Mapping[str, Any],
    placeholders: Sequence[Mapping[str, Any]],
    *,
    ready_nodes: set[str],
    failures: Mapping[str, str],
    stockouts: Mapping[str, tuple[str, float]] | None = None,
) -> NodeRequestObservation:
    """A Karpenter request from its template and its placeholders: PROVISIONED once every placeholder runs on a Ready
    node (or the job's pods took their place: :func:`consumed_nodes`), else PENDING with the nodes that came and what
    held the rest up, in Karpenter's words: a launch failure of the pool's NodeClaims in ``failures``, else the pool's
    last insufficient-capacity Event in ``stockouts`` (:func:`insufficient_capacity`) if it came after the request,
    else kube-scheduler's words on the pod. Karpenter never gives up on a pending pod: after a stockout its next batch
    tries again (launch.go deletes the NodeClaim, the pod stays pending), so there is no FAILED here: the loop's
    timeout withdraws, with those words."""
    meta = _meta_of(template)
    pool = str((meta.get("annotations") or {}).get(POOL_ANNOTATION, ""))
    job = str((meta.get("labels") or {}).get(JOB_LABEL, ""))
    count = int((meta.get("annotations") or {}).get(NODE_COUNT_ANNOTATION) or 0)
    consumed = consumed_nodes(template)
    rid = request_id(template)
    if consumed:
        return NodeRequestObservation(rid, job, pool, NodeRequestState.PROVISIONED, nodes=consumed)
    arrived: list[Mapping[str, Any]] = []
    waiting: list[Mapping[str, Any]] = []
    for pod in placeholders:
        node = (pod.get("spec") or {}).get("nodeName")
        (arrived if node and node in ready_nodes else waiting).append(pod)
    nodes = tuple(sorted({str((p.get("spec") or {})["nodeName"]) for p in arrived}))
    if arrived and not waiting and len(arrived) >= count:
        return NodeRequestObservation(rid, job, pool, NodeRequestState.PROVISIONED, nodes=nodes)
    message = failures.get(pool, "")
    stockout = (stockouts or {}).get(pool)
    asked_at = parse_time((meta.get("annotations") or {}).get(ASKED_AT_ANNOTATION) or meta.get("creationTimestamp"))
    if not message and stockout is not None and (asked_at is None or stockout[1] >= asked_at):
        message = stockout[0]
    if not message:
        for pod in waiting:
            scheduled = conditions_of(pod).get("PodScheduled")
            if scheduled is not None and scheduled.status == "False":
                message = _said(scheduled)
                break
    message = message or f"{len(arrived)} of {max(count, len(arrived) + len(waiting))} nodes ready"
    return NodeRequestObservation(rid, job, pool, NodeRequestState.PENDING, message=message, nodes=nodes)


def launch_failures(claims: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Per pool, the last NodeClaim launch failure Karpenter wrote: ``Launched=Unknown``, reason ``LaunchFailed`` and
    the cloud's message (``pkg/controllers/nodeclaim/lifecycle/launch.go``, ``SetUnknownWithReason``), or
    ``Launched=False`` as releases before v1 wrote it. An insufficient-capacity failure deletes its NodeClaim instead
    and leaves an Event (:func:`insufficient_capacity`)."""
    found: dict[str, str] = {}
    for claim in claims:
        launched = conditions_of(claim).get("Launched")
        if launched is not None and (
            launched.status == "False" or (launched.status == "Unknown" and launched.reason == LAUNCH_FAILED)
        ):
            pool = str((_meta_of(claim).get("labels") or {}).get(KARPENTER_POOL_LABEL, ""))
            found[pool] = _said(launched)
    return found


def insufficient_capacity(events: Sequence[Mapping[str, Any]]) -> dict[str, tuple[str, float]]:
    """Per pool, Karpenter's last ``InsufficientCapacityError`` Event on a NodeClaim of it, as ``(words, when)``:
    "InsufficientCapacityError: NodeClaim <name> event: insufficient capacity, <the cloud's words>"
    (``pkg/controllers/nodeclaim/lifecycle/events.go`` ``InsufficientCapacityErrorEvent``). The NodeClaim itself is
    deleted by then (launch.go), so its pool is read from its name (:data:`_NODECLAIM_NAME`); a name of another form,
    or an Event without a time, is left out."""
    found: dict[str, tuple[str, float]] = {}
    for event in events:
        if event.get("reason") != INSUFFICIENT_CAPACITY:
            continue
        named = _NODECLAIM_NAME.fullmatch(str((event.get("involvedObject") or {}).get("name") or ""))
        meta = _meta_of(event)
        at = parse_time(
            event.get("lastTimestamp") or event.get("eventTime") or event.get("firstTimestamp")
        ) or parse_time(meta.get("creationTimestamp"))
        if named is None or at is None:
            continue
        pool = named.group(1)
        if pool not in found or at >= found[pool][1]:
            found[pool] = (f"{INSUFFICIENT_CAPACITY}: {event.get('message') or ''}".rstrip(": "), at)
    return found
