"""Karpenter (v1) and, for the pods it provisions for, kube-scheduler: stepped by the test on its manual clock.

Modelled on kubernetes-sigs/karpenter (snapshot 2026) and the kube-scheduler behaviour it relies on. One
:meth:`Karpenter.step` runs, in order:

- **Termination.** A NodeClaim carries the ``karpenter.sh/termination`` finalizer; once deleted (by Karpenter or
  anyone: the Karpenter docs, aws/karpenter-provider-aws ``website/content/en/docs/concepts/disruption.md``, Manual
  methods) its node is cordoned and drained and the
  node and the NodeClaim go (``pkg/controllers/node/termination/controller.go``,
  ``pkg/controllers/nodeclaim/lifecycle/termination.go``).
- **Launch and registration** (``pkg/controllers/nodeclaim/lifecycle/launch.go``, ``registration.go``,
  ``initialization.go``): ``launch_s`` after its creation the cloud answers. Insufficient capacity (``ice``: the next
  N launches) publishes a Warning Event ``InsufficientCapacityError`` on the NodeClaim, "NodeClaim <name> event:
  insufficient capacity, <the cloud's words>" (``lifecycle/events.go`` ``InsufficientCapacityErrorEvent``;
  ``pkg/cloudprovider/types.go`` ``InsufficientCapacityError.Error``; the words aws/karpenter-provider-aws
  ``pkg/cloudprovider/cloudprovider.go`` ``Create`` uses when no offering is available), and **deletes the
  NodeClaim**; its pods stay pending and the next batch tries again. The Event is a core/v1 Event as client-go's
  recorder writes one (``pkg/operator/operator.go``: ``mgr.GetEventRecorderFor``; client-go
  ``tools/record/event.go`` ``makeEvent``): a NodeClaim is cluster-scoped, so it lands in namespace ``default``,
  named ``<object>.<unix nanoseconds in hex>``, ``involvedObject`` the NodeClaim, first and last timestamp now, count
  1, source ``karpenter``. Any other error (``launch_error``) leaves ``Launched=Unknown, reason LaunchFailed`` with
  the cloud's message (``SetUnknownWithReason``; older releases set it False) and retries. NodeClaims are named as
  the API server names a ``generateName`` of ``<nodepool>-`` (``provisioning/scheduling/nodeclaimtemplate.go``): the
  pool's name and five characters of apimachinery's ``util/rand`` alphabet. Success marks ``Launched=True``;
  ``register_s`` later the node joins (labels: the pool's, ``karpenter.sh/nodepool``,
  ``karpenter.sh/capacity-type``; its GPUs in capacity and allocatable, as the device plugin advertises them), Ready,
  and ``Registered``/``Initialized`` are set with ``status.nodeName``.
- **kube-scheduler** for pods of the default scheduler (no ``schedulerName``, or ``default-scheduler``): a pending
  pod is bound (the ``pods/binding`` subresource) to a Ready, uncordoned node its ``nodeSelector`` matches with
  enough free ``nvidia.com/gpu``; otherwise it gets ``PodScheduled=False, reason Unschedulable`` and the FitError's
  message "0/N nodes are available: …" (kubernetes ``pkg/scheduler/schedule_one.go`` ``handleSchedulingFailure``;
  ``pkg/scheduler/framework/types.go`` ``FitError.Error``). Pods of another scheduler (Microcosm's) are never touched.
- **Provisioning** (``pkg/controllers/provisioning/provisioner.go`` ``GetPendingPods``, ``pkg/utils/pod/scheduling.go``
  ``IsProvisionable``; ``batcher.go``): pods marked Unschedulable by kube-scheduler and not nominated to an in-flight
  NodeClaim are batched — the window closes ``batch_idle_s`` (1 s) after the last new pod or ``batch_max_s`` (10 s)
  after the first — then one NodeClaim per node's worth of GPUs, of the NodePool whose labels the pod selects, within
  the pool's limit (``spec.limits``; at the limit the pod stays pending). A NodeClaim in flight counts as capacity for
  the pods nominated to it.
- **Consolidation of empty nodes** (``pkg/controllers/disruption/emptiness.go``; ``pkg/apis/v1/nodepool.go``
  ``ConsolidateAfter``): a node of a pool with no pod but DaemonSets' (here: none live) for ``consolidateAfter`` has
  its NodeClaim deleted; ``consolidateAfter: Never`` (None) never; a node or a pod on it annotated
  ``karpenter.sh/do-not-disrupt: "true"`` is left alone (``disruption.md``, Pod-level and Node-level controls).

Karpenter's gangs are not atomic: each NodeClaim launches on its own, which is what a partial arrival test shows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

GROUP, VERSION, PLURAL = "karpenter.sh", "v1", "nodeclaims"
POOL_LABEL = "karpenter.sh/nodepool"
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
FINALIZER = "karpenter.sh/termination"
GPU = "nvidia.com/gpu"
EVENT_NAMESPACE = "default"  # where client-go's recorder puts the Events of a cluster-scoped object
INSUFFICIENT_CAPACITY = "InsufficientCapacityError"  # pkg/events/reason.go
# The cloud's words when no offering of the NodeClaim's instance types is available (aws/karpenter-provider-aws
# pkg/cloudprovider/cloudprovider.go, Create), as InsufficientCapacityError.Error wraps them.
ICE_WORDS = "insufficient capacity, all requested instance types were unavailable during launch"
_ALPHANUMS = "bcdfghjklmnpqrstvwxz2456789"  # k8s.io/apimachinery/pkg/util/rand: a generated name's suffix
MERGE_PATCH = "application/merge-patch+json"


@dataclass
class NodePool:
    """A Karpenter NodePool with one GPU instance type (its nodes' labels beside ``karpenter.sh/nodepool``)."""

    name: str
    labels: dict[str, str]
    gpus: int = 8
    limit_nodes: int = 10  # spec.limits, in nodes of this type
    consolidate_after_s: float | None = 0.0  # spec.disruption.consolidateAfter; None: Never
    ice: int = 0  # the next N launches find no capacity
    launch_error: str = ""  # every launch fails with this (LaunchFailed), "" none
    launch_s: float = 30.0
    register_s: float = 150.0
    created: int = 0


@dataclass
class _Claim:
    pool: str
    created_at: float
    pods: list[tuple[str, str]] = field(default_factory=list)  # nominated (namespace, name)
    launched_at: float | None = None
    node: str = ""


class Karpenter:
    """Karpenter and kube-scheduler over the emulator (module doc)."""

    def __init__(
        self, cluster: Any, pools: list[NodePool], *, batch_idle_s: float = 1.0, batch_max_s: float = 10.0
    ) -> None:
        self.cluster = cluster
        self.pools = {p.name: p for p in pools}
        self.batch_idle_s = batch_idle_s
        self.batch_max_s = batch_max_s
        self.claims: dict[str, _Claim] = {}
        self.events: list[tuple[str, str, str]] = []  # (object, reason, message), as Karpenter publishes them
        self.empty_since: dict[str, float] = {}
        self.removed: list[str] = []  # nodes terminated, in order
        self._batch_start: float | None = None
        self._batch_last: float | None = None
        self._batch_seen: set[tuple[str, str]] = set()

    def step(self, now: float) -> None:
        self._terminate()
        self._lifecycle(now)
        self._schedule()
        self._provision(now)
        self._consolidate(now)

    # -- reading the cluster -------------------------------------------------------------------------------

    def _json(self, obj: Any) -> dict[str, Any]:
        return dict(self.cluster.api_client.sanitize_for_serialization(obj))

    def _pods(self) -> list[dict[str, Any]]:
        return [
            p
            for p in (self._json(p) for p in self.cluster.core.list_pod_for_all_namespaces().items)
            if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]

    def _nodes(self) -> list[dict[str, Any]]:
        return [self._json(n) for n in self.cluster.core.list_node().items]

    def _claim_objects(self) -> dict[str, dict[str, Any]]:
        items = self.cluster.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"]
        return {c["metadata"]["name"]: c for c in items}

    @staticmethod
    def _gpus(pod: dict[str, Any]) -> int:
        return sum(
            int(((c.get("resources") or {}).get("requests") or {}).get(GPU, 0))
            for c in (pod.get("spec") or {}).get("containers") or []
        )

    @staticmethod
    def _default_scheduled(pod: dict[str, Any]) -> bool:
        return (pod.get("spec") or {}).get("schedulerName") in (None, "", "default-scheduler")

    # -- termination ---------------------------------------------------------------------------------------

    def _terminate(self) -> None:
        objects = self._claim_objects()
        for name, claim in list(self.claims.items()):
            obj = objects.get(name)
            if obj is not None and not obj["metadata"].get("deletionTimestamp"):
                continue
            if claim.node:
                self._drain_and_delete(claim.node)
            if obj is not None:  # the finalizer's work is done: the NodeClaim goes
                self.cluster.custom.patch_cluster_custom_object(
                    GROUP, VERSION, PLURAL, name, {"metadata": {"finalizers": []}}
                )
            del self.claims[name]

    def _drain_and_delete(self, node: str) -> None:
        for pod in self._pods():
            if (pod.get("spec") or {}).get("nodeName") == node:
                meta = pod["metadata"]
                try:
                    self.cluster.core.delete_namespaced_pod(meta["name"], meta["namespace"])
                except ApiException as exc:
                    if exc.status != 404:
                        raise
        try:
            self.cluster.delete_node(node)
        except ApiException as exc:
            if exc.status != 404:
                raise
        self.removed.append(node)
        self.empty_since.pop(node, None)

    # -- launch and registration ---------------------------------------------------------------------------

    def _set_conditions(self, name: str, conditions: list[dict[str, str]], **status: Any) -> None:
        self.cluster.custom.patch_cluster_custom_object_status(
            GROUP, VERSION, PLURAL, name, {"status": {"conditions": conditions, **status}}
        )

    def _lifecycle(self, now: float) -> None:
        for name, claim in list(self.claims.items()):
            pool = self.pools[claim.pool]
            if claim.launched_at is None and now >= claim.created_at + pool.launch_s:
                if pool.ice > 0:
                    pool.ice -= 1
                    message = f"NodeClaim {name} event: {ICE_WORDS}"
                    self.events.append((name, INSUFFICIENT_CAPACITY, message))
                    self._publish(name, INSUFFICIENT_CAPACITY, message, now)
                    self.cluster.custom.patch_cluster_custom_object(
                        GROUP, VERSION, PLURAL, name, {"metadata": {"finalizers": []}}
                    )
                    self.cluster.custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
                    del self.claims[name]
                    continue
                if pool.launch_error:
                    condition = {"type": "Launched", "status": "Unknown", "reason": "LaunchFailed"}
                    self._set_conditions(name, [{**condition, "message": pool.launch_error}])
                    continue
                claim.launched_at = now
                self._set_conditions(name, [{"type": "Launched", "status": "True", "reason": "Launched"}])
            if claim.launched_at is not None and not claim.node and now >= claim.launched_at + pool.register_s:
                claim.node = f"{name}-node"
                labels = {**pool.labels, POOL_LABEL: pool.name, "karpenter.sh/capacity-type": "on-demand"}
                gpus = {GPU: str(pool.gpus)}
                self.cluster.add_node(claim.node, labels, allocatable=dict(gpus), capacity=dict(gpus))
                done = [
                    {"type": kind, "status": "True", "reason": kind}
                    for kind in ("Launched", "Registered", "Initialized")
                ]
                self._set_conditions(name, done, nodeName=claim.node)

    def _publish(self, claim: str, reason: str, message: str, now: float) -> None:
        """A Warning Event on NodeClaim ``claim``, as client-go's recorder writes it (module doc)."""
        at = datetime.fromtimestamp(now, tz=UTC)
        uid = self._claim_objects().get(claim, {}).get("metadata", {}).get("uid", "")
        event = client.CoreV1Event(
            metadata=client.V1ObjectMeta(name=f"{claim}.{int(now * 1e9):x}", namespace=EVENT_NAMESPACE),
            involved_object=client.V1ObjectReference(
                api_version=f"{GROUP}/{VERSION}", kind="NodeClaim", name=claim, uid=uid
            ),
            reason=reason,
            message=message,
            type="Warning",
            count=1,
            first_timestamp=at,
            last_timestamp=at,
            source=client.V1EventSource(component="karpenter"),
            reporting_component="karpenter",
        )
        self.cluster.core.create_namespaced_event(EVENT_NAMESPACE, event)

    # -- kube-scheduler ------------------------------------------------------------------------------------

    def _schedule(self) -> None:
        pods = self._pods()
        nodes = self._nodes()
        used: dict[str, int] = {}
        for pod in pods:
            node = (pod.get("spec") or {}).get("nodeName")
            if node:
                used[node] = used.get(node, 0) + self._gpus(pod)
        for pod in pods:
            spec, meta = pod.get("spec") or {}, pod["metadata"]
            if spec.get("nodeName") or not self._default_scheduled(pod) or meta.get("deletionTimestamp"):
                continue
            selector, wanted = spec.get("nodeSelector") or {}, self._gpus(pod)
            fits = [
                n
                for n in nodes
                if all((n["metadata"].get("labels") or {}).get(k) == v for k, v in selector.items())
                and not (n.get("spec") or {}).get("unschedulable")
                and any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions") or [])
                and int((n["status"].get("allocatable") or {}).get(GPU, 0)) - used.get(n["metadata"]["name"], 0)
                >= wanted
            ]
            if fits:
                target = fits[0]["metadata"]["name"]
                body = client.V1Binding(
                    metadata=client.V1ObjectMeta(name=meta["name"], namespace=meta["namespace"]),
                    target=client.V1ObjectReference(api_version="v1", kind="Node", name=target),
                )
                # The answer is a Status, not a Binding: read raw, as KubeClient does.
                self.cluster.core.create_namespaced_pod_binding(
                    meta["name"], meta["namespace"], body, _preload_content=False
                )
                used[target] = used.get(target, 0) + wanted
                continue
            message = f"0/{len(nodes)} nodes are available: {len(nodes)} Insufficient {GPU}."
            scheduled = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
            self.cluster.core.patch_namespaced_pod_status(
                meta["name"],
                meta["namespace"],
                {"status": {"phase": "Pending", "conditions": [scheduled]}},
                _content_type=MERGE_PATCH,
            )

    # -- provisioning --------------------------------------------------------------------------------------

    @staticmethod
    def _unschedulable(pod: dict[str, Any]) -> bool:
        return any(
            c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
            for c in (pod.get("status") or {}).get("conditions") or []
        )

    def _pool_for(self, pod: dict[str, Any]) -> NodePool | None:
        selector = (pod.get("spec") or {}).get("nodeSelector") or {}
        for pool in self.pools.values():
            labels = {**pool.labels, POOL_LABEL: pool.name}
            if all(labels.get(k) == v for k, v in selector.items()):
                return pool
        return None

    def _provision(self, now: float) -> None:
        nominated = {pod for claim in self.claims.values() for pod in claim.pods}
        pending = [
            p
            for p in self._pods()
            if not (p.get("spec") or {}).get("nodeName")
            and self._default_scheduled(p)
            and self._unschedulable(p)
            and not p["metadata"].get("deletionTimestamp")
            and (p["metadata"]["namespace"], p["metadata"]["name"]) not in nominated
        ]
        if not pending:
            self._batch_start = self._batch_last = None
            self._batch_seen.clear()
            return
        keys = {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in pending}
        if self._batch_start is None:
            self._batch_start = self._batch_last = now
        if keys - self._batch_seen:
            self._batch_last = now
        self._batch_seen |= keys
        assert self._batch_last is not None
        if now - self._batch_last < self.batch_idle_s and now - self._batch_start < self.batch_max_s:
            return  # the batch window is still open (batcher.go)
        self._batch_start = self._batch_last = None
        self._batch_seen.clear()
        for pod in pending:
            pool = self._pool_for(pod)
            if pool is None or self._gpus(pod) > pool.gpus:
                continue  # no NodePool can take it: it stays pending
            if sum(1 for c in self.claims.values() if c.pool == pool.name) >= pool.limit_nodes:
                continue  # the NodePool's limits
            pool.created += 1
            name = f"{pool.name}-{_suffix(pool.created)}"
            self.cluster.custom.create_cluster_custom_object(
                GROUP,
                VERSION,
                PLURAL,
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "NodeClaim",
                    "metadata": {"name": name, "labels": {POOL_LABEL: pool.name}, "finalizers": [FINALIZER]},
                    "spec": {"resources": {"requests": {GPU: str(self._gpus(pod))}}},
                },
            )
            self.claims[name] = _Claim(pool.name, now, [(pod["metadata"]["namespace"], pod["metadata"]["name"])])

    # -- consolidation -------------------------------------------------------------------------------------

    def _consolidate(self, now: float) -> None:
        pods = self._pods()
        for name, claim in list(self.claims.items()):
            if not claim.node:
                continue
            pool = self.pools[claim.pool]
            on_node = [p for p in pods if (p.get("spec") or {}).get("nodeName") == claim.node]
            try:
                node = self._json(self.cluster.core.read_node(claim.node))
            except ApiException as exc:
                if exc.status == 404:
                    continue
                raise
            blocked = (node["metadata"].get("annotations") or {}).get(DO_NOT_DISRUPT) == "true" or any(
                (p["metadata"].get("annotations") or {}).get(DO_NOT_DISRUPT) == "true" for p in on_node
            )
            if on_node or blocked or pool.consolidate_after_s is None:
                self.empty_since.pop(claim.node, None)
                continue
            since = self.empty_since.setdefault(claim.node, now)
            if now - since >= pool.consolidate_after_s:
                self.events.append((name, "DisruptionTerminating", "Disrupting NodeClaim: Empty"))
                self.cluster.custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)


def _suffix(number: int) -> str:
    """Five characters of the generated-name alphabet, distinct for each ``number`` (the API server draws them at
    random; a test wants them repeatable)."""
    chars = []
    for _ in range(5):
        number, digit = divmod(number, len(_ALPHANUMS))
        chars.append(_ALPHANUMS[digit])
    return "".join(reversed(chars))
