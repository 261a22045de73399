"""The Kubernetes cluster gateway: the only module that imports ``kubernetes`` (DESIGN.md §2).

:class:`KubeGateway` implements :class:`scheduler.gateway.ClusterGateway` on a cluster running the NVIDIA
GPU Operator with the mixed MIG strategy. It reads nodes and Microcosm's pods, creates one pod per replica
with ``schedulerName: microcosm`` and binds it with the ``pods/binding`` subresource, evicts, and drives MIG
reconfiguration through MIG Manager (:mod:`scheduler.kube_mig`). What labels, taints and pod states mean
lives in the pure modules :mod:`scheduler.kube_labels` and :mod:`scheduler.kube_pods`; this module only
talks to the API server and turns its failures into the gateway's two errors:

- HTTP 429 (honouring ``Retry-After``), 5xx, timeouts and connection failures are retried with exponential
  backoff, then raised as :class:`~scheduler.errors.GatewayRetryable`;
- 404 and 409 mean what the operation makes of them (a deleted pod is already evicted; a node that is
  gone or a pod bound elsewhere is a :class:`~scheduler.errors.GatewayConflict`);
- 400/422 (the cluster refuses the object) are conflicts; 401/403 are a deployment error
  (:class:`~scheduler.errors.GatewayError`) naming the missing permission.

Reads take the API's raw JSON (``_preload_content=False``): the pure modules work on plain dicts and a
large cluster's pod list is not validated model by model. Writes send the client's models, so a malformed
manifest fails client-side before it reaches the cluster.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from scheduler.core.catalog import GPU_MODEL_BY_NAME, LayoutError, compute_fraction, validate_layout
from scheduler.core.state import MigLayout
from scheduler.errors import GatewayConflict, GatewayError, GatewayNotConfigured, GatewayRetryable
from scheduler.gateway import (
    BindRequest,
    Device,
    JobObservation,
    MaintenanceEvent,
    NodeObservation,
    Observation,
    ReplicaPhase,
    UtilizationReading,
)
from scheduler.kube_labels import (
    DEFAULT_TOPOLOGY_LABELS,
    GPU_COUNT,
    GPU_MEMORY,
    GPU_PRODUCT,
    MIG_CAPABLE,
    MIG_CONFIG,
    MIG_CONFIG_STATE,
    MIG_LAYOUTS_ANNOTATION,
    Taint,
    capacity_tier,
    current_mig,
    format_layouts_annotation,
    gpu_model_of,
    interconnect_of,
    interruption_of,
    schedulable,
    topology,
)
from scheduler.kube_mig import (
    CONFIG_KEY,
    CORDONED_BY_US,
    DESIRED_CONFIG,
    FLOW_ANNOTATIONS,
    RECOVERIES,
    SINCE,
    Flow,
    Phase,
    Step,
    config_document,
    config_name,
    flow_annotations,
    flow_of,
    mig_status,
    next_step,
    paused_deploy_labels,
    same_counts_per_gpu,
)
from scheduler.kube_pods import (
    DEVICES_ANNOTATION,
    JOB_LABEL,
    MANAGED_BY,
    OUR_PODS,
    REPLICA_LABEL,
    SCHEDULER_NAME,
    TEAM_LABEL,
    device_resources,
    finished,
    gpu_requests,
    node_of,
    parse_devices,
    pod_manifest,
    pod_name,
    replica_of,
    terminating,
)
from scheduler.prometheus import PrometheusClient

logger = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
MIG_MANAGER_SELECTOR = "app=nvidia-mig-manager"  # the GPU Operator's MIG Manager DaemonSet pods


class _NotFound(Exception):
    pass


class _Conflict(Exception):
    """HTTP 409: AlreadyExists on create, a stale resourceVersion on update, a pod already bound."""


@dataclass(frozen=True, slots=True)
class MigEvent:
    """One step :meth:`KubeGateway.mig_watch` took on one node, for the task's log."""

    node: str
    step: Step
    detail: str = ""


class KubeGateway:
    """A :class:`~scheduler.gateway.ClusterGateway` over the Kubernetes API (module doc).

    ``api_client`` defaults to the in-cluster service account, else ``KUBECONFIG``/``~/.kube/config``
    (:func:`gateway_from_settings`). ``clock`` and ``sleep`` are injectable so tests need no real waits.
    """

    name = "kubernetes"

    def __init__(
        self,
        api_client: client.ApiClient | None = None,
        *,
        topology_labels: Sequence[str] = DEFAULT_TOPOLOGY_LABELS,
        gpu_operator_namespace: str = "gpu-operator",
        mig_config_map: str = "microcosm-mig-config",
        mig_config_timeout_s: float = 900.0,
        eviction_grace_s: int = 30,
        default_image: str = "",
        prometheus_url: str = "",
        request_timeout_s: float = 30.0,
        attempts: int = 4,
        backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.api = api_client or _api_client_from_environment()
        self.core = client.CoreV1Api(self.api)
        self.topology_labels = tuple(topology_labels)
        self.operator_namespace = gpu_operator_namespace
        self.mig_config_map = mig_config_map
        self.mig_config_timeout_s = mig_config_timeout_s
        self.eviction_grace_s = eviction_grace_s
        self.default_image = default_image
        self.prometheus = PrometheusClient(prometheus_url) if prometheus_url else None
        self.request_timeout_s = request_timeout_s
        self.attempts = max(attempts, 1)
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.clock = clock
        self.sleep = sleep
        self._utilization_at: float | None = None

    # -- calling the API -------------------------------------------------------------------------------------

    def _call(self, what: str, method: Callable[..., Any], *args: Any, attempts: int | None = None, **kw: Any) -> Any:
        """Call one API method; retry what is transient (module doc); return the raw JSON for reads."""
        tries = attempts or self.attempts
        for attempt in range(1, tries + 1):
            try:
                response = method(*args, _request_timeout=self.request_timeout_s, _preload_content=False, **kw)
                body = response.data
                return json.loads(body) if body else {}
            except ApiException as exc:
                detail = _api_message(exc)
                if exc.status == 404:
                    raise _NotFound(f"{what}: {detail}") from None
                if exc.status == 409:
                    raise _Conflict(f"{what}: {detail}") from None
                if exc.status in (401, 403):
                    raise GatewayError(
                        f"{what} was refused ({exc.status}: {detail}); the service account lacks a permission: "
                        "apply deploy/rbac.yaml (docs/deploy.md, RBAC)"
                    ) from None
                if exc.status == 429 or exc.status >= 500 or exc.status == 0:
                    delay = _retry_after(exc) if exc.status == 429 else None
                else:  # 400, 422…: the cluster refuses the object itself; retrying cannot help
                    raise GatewayConflict(f"{what} was refused ({exc.status}): {detail}") from None
            except (urllib3.exceptions.HTTPError, OSError) as exc:  # timeouts, resets, refused connections
                detail, delay = f"{type(exc).__name__}: {exc}", None
            if attempt == tries:
                raise GatewayRetryable(f"{what} failed {tries} times, last: {detail}")
            backoff = min(self.backoff_s * 2 ** (attempt - 1), self.max_backoff_s)
            self.sleep(min(delay, self.max_backoff_s) if delay is not None else backoff)
        raise AssertionError("unreachable")  # pragma: no cover

    def _items(self, what: str, method: Callable[..., Any], *args: Any, **kw: Any) -> list[dict[str, Any]]:
        try:
            return list(self._call(what, method, *args, **kw).get("items") or [])
        except (_NotFound, _Conflict) as exc:  # a list cannot conflict; 404: the API does not serve it (yet)
            raise GatewayRetryable(str(exc)) from None

    def _our_pods(self, namespace: str | None = None, job: str | None = None) -> list[dict[str, Any]]:
        """Microcosm's pods (of one job); labels are checked here too, not only by the selector."""
        selector = OUR_PODS if job is None else f"{OUR_PODS},{JOB_LABEL}={job}"
        if namespace is None:
            pods = self._items("list Microcosm's pods", self.core.list_pod_for_all_namespaces, label_selector=selector)
        else:
            pods = self._items(
                f"list pods of job {job} in {namespace}",
                self.core.list_namespaced_pod,
                namespace,
                label_selector=selector,
            )
        return [
            pod
            for pod in pods
            if _labels(pod).get(MANAGED_BY) == SCHEDULER_NAME and (job is None or _labels(pod).get(JOB_LABEL) == job)
        ]

    def _pods_on(self, node: str) -> list[dict[str, Any]]:
        pods = self._items(
            f"list pods on {node}", self.core.list_pod_for_all_namespaces, field_selector=f"spec.nodeName={node}"
        )
        return [pod for pod in pods if node_of(pod) == node]

    def _read_node(self, node: str) -> dict[str, Any]:
        try:
            return self._call(f"read node {node}", self.core.read_node, node)
        except _NotFound:
            raise GatewayConflict(f"node {node} is not in the cluster") from None

    def _patch_node(self, node: str, body: Mapping[str, Any]) -> None:
        try:
            self._call(f"patch node {node}", self.core.patch_node, node, dict(body), _content_type=MERGE_PATCH)
        except _NotFound:
            raise GatewayConflict(f"node {node} is not in the cluster") from None
        except _Conflict as exc:
            raise GatewayRetryable(str(exc)) from None

    # -- observe ---------------------------------------------------------------------------------------------

    def observe(self) -> Observation:
        now = self.clock()
        raw_nodes = self._items("list nodes", self.core.list_node)
        pods = self._our_pods()
        nodes = tuple(n for n in (self._node(raw, now) for raw in raw_nodes) if n is not None)
        live = {_name(raw) for raw in raw_nodes}
        return Observation(observed_at=now, nodes=nodes, jobs=_jobs(pods, live))

    def _node(self, raw: Mapping[str, Any], now: float) -> NodeObservation | None:
        """A GPU node as the scheduler sees it; None for nodes without GPUs or with a GPU the catalog lacks."""
        labels, annotations = _labels(raw), _annotations(raw)
        product = labels.get(GPU_PRODUCT, "")
        count = _int(labels.get(GPU_COUNT)) or _int((raw.get("status") or {}).get("capacity", {}).get("nvidia.com/gpu"))
        if not product or not count:
            return None
        model = gpu_model_of(product, _int(labels.get(GPU_MEMORY)))
        if model is None:
            logger.warning("node %s: GPU %r is not in the catalog; the scheduler leaves it alone", _name(raw), product)
            return None
        spec, status = raw.get("spec") or {}, raw.get("status") or {}
        taints = [_taint(t) for t in spec.get("taints") or []]
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
        flow = flow_of(annotations, model, count)
        mig = mig_status(flow, labels, self.mig_config_timeout_s)
        interruption = interruption_of(taints, now)
        # Under the single strategy GFD renames the product "<model>-MIG-<profile>": its MIG devices are all
        # called nvidia.com/gpu, which cannot express a placement; Microcosm needs the mixed strategy.
        single = "-MIG-" in product.upper()
        zone, spine, leaf = topology(labels, self.topology_labels)
        return NodeObservation(
            name=_name(raw),
            gpu_model=model,
            gpu_count=count,
            interconnect=interconnect_of(model),
            tier=capacity_tier(labels),
            leaf=leaf,
            spine=spine,
            zone=zone,
            mig=current_mig(model, count, labels, annotations),
            schedulable=schedulable(cordoned=bool(spec.get("unschedulable")), ready=ready, taints=taints)
            and interruption is None
            and flow is None
            and mig.state == "success"
            and not single,
            interruption=interruption,
            mig_status=mig,
            labels=dict(labels),
        )

    # -- namespaces and binding ------------------------------------------------------------------------------

    def namespace_ensure(self, *, namespace: str, team: str) -> None:
        try:
            self._call(f"read namespace {namespace}", self.core.read_namespace, namespace)
            return
        except _NotFound:
            pass
        body = client.V1Namespace(
            metadata=client.V1ObjectMeta(name=namespace, labels={TEAM_LABEL: team, MANAGED_BY: SCHEDULER_NAME})
        )
        with contextlib.suppress(_Conflict):  # created meanwhile by another worker: exists is all we want
            self._call(f"create namespace {namespace}", self.core.create_namespace, body)

    def job_bind(self, *, request: BindRequest) -> None:
        placements = sorted(request.placements, key=lambda p: p.replica)
        if [p.replica for p in placements] != list(range(len(placements))) or not placements:
            raise GatewayConflict(f"job {request.job}: replicas must be numbered 0..n-1")
        image = request.image or self.default_image
        if not image:
            raise GatewayConflict(
                f"job {request.job} names no container image and KUBE_DEFAULT_IMAGE is not set; give the job an image"
            )
        existing = {int(_labels(p).get(REPLICA_LABEL, "-1")): p for p in self._our_pods(request.namespace, request.job)}
        extra = sorted(set(existing) - {p.replica for p in placements})
        if extra:
            raise GatewayConflict(f"job {request.job} has replicas {extra} the request does not name")
        todo = []
        for placement in placements:
            pod = existing.get(placement.replica)
            if pod is None:
                todo.append(placement)
                continue
            if terminating(pod):
                raise GatewayRetryable(f"job {request.job}: pod {_name(pod)} of an earlier run is still terminating")
            if finished(pod):
                raise GatewayConflict(f"job {request.job}: pod {_name(pod)} already finished; evict the job first")
            if parse_devices(_annotations(pod).get(DEVICES_ANNOTATION, "")) != placement.devices or node_of(
                pod
            ) not in (None, placement.node):
                raise GatewayConflict(
                    f"job {request.job} replica {placement.replica} is already on {node_of(pod)}, not {placement.node}"
                )
            if node_of(pod) is None:
                todo.append(placement)  # created by a call that stopped before binding it
        if not todo:
            return
        self._check_placements(request, todo)
        team = self._team_of(request.namespace)
        try:
            for placement in todo:
                name = pod_name(request.job, placement.replica)
                if placement.replica not in existing:
                    manifest = pod_manifest(request, placement, team=team, image=image, grace_s=self.eviction_grace_s)
                    self._create_pod(request, placement.replica, manifest)
                self._bind(request.namespace, name, placement.node)
        except GatewayError as exc:
            self._undo(request, exc)
            raise

    def _check_placements(self, request: BindRequest, todo: Sequence[Any]) -> None:
        """Refuse (GatewayConflict) before touching anything: a node gone or closed, a device that does not
        exist or is held by another job's pod, or more GPU resources than the node has left."""
        now = self.clock()
        ours = [p for p in self._our_pods() if _labels(p).get(JOB_LABEL) != request.job]
        wanted: set[tuple[str, int, int | None]] = set()
        for node_name in sorted({p.node for p in todo}):
            raw = self._read_node(node_name)
            node = self._node(raw, now)
            if node is None or not node.schedulable:
                raise GatewayConflict(
                    f"node {node_name} takes no new work (cordoned, not ready, tainted, interrupted or changing MIG)"
                )
            held: set[tuple[int, int | None]] = set()
            for pod in ours:
                if node_of(pod) == node_name and not finished(pod):
                    held.update(
                        (d.gpu, d.mig_start) for d in parse_devices(_annotations(pod).get(DEVICES_ANNOTATION, ""))
                    )
            needed: dict[str, int] = {}
            for placement in (p for p in todo if p.node == node_name):
                for device in placement.devices:
                    _check_device(node, device, held, wanted)
                for resource, count in device_resources(placement.devices).items():
                    needed[resource] = needed.get(resource, 0) + count
            self._check_allocatable(node_name, raw, needed, request.job)

    def _check_allocatable(self, node: str, raw: Mapping[str, Any], needed: Mapping[str, int], job: str) -> None:
        allocatable = (raw.get("status") or {}).get("allocatable")
        if not allocatable:
            return  # the node reports nothing yet: the device plugin's own admission decides
        used: dict[str, int] = {}
        for pod in self._pods_on(node):
            if terminating(pod) or finished(pod) or _labels(pod).get(JOB_LABEL) == job:
                continue
            for resource, count in gpu_requests(pod).items():
                used[resource] = used.get(resource, 0) + count
        for resource, count in needed.items():
            offered = _int(allocatable.get(resource)) or 0
            if used.get(resource, 0) + count > offered:
                raise GatewayConflict(
                    f"node {node} offers {offered} {resource}, {used.get(resource, 0)} in use; job {job} needs {count}"
                )

    def _team_of(self, namespace: str) -> str:
        try:
            found = self._call(f"read namespace {namespace}", self.core.read_namespace, namespace)
        except _NotFound:
            raise GatewayConflict(f"namespace {namespace} does not exist; ensure the team's namespace first") from None
        return _labels(found).get(TEAM_LABEL, "")

    def _create_pod(self, request: BindRequest, replica: int, manifest: dict[str, Any]) -> None:
        name = manifest["metadata"]["name"]
        try:
            self._call(
                f"create pod {request.namespace}/{name}",
                self.core.create_namespaced_pod,
                request.namespace,
                client.V1Pod.from_dict(manifest),
            )
        except _Conflict:
            # A retried POST whose first attempt did reach the server, or a concurrent worker: fine if it
            # is this replica's fresh pod, otherwise the name is taken by something we must not touch.
            try:
                found = self._call(
                    f"read pod {request.namespace}/{name}", self.core.read_namespaced_pod, name, request.namespace
                )
            except _NotFound:
                raise GatewayRetryable(f"pod {request.namespace}/{name} vanished while being created") from None
            labels = _labels(found)
            if labels.get(JOB_LABEL) != request.job or labels.get(REPLICA_LABEL) != str(replica) or terminating(found):
                raise GatewayRetryable(f"pod name {request.namespace}/{name} is taken by an older pod") from None

    def _bind(self, namespace: str, name: str, node: str) -> None:
        body = client.V1Binding(
            metadata=client.V1ObjectMeta(name=name, namespace=namespace),
            target=client.V1ObjectReference(api_version="v1", kind="Node", name=node),
        )
        try:
            self._call(
                f"bind pod {namespace}/{name} to {node}", self.core.create_namespaced_pod_binding, name, namespace, body
            )
        except _NotFound:
            raise GatewayRetryable(f"pod {namespace}/{name} vanished before it was bound") from None
        except _Conflict as exc:
            # 409 on a binding: the pod already has a node. Ours by an earlier attempt of this call is fine.
            try:
                found = self._call(f"read pod {namespace}/{name}", self.core.read_namespaced_pod, name, namespace)
            except _NotFound:
                raise GatewayRetryable(f"pod {namespace}/{name} vanished while being bound") from None
            if node_of(found) != node:
                raise GatewayConflict(
                    f"pod {namespace}/{name} is bound to {node_of(found)}, not {node}: {exc}"
                ) from None

    def _undo(self, request: BindRequest, cause: Exception) -> None:
        """A gang never runs partly: delete every pod of the job, then let ``cause`` propagate."""
        logger.warning("job %s: binding failed (%s); removing its pods", request.job, cause)
        try:
            for pod in self._our_pods(request.namespace, request.job):
                self._delete_pod(pod, grace_s=0)
        except GatewayError as exc:  # the next cycle's reconcile finds and removes what is left
            logger.error("job %s: could not remove its pods after a failed bind: %s", request.job, exc)

    # -- eviction --------------------------------------------------------------------------------------------

    def job_evict(self, *, job: str, namespace: str, grace_s: float, reason: str) -> None:
        for pod in self._our_pods(namespace, job):
            if terminating(pod):
                continue
            # Finished pods hold nothing: remove them at once.
            self._delete_pod(pod, grace_s=0 if finished(pod) else grace_s)
            # Recording the reason on the cluster would need pods/patch or events/create, which the
            # least-privilege role does not grant (docs/deploy.md): the log carries it.
            logger.info("job %s: deleted pod %s/%s (%s, grace %ss)", job, namespace, _name(pod), reason, grace_s)

    def _delete_pod(self, pod: Mapping[str, Any], *, grace_s: float) -> None:
        namespace, name = pod["metadata"]["namespace"], _name(pod)
        grace = math.ceil(max(grace_s, 0))
        try:
            self._call(
                f"delete pod {namespace}/{name}",
                self.core.delete_namespaced_pod,
                name,
                namespace,
                grace_period_seconds=grace,
                body=client.V1DeleteOptions(grace_period_seconds=grace, propagation_policy="Background"),
            )
        except _NotFound:
            pass  # already gone: evicted is evicted
        except _Conflict as exc:
            raise GatewayRetryable(str(exc)) from None

    def _evict_foreign(self, pod: Mapping[str, Any]) -> None:
        """Ask another owner's pod to leave through the eviction subresource, which honours its
        PodDisruptionBudget; a refusal (429) leaves it for the next watch."""
        namespace, name = pod["metadata"]["namespace"], _name(pod)
        body = client.V1Eviction(
            metadata=client.V1ObjectMeta(name=name, namespace=namespace),
            delete_options=client.V1DeleteOptions(grace_period_seconds=self.eviction_grace_s),
        )
        try:
            self._call(
                f"evict pod {namespace}/{name}",
                self.core.create_namespaced_pod_eviction,
                name,
                namespace,
                body,
                attempts=1,
            )
        except (_NotFound, _Conflict):
            pass
        except GatewayRetryable as exc:
            logger.info("pod %s/%s is not evicted yet: %s", namespace, name, exc)

    # -- MIG -------------------------------------------------------------------------------------------------

    def node_mig_apply(self, *, node: str, layouts: tuple[MigLayout, ...]) -> None:
        raw = self._read_node(node)
        labels, annotations = _labels(raw), _annotations(raw)
        model = gpu_model_of(labels.get(GPU_PRODUCT, ""), _int(labels.get(GPU_MEMORY)))
        count = _int(labels.get(GPU_COUNT)) or 0
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
            self._patch_node(
                node, {"metadata": {"annotations": {MIG_LAYOUTS_ANNOTATION: format_layouts_annotation(wanted)}}}
            )
            return
        name = config_name(wanted)
        self._write_mig_config(name, wanted, also_keep={labels.get(MIG_CONFIG, "")})
        cordoned_by_us = CORDONED_BY_US in annotations or not (raw.get("spec") or {}).get("unschedulable")
        new_flow = Flow(Phase.DRAINING, wanted, name, self.clock())
        body: dict[str, Any] = {
            "spec": {"unschedulable": True},
            "metadata": {
                "annotations": {**flow_annotations(new_flow), **({CORDONED_BY_US: "true"} if cordoned_by_us else {})}
            },
        }
        self._patch_node(node, body)
        changing = {i for i in range(count) if current[i] != wanted[i]}
        if self._drain(node, changing) == 0:
            self._relabel(node, new_flow, labels)

    def _write_mig_config(self, name: str, layouts: Sequence[MigLayout], *, also_keep: set[str]) -> None:
        """Add config ``name`` to the mig-parted ConfigMap (read-modify-write on its resourceVersion)."""
        keep = set(also_keep)
        for raw in self._items("list nodes", self.core.list_node):
            keep.add(_labels(raw).get(MIG_CONFIG, ""))
            keep.add(_annotations(raw).get(DESIRED_CONFIG, ""))
        ns, cm = self.operator_namespace, self.mig_config_map
        for _attempt in range(self.attempts):
            try:
                found = self._call(f"read ConfigMap {ns}/{cm}", self.core.read_namespaced_config_map, cm, ns)
            except _NotFound:
                found = None
            existing = ((found or {}).get("data") or {}).get(CONFIG_KEY, "")
            document = config_document(existing, name, layouts, keep)
            try:
                if found is None:
                    body = client.V1ConfigMap(
                        metadata=client.V1ObjectMeta(name=cm, namespace=ns, labels={MANAGED_BY: SCHEDULER_NAME}),
                        data={CONFIG_KEY: document},
                    )
                    self._call(f"create ConfigMap {ns}/{cm}", self.core.create_namespaced_config_map, ns, body)
                elif document != existing:
                    version = found.get("metadata", {}).get("resourceVersion")
                    patch = {"metadata": {"resourceVersion": version}, "data": {CONFIG_KEY: document}}
                    self._call(
                        f"update ConfigMap {ns}/{cm}",
                        self.core.patch_namespaced_config_map,
                        cm,
                        ns,
                        patch,
                        _content_type=MERGE_PATCH,
                    )
                return
            except (_Conflict, _NotFound):
                continue  # someone else wrote it in between: read again
        raise GatewayRetryable(f"ConfigMap {ns}/{cm} kept changing under us; try again")

    def _drain(self, node: str, changing: set[int]) -> int:
        """Ask the GPU pods that stand in the way of a MIG change to go; return how many are still there.

        Our pods on GPUs that keep their layout stay. Other owners' GPU pods do not say which GPU they hold,
        so they all go, through the eviction subresource. Pods still terminating count as there.
        """
        left = 0
        for pod in self._pods_on(node):
            if finished(pod) or not gpu_requests(pod):
                continue
            ours = _labels(pod).get(MANAGED_BY) == SCHEDULER_NAME
            devices = parse_devices(_annotations(pod).get(DEVICES_ANNOTATION, "")) if ours else ()
            if devices and not any(d.gpu in changing for d in devices):
                continue
            left += 1
            if terminating(pod):
                continue
            if ours:
                self._delete_pod(pod, grace_s=self.eviction_grace_s)
                logger.info("node %s: draining pod %s for a MIG change", node, _name(pod))
            else:
                self._evict_foreign(pod)
        return left

    def _relabel(self, node: str, flow: Flow, labels: Mapping[str, str]) -> None:
        applying = Flow(Phase.APPLYING, flow.desired, flow.config, self.clock(), flow.recoveries)
        self._patch_node(
            node, {"metadata": {"labels": {MIG_CONFIG: flow.config}, "annotations": flow_annotations(applying)}}
        )
        if labels.get(MIG_CONFIG) == flow.config and labels.get(MIG_CONFIG_STATE) != "success":
            # The label already has this value (a retry after a failure): only a value change or a restart
            # makes MIG Manager act (facts §3.1), so restart it.
            self._restart_mig_manager(node, flow)

    def mig_watch(self) -> tuple[MigEvent, ...]:
        """Move every node's MIG flow one step (:mod:`scheduler.kube_mig`); call it periodically.

        Drains what is left, relabels drained nodes, records success and uncordons, recovers a node stuck
        in ``pending`` (restore the paused deploy labels, restart MIG Manager) and declares failure after
        ``mig_config_timeout_s``. Returns what it did, for the log.
        """
        now = self.clock()
        events = []
        for raw in self._items("list nodes", self.core.list_node):
            labels, annotations, name = _labels(raw), _annotations(raw), _name(raw)
            model = gpu_model_of(labels.get(GPU_PRODUCT, ""), _int(labels.get(GPU_MEMORY)))
            count = _int(labels.get(GPU_COUNT)) or 0
            flow = flow_of(annotations, model, count) if model and count else None
            if flow is None or flow.phase == Phase.FAILED:
                continue
            current = current_mig(model, count, labels, annotations) if model else ()
            left = 0
            if flow.phase == Phase.DRAINING:
                left = self._drain(name, {i for i in range(count) if current[i] != flow.desired[i]})
            step = next_step(flow, labels, gpu_pods_left=left, now=now, timeout_s=self.mig_config_timeout_s)
            detail = self._take(step, name, flow, labels, annotations, left)
            if step != Step.WAIT:
                events.append(MigEvent(node=name, step=step, detail=detail))
        return tuple(events)

    def maintain(self) -> tuple[MaintenanceEvent, ...]:
        """:class:`~scheduler.gateway.MaintainedGateway`: one step of every node's MIG flow (:meth:`mig_watch`)."""
        return tuple(MaintenanceEvent(node=e.node, step=str(e.step), detail=e.detail) for e in self.mig_watch())

    def _take(
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
            self._patch_node(node, body)
            logger.info("node %s: MIG layout %s is live", node, flow.config)
            return "live; uncordoned" if CORDONED_BY_US in annotations else "live (left cordoned: not ours)"
        if step == Step.RECOVER:
            return self._restart_mig_manager(node, flow, recovering=True)
        if step == Step.FAIL:
            state = labels.get(MIG_CONFIG_STATE, "absent")
            reason = (
                f"drain timed out with {left} GPU pods left"
                if flow.phase == Phase.DRAINING
                else f"MIG Manager reported {state} for {flow.config}"
                if state == "failed"
                else f"no success within {self.mig_config_timeout_s:g}s (state {state})"
            )
            failed = Flow(Phase.FAILED, flow.desired, flow.config, self.clock(), flow.recoveries, reason)
            self._patch_node(node, {"metadata": {"annotations": flow_annotations(failed)}})
            logger.error("node %s: MIG change to %s failed: %s; the node stays cordoned", node, flow.config, reason)
            return reason
        return ""

    def _restart_mig_manager(self, node: str, flow: Flow, *, recovering: bool = False) -> str:
        """The known wedge's remedy (facts §3.1): restore the operator's deploy labels, then restart the
        node's MIG Manager, which re-applies the current label value on start-up; with no MIG Manager pod
        to restart, flip the label to another value and back."""
        raw = self._read_node(node)
        paused = paused_deploy_labels(_labels(raw))
        annotations = {SINCE: repr(self.clock())}
        if recovering:
            annotations[RECOVERIES] = str(flow.recoveries + 1)
        self._patch_node(node, {"metadata": {"labels": dict.fromkeys(paused, "true"), "annotations": annotations}})
        managers = [
            pod
            for pod in self._items(
                "list MIG Manager pods",
                self.core.list_namespaced_pod,
                self.operator_namespace,
                label_selector=MIG_MANAGER_SELECTOR,
            )
            if node_of(pod) == node and _labels(pod).get("app") == "nvidia-mig-manager"
        ]
        for pod in managers:
            self._delete_pod(pod, grace_s=0)
        if not managers:
            self._patch_node(node, {"metadata": {"labels": {MIG_CONFIG: flow.config + "-flip"}}})
            self._patch_node(node, {"metadata": {"labels": {MIG_CONFIG: flow.config}}})
        how = f"restarted {len(managers)} MIG Manager pod(s)" if managers else f"flipped {MIG_CONFIG}"
        logger.warning("node %s: MIG change stuck; restored %s and %s", node, paused or "no deploy labels", how)
        return f"restored {len(paused)} deploy labels; {how}"

    # -- utilization -----------------------------------------------------------------------------------------

    def utilization(self) -> tuple[UtilizationReading, ...]:
        """Engine activity per node from Prometheus (DCGM exporter) since the previous call; () without
        ``PROMETHEUS_URL``. MIG instances weigh their compute share of the GPU (compute slices / 7)."""
        if self.prometheus is None:
            return ()
        now = self.clock()
        window = 300.0 if self._utilization_at is None else min(max(now - self._utilization_at, 60.0), 3600.0)
        self._utilization_at = now
        samples = self.prometheus.gpu_samples(int(window))
        observation = self.observe()
        models = {node.name: node.gpu_model for node in observation.nodes}
        busy: dict[str, float] = {}
        for sample in samples:
            model = models.get(sample.node)
            if model is None:
                continue
            weight = 1.0
            if sample.instance is not None:
                if sample.profile not in GPU_MODEL_BY_NAME[model].profiles():
                    continue
                weight = compute_fraction(model, sample.profile)
            busy[sample.node] = busy.get(sample.node, 0.0) + weight * sample.engine_active
        held: dict[str, float] = {}
        for job in observation.jobs.values():
            for replica in job.replicas:
                if replica.phase in (ReplicaPhase.RUNNING, ReplicaPhase.BOUND) and replica.node in models:
                    held[replica.node] = held.get(replica.node, 0.0) + _gpu_units(models[replica.node], replica.devices)
        return tuple(
            UtilizationReading(
                node=node.name,
                gpu_class=GPU_MODEL_BY_NAME[node.gpu_model].gpu_class,
                gpus=float(node.gpu_count),
                allocated_gpus=round(held.get(node.name, 0.0), 6),
                busy_ratio=round(min(busy.get(node.name, 0.0) / node.gpu_count, 1.0), 6),
            )
            for node in observation.nodes
        )


def gateway_from_settings() -> KubeGateway:
    """The gateway ``settings.CLUSTER_BACKEND = "kubernetes"`` asks for (:mod:`scheduler.gateways`)."""
    from django.conf import settings

    kube = settings.KUBERNETES
    return KubeGateway(
        topology_labels=kube["topology_labels"],
        gpu_operator_namespace=kube["gpu_operator_namespace"],
        mig_config_map=kube["mig_config_map"],
        mig_config_timeout_s=kube["mig_config_timeout_s"],
        # The loop's eviction grace (SCHEDULER_EVICT_GRACE_S) is also the pods' termination grace period.
        eviction_grace_s=math.ceil(settings.SCHEDULER["evict_grace_s"]),
        default_image=kube["default_image"],
        prometheus_url=settings.PROMETHEUS_URL,
    )


def _api_client_from_environment() -> client.ApiClient:
    """The in-cluster service account, else the kubeconfig ``KUBECONFIG`` names (or ~/.kube/config)."""
    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)
    except config.ConfigException:
        try:
            config.load_kube_config(client_configuration=configuration)
        except (config.ConfigException, OSError, TypeError) as exc:
            raise GatewayNotConfigured(
                "CLUSTER_BACKEND=kubernetes but no cluster credentials were found: run inside the cluster with "
                f"the microcosm service account, or point KUBECONFIG at a kubeconfig file ({exc})"
            ) from exc
    configuration.retries = 0  # KubeGateway retries itself, with backoff and Retry-After
    return client.ApiClient(configuration)


# -- small helpers on raw JSON -------------------------------------------------------------------------------


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _labels(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


def _annotations(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})


def _int(value: object) -> int | None:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None


def _taint(raw: Mapping[str, Any]) -> Taint:
    added = raw.get("timeAdded")
    try:
        added_at = datetime.fromisoformat(str(added).replace("Z", "+00:00")).timestamp() if added else None
    except ValueError:
        added_at = None
    return Taint(key=raw.get("key", ""), value=raw.get("value") or "", effect=raw.get("effect", ""), added_at=added_at)


def _api_message(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body).get("message") or exc.reason)
    except (TypeError, ValueError, AttributeError):
        return str(exc.reason or exc.status)


def _retry_after(exc: ApiException) -> float | None:
    """Seconds the server asked us to wait (``Retry-After``: seconds or an HTTP date), if it said."""
    value = (exc.headers or {}).get("Retry-After") if exc.headers else None
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        try:
            return max(parsedate_to_datetime(value).timestamp() - time.time(), 0.0)
        except (TypeError, ValueError):
            return None


def _gpu_units(model: str, devices: Iterable[Device]) -> float:
    return sum(1.0 if d.mig_profile is None else compute_fraction(model, d.mig_profile) for d in devices)


def _check_device(
    node: NodeObservation, device: Device, held: set[tuple[int, int | None]], wanted: set[tuple[str, int, int | None]]
) -> None:
    where = f"{node.name} GPU {device.gpu}"
    if not 0 <= device.gpu < node.gpu_count:
        raise GatewayConflict(f"{where} does not exist")
    layout = node.mig[device.gpu] if device.gpu < len(node.mig) else ()
    busy = {start for gpu, start in held if gpu == device.gpu}
    key = (node.name, device.gpu, device.mig_start)
    if key in wanted or (node.name, device.gpu, None) in wanted:
        raise GatewayConflict(f"{where} is asked for twice in one request")
    if device.mig_profile is None:
        if layout:
            raise GatewayConflict(f"{where} is partitioned with MIG; it has no whole GPU to give")
        if busy:
            raise GatewayConflict(f"{where} is held by another job")
    else:
        if (device.mig_profile, device.mig_start) not in layout:
            raise GatewayConflict(f"{where} has no MIG instance {device.mig_profile}@{device.mig_start}")
        if device.mig_start in busy or None in busy:
            raise GatewayConflict(f"{where} {device.mig_profile}@{device.mig_start} is held by another job")
    wanted.add(key)


def _jobs(pods: Iterable[Mapping[str, Any]], live_nodes: set[str]) -> dict[str, JobObservation]:
    by_job: dict[str, list[Mapping[str, Any]]] = {}
    for pod in pods:
        job = _labels(pod).get(JOB_LABEL)
        if job:
            by_job.setdefault(job, []).append(pod)
    return {
        job: JobObservation(
            job=job,
            namespace=str(found[0]["metadata"].get("namespace", "")),
            replicas=tuple(sorted((replica_of(p, live_nodes) for p in found), key=lambda r: r.replica)),
        )
        for job, found in sorted(by_job.items())
    }
