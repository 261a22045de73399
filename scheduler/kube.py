"""The Kubernetes cluster gateway: the only module that imports ``kubernetes`` (DESIGN.md §2).

:class:`KubeGateway` implements :class:`scheduler.gateway.ClusterGateway` on a cluster running the NVIDIA
GPU Operator with the mixed MIG strategy. It reads nodes and Microcosm's pods, creates one pod per replica
with ``schedulerName: microcosm`` and binds it with the ``pods/binding`` subresource, evicts, and drives MIG
reconfiguration through MIG Manager (the flow: :mod:`scheduler.kube_mig_flow`, its states: :mod:`scheduler.kube_mig`).
What labels, taints, nodes and pod states mean lives in the pure modules :mod:`scheduler.kube_labels`,
:mod:`scheduler.kube_nodes` and :mod:`scheduler.kube_pods`; this module only talks to the API server and
turns its failures into the gateway's two errors:

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
from collections.abc import Callable, Mapping, Sequence
from email.utils import parsedate_to_datetime
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from scheduler.core.state import MigLayout
from scheduler.errors import GatewayConflict, GatewayError, GatewayNotConfigured, GatewayRetryable
from scheduler.gateway import BindRequest, NodeObservation, Observation, UtilizationReading
from scheduler.kube_labels import DEFAULT_TOPOLOGY_LABELS, MIG_CONFIG
from scheduler.kube_mig import CONFIG_KEY, DESIRED_CONFIG, config_document
from scheduler.kube_mig_flow import MigFlowMixin
from scheduler.kube_nodes import (
    ApiConflict,
    ApiNotFound,
    annotations_of,
    check_device,
    int_or_none,
    jobs_of,
    labels_of,
    name_of,
    node_observation,
    utilization_readings,
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
    terminating,
)
from scheduler.prometheus import PrometheusClient

logger = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"


class KubeGateway(MigFlowMixin):
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
                    raise ApiNotFound(f"{what}: {detail}") from None
                if exc.status == 409:
                    raise ApiConflict(f"{what}: {detail}") from None
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
        except (ApiNotFound, ApiConflict) as exc:  # a list cannot conflict; 404: the API does not serve it (yet)
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
            if labels_of(pod).get(MANAGED_BY) == SCHEDULER_NAME
            and (job is None or labels_of(pod).get(JOB_LABEL) == job)
        ]

    def _pods_on(self, node: str) -> list[dict[str, Any]]:
        pods = self._items(
            f"list pods on {node}", self.core.list_pod_for_all_namespaces, field_selector=f"spec.nodeName={node}"
        )
        return [pod for pod in pods if node_of(pod) == node]

    def _read_node(self, node: str) -> dict[str, Any]:
        try:
            return self._call(f"read node {node}", self.core.read_node, node)
        except ApiNotFound:
            raise GatewayConflict(f"node {node} is not in the cluster") from None

    def _patch_node(self, node: str, body: Mapping[str, Any]) -> None:
        try:
            self._call(f"patch node {node}", self.core.patch_node, node, dict(body), _content_type=MERGE_PATCH)
        except ApiNotFound:
            raise GatewayConflict(f"node {node} is not in the cluster") from None
        except ApiConflict as exc:
            raise GatewayRetryable(str(exc)) from None

    # -- observe ---------------------------------------------------------------------------------------------

    def observe(self) -> Observation:
        now = self.clock()
        raw_nodes = self._items("list nodes", self.core.list_node)
        pods = self._our_pods()
        nodes = tuple(n for n in (self._node(raw, now) for raw in raw_nodes) if n is not None)
        live = {name_of(raw) for raw in raw_nodes}
        return Observation(observed_at=now, nodes=nodes, jobs=jobs_of(pods, live))

    def _node(self, raw: Mapping[str, Any], now: float) -> NodeObservation | None:
        return node_observation(
            raw, now=now, topology_labels=self.topology_labels, mig_config_timeout_s=self.mig_config_timeout_s
        )

    # -- namespaces and binding ------------------------------------------------------------------------------

    def namespace_ensure(self, *, namespace: str, team: str) -> None:
        try:
            self._call(f"read namespace {namespace}", self.core.read_namespace, namespace)
            return
        except ApiNotFound:
            pass
        body = client.V1Namespace(
            metadata=client.V1ObjectMeta(name=namespace, labels={TEAM_LABEL: team, MANAGED_BY: SCHEDULER_NAME})
        )
        with contextlib.suppress(ApiConflict):  # created meanwhile by another worker: exists is all we want
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
        existing = {
            int(labels_of(p).get(REPLICA_LABEL, "-1")): p for p in self._our_pods(request.namespace, request.job)
        }
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
                raise GatewayRetryable(f"job {request.job}: pod {name_of(pod)} of an earlier run is still terminating")
            if finished(pod):
                raise GatewayConflict(f"job {request.job}: pod {name_of(pod)} already finished; evict the job first")
            if parse_devices(annotations_of(pod).get(DEVICES_ANNOTATION, "")) != placement.devices or node_of(
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
        ours = [p for p in self._our_pods() if labels_of(p).get(JOB_LABEL) != request.job]
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
                        (d.gpu, d.mig_start) for d in parse_devices(annotations_of(pod).get(DEVICES_ANNOTATION, ""))
                    )
            needed: dict[str, int] = {}
            for placement in (p for p in todo if p.node == node_name):
                for device in placement.devices:
                    check_device(node, device, held, wanted)
                for resource, count in device_resources(placement.devices).items():
                    needed[resource] = needed.get(resource, 0) + count
            self._check_allocatable(node_name, raw, needed, request.job)

    def _check_allocatable(self, node: str, raw: Mapping[str, Any], needed: Mapping[str, int], job: str) -> None:
        allocatable = (raw.get("status") or {}).get("allocatable")
        if not allocatable:
            return  # the node reports nothing yet: the device plugin's own admission decides
        used: dict[str, int] = {}
        for pod in self._pods_on(node):
            if terminating(pod) or finished(pod) or labels_of(pod).get(JOB_LABEL) == job:
                continue
            for resource, count in gpu_requests(pod).items():
                used[resource] = used.get(resource, 0) + count
        for resource, count in needed.items():
            offered = int_or_none(allocatable.get(resource)) or 0
            if used.get(resource, 0) + count > offered:
                raise GatewayConflict(
                    f"node {node} offers {offered} {resource}, {used.get(resource, 0)} in use; job {job} needs {count}"
                )

    def _team_of(self, namespace: str) -> str:
        try:
            found = self._call(f"read namespace {namespace}", self.core.read_namespace, namespace)
        except ApiNotFound:
            raise GatewayConflict(f"namespace {namespace} does not exist; ensure the team's namespace first") from None
        return labels_of(found).get(TEAM_LABEL, "")

    def _create_pod(self, request: BindRequest, replica: int, manifest: dict[str, Any]) -> None:
        name = manifest["metadata"]["name"]
        try:
            self._call(
                f"create pod {request.namespace}/{name}",
                self.core.create_namespaced_pod,
                request.namespace,
                client.V1Pod.from_dict(manifest),
            )
        except ApiConflict:
            # A retried POST whose first attempt did reach the server, or a concurrent worker: fine if it
            # is this replica's fresh pod, otherwise the name is taken by something we must not touch.
            try:
                found = self._call(
                    f"read pod {request.namespace}/{name}", self.core.read_namespaced_pod, name, request.namespace
                )
            except ApiNotFound:
                raise GatewayRetryable(f"pod {request.namespace}/{name} vanished while being created") from None
            labels = labels_of(found)
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
        except ApiNotFound:
            raise GatewayRetryable(f"pod {namespace}/{name} vanished before it was bound") from None
        except ApiConflict as exc:
            # 409 on a binding: the pod already has a node. Ours by an earlier attempt of this call is fine.
            try:
                found = self._call(f"read pod {namespace}/{name}", self.core.read_namespaced_pod, name, namespace)
            except ApiNotFound:
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
            logger.info("job %s: deleted pod %s/%s (%s, grace %ss)", job, namespace, name_of(pod), reason, grace_s)

    def _delete_pod(self, pod: Mapping[str, Any], *, grace_s: float) -> None:
        namespace, name = pod["metadata"]["namespace"], name_of(pod)
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
        except ApiNotFound:
            pass  # already gone: evicted is evicted
        except ApiConflict as exc:
            raise GatewayRetryable(str(exc)) from None

    def _evict_foreign(self, pod: Mapping[str, Any]) -> None:
        """Ask another owner's pod to leave through the eviction subresource, which honours its
        PodDisruptionBudget; a refusal (429) leaves it for the next watch."""
        namespace, name = pod["metadata"]["namespace"], name_of(pod)
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
        except (ApiNotFound, ApiConflict):
            pass
        except GatewayRetryable as exc:
            logger.info("pod %s/%s is not evicted yet: %s", namespace, name, exc)

    # -- MIG (the flow itself: scheduler.kube_mig_flow) ------------------------------------------------------

    def _write_mig_config(self, name: str, layouts: Sequence[MigLayout], *, also_keep: set[str]) -> None:
        """Add config ``name`` to the mig-parted ConfigMap (read-modify-write on its resourceVersion)."""
        keep = set(also_keep)
        for raw in self._items("list nodes", self.core.list_node):
            keep.add(labels_of(raw).get(MIG_CONFIG, ""))
            keep.add(annotations_of(raw).get(DESIRED_CONFIG, ""))
        ns, cm = self.operator_namespace, self.mig_config_map
        for _attempt in range(self.attempts):
            try:
                found = self._call(f"read ConfigMap {ns}/{cm}", self.core.read_namespaced_config_map, cm, ns)
            except ApiNotFound:
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
            except (ApiConflict, ApiNotFound):
                continue  # someone else wrote it in between: read again
        raise GatewayRetryable(f"ConfigMap {ns}/{cm} kept changing under us; try again")

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
        return utilization_readings(samples, self.observe())


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


def _api_message(exc: ApiException) -> str:
    if exc.body is None:  # nothing to parse: json.loads would refuse it
        return str(exc.reason or exc.status)
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
