"""The Kubernetes API as the gateway uses it: the only module that imports ``kubernetes`` (DESIGN.md §2).

:class:`KubeClient` makes each call the gateway and the MIG flow need (list, read, patch, create, bind,
delete, evict, record Events, write the mig-parted ConfigMap, the teams' checkpoint claims, the jobs' report
Secrets, their headless Services and, on DRA nodes, the replicas' ResourceClaims) and turns the API server's
failures into the gateway's errors:

- HTTP 429 (honouring ``Retry-After``), 5xx, timeouts and connection failures are retried with exponential
  backoff, then raised as :class:`~scheduler.errors.GatewayRetryable`;
- 404 and 409 mean what the operation makes of them (a deleted pod is already evicted; a node that is
  gone or a pod bound elsewhere is a :class:`~scheduler.errors.GatewayConflict`);
- 400, 401, 403 and 422 are diagnosed for what refused (:mod:`scheduler.gateways.kube.refusals`): RBAC and 401
  are a deployment error (:class:`~scheduler.errors.GatewayError`, "apply deploy/rbac.yaml" for RBAC alone); a
  ResourceQuota, LimitRange, Pod Security or webhook refusal, and an invalid object, refuse that object: a
  :class:`~scheduler.errors.GatewayConflict` whose message says what refused and how to fix it.

Nodes, Microcosm's pods (cluster-wide) and, on a DRA cluster, ResourceSlices and ResourceClaims are read from
:class:`~scheduler.gateways.kube.informer.Informer` caches the client starts on first use: one paged LIST each, then
a WATCH, instead of a LIST per read. A read sees this client's own writes: it waits until the cache has applied the
resourceVersion the server gave each node patch, pod creation and deletion (and, after a binding, whose answer
carries none, the version a GET of the pod reads).
With ``consistent_reads`` every read also asks the server for its current resourceVersion (a LIST with
``limit=1``) and waits until the cache has reached it (through events or bookmarks): what a test that changes the
cluster between two calls needs; in production the caches lag the cluster by the watch's latency only.

Reads take the API's raw JSON (``_preload_content=False``): the pure modules work on plain dicts and a
large cluster's pod list is not validated model by model. Writes send the client's models, so a malformed
manifest fails client-side before it reaches the cluster.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from email.utils import parsedate_to_datetime
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from scheduler.core.model.snapshot import MigLayout
from scheduler.errors import GatewayConflict, GatewayError, GatewayNotConfigured, GatewayRetryable
from scheduler.gateways.kube.events import Write as EventWrite
from scheduler.gateways.kube.grace import grace_to_send
from scheduler.gateways.kube.informer import (
    PAGE_SIZE,
    Expired,
    Informer,
    SourceGone,
    compact_claim,
    compact_node,
    compact_pod,
    compact_slice,
)
from scheduler.gateways.kube.labels import MIG_CONFIG
from scheduler.gateways.kube.mig import (
    ADDED_ANNOTATION,
    CONFIG_KEY,
    DESIRED_CONFIG,
    added_times,
    config_document,
    config_names,
)
from scheduler.gateways.kube.namespaces import team_manifests
from scheduler.gateways.kube.nodes import ApiConflict, ApiNotFound, annotations_of, labels_of, name_of
from scheduler.gateways.kube.pods import (
    JOB_LABEL,
    MANAGED_BY,
    OUR_PODS,
    REPLICA_LABEL,
    SCHEDULER_NAME,
    TEAM_LABEL,
    generation_of,
    node_of,
    terminating,
)
from scheduler.gateways.kube.provisioning import (
    EVENT_NAMESPACE,
    INSUFFICIENT_CAPACITY,
    NODECLAIM_GROUP,
    NODECLAIM_PLURAL,
    NODECLAIM_VERSION,
    PR_GROUP,
    PR_PLURAL,
    PR_VERSION,
    REQUESTS,
)
from scheduler.gateways.kube.refusals import diagnose

logger = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
RESOURCE_SLICES = "resourceslices"  # the informer of resource.k8s.io/v1 ResourceSlices (KubeClient.informer)
RESOURCE_CLAIMS = "resourceclaims"  # the informer of every ResourceClaim, cluster-wide (KubeClient.informer)
MIG_MANAGER_SELECTOR = "app=nvidia-mig-manager"  # the GPU Operator's MIG Manager DaemonSet pods

# What the API server's Pod Security admission says when it refuses a pod (kubernetes
# staging/src/k8s.io/pod-security-admission/admission/admission.go, EvaluatePod): a 403 that no grant can fix.

ApiClient = client.ApiClient  # what callers pass in, named without importing ``kubernetes`` themselves

# (API server, namespace, ConfigMap) → time.monotonic() when this process last made sure the mig-parted ConfigMap
# holds the operator's names. A gateway is built per task, so the instance cannot remember it; with this the check
# (a node list and a read) runs every few minutes per process, not on every MIG watch.
_OPERATOR_CONFIGS_ENSURED: dict[tuple[str, str, str], float] = {}
OPERATOR_CONFIGS_RECHECK_S = 600.0


class KubeClient:
    """The API calls of :class:`~scheduler.gateways.kube.gateway.KubeGateway` (module doc).

    ``api_client`` defaults to the in-cluster service account, else ``KUBECONFIG``/``~/.kube/config``.
    ``sleep`` is injectable so tests need no real waits.
    """

    def __init__(
        self,
        api_client: client.ApiClient | None = None,
        *,
        operator_namespace: str = "gpu-operator",
        mig_config_map: str = "microcosm-mig-config",
        request_timeout_s: float = 30.0,
        attempts: int = 4,
        backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
        consistent_reads: bool = True,
        sync_timeout_s: float = 60.0,
        page_size: int = PAGE_SIZE,
        watch_timeout_s: int = 300,
    ) -> None:
        self.api = api_client or _api_client_from_environment()
        self.core = client.CoreV1Api(self.api)
        self.rbac = client.RbacAuthorizationV1Api(self.api)
        self.resource = client.ResourceV1Api(self.api)  # resource.k8s.io/v1: DRA's ResourceSlices and DeviceClasses
        self.operator_namespace = operator_namespace
        self.mig_config_map = mig_config_map
        self.request_timeout_s = request_timeout_s
        self.attempts = max(attempts, 1)
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.sleep = sleep
        self.consistent_reads = consistent_reads
        self.sync_timeout_s = sync_timeout_s
        self.page_size = page_size
        self.watch_timeout_s = watch_timeout_s
        self._informers: dict[str, Informer] = {}
        self._informers_lock = threading.Lock()
        self._written: dict[str, str] = {}  # resource -> the resourceVersion of this client's last write to it

    # -- the caches (scheduler.gateways.kube.informer) -------------------------------------------------------

    def informer(self, resource: str) -> Informer:
        """The cache of ``resource`` ("nodes", "resourceslices", "resourceclaims": every owner's, or "pods":
        Microcosm's, cluster-wide), started on first use."""
        with self._informers_lock:
            found = self._informers.get(resource)
            if found is None:
                if resource == "nodes":
                    source = _ListWatchSource(self, "list nodes", "list_node", "")
                    found = Informer("nodes", source, compact=compact_node)
                elif resource == RESOURCE_SLICES:
                    source = _ListWatchSource(self, "list ResourceSlices", "list_resource_slice", "", api="resource")
                    found = Informer("ResourceSlices", source, compact=compact_slice)
                elif resource == RESOURCE_CLAIMS:
                    source = _ListWatchSource(
                        self, "list ResourceClaims", "list_resource_claim_for_all_namespaces", "", api="resource"
                    )
                    found = Informer("ResourceClaims", source, compact=compact_claim)
                else:
                    source = _ListWatchSource(self, "list Microcosm's pods", "list_pod_for_all_namespaces", OUR_PODS)
                    found = Informer("Microcosm's pods", source, compact=compact_pod, index=job_key)
                found.page_size = self.page_size
                found.sync_timeout_s = self.sync_timeout_s
                found.watch_timeout_s = self.watch_timeout_s
                found.max_backoff_s = self.max_backoff_s
                weakref.finalize(self, found.stop)  # the thread holds no reference to this client
                self._informers[resource] = found
                found.start()
            return found

    def close(self) -> None:
        """Stop the caches' watch threads (a worker's gateway lives as long as its process: tests and forks)."""
        with self._informers_lock:
            for informer in self._informers.values():
                informer.stop()
            self._informers.clear()

    def cached(self, resource: str, *, key: str | None = None, index: str | None = None) -> list[dict[str, Any]]:
        """The cache of ``resource`` once it has applied this client's last write to it (and, with
        ``consistent_reads``, everything the server had when this was called): all of it, or the object of ``key``
        (none or one), or the objects of the cache's index value ``index`` (:func:`job_key`)."""
        informer = self.informer(resource)
        informer.items()  # the first sync first: its failures are the read's
        wanted = [self._written.get(resource)]
        if self.consistent_reads:
            methods: dict[str, Callable[..., Any]] = {
                "nodes": self.core.list_node,
                RESOURCE_SLICES: self.resource.list_resource_slice,
                RESOURCE_CLAIMS: self.resource.list_resource_claim_for_all_namespaces,
            }
            method = methods.get(resource, self.core.list_pod_for_all_namespaces)
            selector: dict[str, Any] = {"label_selector": OUR_PODS} if resource == "pods" else {}
            probe = self.call(f"read the {resource}' resourceVersion", method, limit=1, **selector)
            wanted.append((probe.get("metadata") or {}).get("resourceVersion"))
        for version in wanted:
            if version and not informer.wait_for(version, self.sync_timeout_s):
                raise GatewayRetryable(
                    f"the {informer.what} cache has not reached resourceVersion {version} within "
                    f"{self.sync_timeout_s:g} s (at {informer.resource_version or 'none'})"
                )
        if key is not None:
            found = informer.get(key)
            return [] if found is None else [found]
        if index is not None:
            return informer.indexed(index)
        return informer.items()

    def _wrote(self, resource: str, answer: Any) -> None:
        """Remember the resourceVersion a write's answer carries: the next read of ``resource`` waits for it."""
        version = ((answer or {}).get("metadata") or {}).get("resourceVersion") if isinstance(answer, dict) else None
        if version:
            self._written[resource] = str(version)

    # -- calling the API -------------------------------------------------------------------------------------

    def call(
        self,
        what: str,
        method: Callable[..., Any],
        *args: Any,
        attempts: int | None = None,
        text: bool = False,
        **kw: Any,
    ) -> Any:
        """Call one API method; retry what is transient (module doc); return the raw JSON for reads (with ``text``:
        the body as text, for the APIs that answer plain text such as a pod's log)."""
        tries = attempts or self.attempts
        for attempt in range(1, tries + 1):
            try:
                response = method(*args, _request_timeout=self.request_timeout_s, _preload_content=False, **kw)
                body = response.data
                if text:
                    return (body or b"").decode("utf-8", errors="replace")
                return json.loads(body) if body else {}
            except ApiException as exc:
                detail = _api_message(exc)
                if exc.status == 404:
                    raise ApiNotFound(f"{what}: {detail}") from None
                if exc.status == 409:
                    raise ApiConflict(f"{what}: {detail}") from None
                if exc.status == 410:  # a resourceVersion or continue token older than the server keeps
                    raise Expired(f"{what}: {detail}") from None
                if exc.status == 429 or exc.status >= 500 or exc.status == 0:
                    delay = _retry_after(exc) if exc.status == 429 else None
                else:  # 400, 401, 403, 422…: retrying cannot help; what refused decides whose fault it is
                    refusal = diagnose(exc.status, detail, what=what)
                    raise (GatewayConflict if refusal.conflict else GatewayError)(refusal.message) from None
            except (urllib3.exceptions.HTTPError, OSError) as exc:  # timeouts, resets, refused connections
                detail, delay = f"{type(exc).__name__}: {exc}", None
            if attempt == tries:
                raise GatewayRetryable(f"{what} failed {tries} times, last: {detail}")
            backoff = min(self.backoff_s * 2 ** (attempt - 1), self.max_backoff_s)
            self.sleep(min(delay, self.max_backoff_s) if delay is not None else backoff)
        raise AssertionError("unreachable")  # pragma: no cover

    def items(self, what: str, method: Callable[..., Any], *args: Any, **kw: Any) -> list[dict[str, Any]]:
        try:
            return list(self.call(what, method, *args, **kw).get("items") or [])
        except (ApiNotFound, ApiConflict) as exc:  # a list cannot conflict; 404: the API does not serve it (yet)
            raise GatewayRetryable(str(exc)) from None

    # -- nodes -----------------------------------------------------------------------------------------------

    def nodes(self) -> list[dict[str, Any]]:
        """Every node, from the cache (module doc)."""
        return self.cached("nodes")

    # -- Dynamic Resource Allocation (resource.k8s.io/v1; scheduler.gateways.kube.dra_slices) -----------------

    def resource_slices(self) -> list[dict[str, Any]]:
        """Every ResourceSlice, from the cache (module doc): the DRA drivers' inventories. A server that does not
        serve them (404: Kubernetes before 1.34, or the resource.k8s.io/v1 API turned off) is a deployment error."""
        try:
            return self.cached(RESOURCE_SLICES)
        except ApiNotFound as exc:
            raise GatewayError(
                "KUBE_DRA=1 but the API server does not serve resource.k8s.io/v1 ResourceSlices (Dynamic Resource "
                f"Allocation needs Kubernetes 1.34 or later): unset KUBE_DRA or upgrade the cluster ({exc})"
            ) from None

    def device_classes(self) -> list[dict[str, Any]]:
        """Every DeviceClass (a LIST: a handful of objects that change when a driver is installed)."""
        return self.items("list DeviceClasses", self.resource.list_device_class)

    def node_cached(self, node: str) -> dict[str, Any]:
        """One node, from the cache (:meth:`cached`); a node not there is a conflict, as the server's 404 is."""
        found = self.cached("nodes", key=node)
        if not found:
            raise GatewayConflict(f"node {node} is not in the cluster")
        return found[0]

    def node_read(self, node: str) -> dict[str, Any]:
        try:
            found: dict[str, Any] = self.call(f"read node {node}", self.core.read_node, node)
        except ApiNotFound:
            raise GatewayConflict(f"node {node} is not in the cluster") from None
        return found

    def node_patch(self, node: str, body: Mapping[str, Any]) -> None:
        try:
            answer = self.call(f"patch node {node}", self.core.patch_node, node, dict(body), _content_type=MERGE_PATCH)
            self._wrote("nodes", answer)
        except ApiNotFound:
            raise GatewayConflict(f"node {node} is not in the cluster") from None
        except ApiConflict as exc:
            raise GatewayRetryable(str(exc)) from None

    # -- pods ------------------------------------------------------------------------------------------------

    def pods_ours(
        self, namespace: str | None = None, job: str | None = None, *, from_server: bool = False
    ) -> list[dict[str, Any]]:
        """Microcosm's pods (of one job); labels are checked here too, not only by the selector. From the cache
        (module doc): cluster-wide, or one job's in one namespace by the cache's index (:func:`job_key`). With
        ``from_server``, one job's are a LIST the server filters by the job's label: what a caller reads that
        must see a pod's binding of a moment ago, or that runs where no worker keeps the caches (the web tier)."""
        if namespace is None:
            pods = [pod for pod in self.cached("pods") if job is None or labels_of(pod).get(JOB_LABEL) == job]
        elif from_server or job is None:
            selector = OUR_PODS if job is None else f"{OUR_PODS},{JOB_LABEL}={job}"
            pods = self.items(
                f"list pods of job {job} in {namespace}",
                self.core.list_namespaced_pod,
                namespace,
                label_selector=selector,
            )
        else:
            pods = self.cached("pods", index=f"{namespace}/{job}")
        return [
            pod
            for pod in pods
            if labels_of(pod).get(MANAGED_BY) == SCHEDULER_NAME
            and (job is None or labels_of(pod).get(JOB_LABEL) == job)
        ]

    def pods_on(self, node: str) -> list[dict[str, Any]]:
        pods = self.items(
            f"list pods on {node}", self.core.list_pod_for_all_namespaces, field_selector=f"spec.nodeName={node}"
        )
        return [pod for pod in pods if node_of(pod) == node]

    def mig_managers(self, node: str) -> list[dict[str, Any]]:
        """The GPU Operator's MIG Manager pods on ``node``."""
        return [
            pod
            for pod in self.items(
                "list MIG Manager pods",
                self.core.list_namespaced_pod,
                self.operator_namespace,
                label_selector=MIG_MANAGER_SELECTOR,
            )
            if node_of(pod) == node and labels_of(pod).get("app") == "nvidia-mig-manager"
        ]

    def pod_create(
        self, namespace: str, job: str, replica: int, manifest: dict[str, Any], *, generation: int = 0
    ) -> str:
        """Create the replica's pod (of ``generation``: a move's); its ``metadata.uid``, which the binding names
        (:meth:`pod_bind`)."""
        name = manifest["metadata"]["name"]
        try:
            created = self.call(
                f"create pod {namespace}/{name}",
                self.core.create_namespaced_pod,
                namespace,
                client.V1Pod.from_dict(manifest),
            )
            self._wrote("pods", created)
        except ApiNotFound:
            raise GatewayConflict(f"namespace {namespace} does not exist; ensure the team's namespace first") from None
        except ApiConflict:
            # A retried POST whose first attempt did reach the server, or a concurrent worker: fine if it
            # is this replica's fresh pod, otherwise the name is taken by something we must not touch.
            try:
                found = self.call(f"read pod {namespace}/{name}", self.core.read_namespaced_pod, name, namespace)
            except ApiNotFound:
                raise GatewayRetryable(f"pod {namespace}/{name} vanished while being created") from None
            labels = labels_of(found)
            if (
                labels.get(JOB_LABEL) != job
                or labels.get(REPLICA_LABEL) != str(replica)
                or generation_of(found) != generation
                or terminating(found)
            ):
                raise GatewayRetryable(f"pod name {namespace}/{name} is taken by an older pod") from None
            return uid_of(found)
        return uid_of(created)

    def pod_bind(self, namespace: str, name: str, node: str, *, uid: str, remember: bool = True) -> None:
        """Bind pod ``namespace/name`` to ``node``, on the condition that it is still the pod ``uid``.

        The Binding carries the pod's UID as kube-scheduler's binds do (kubernetes pkg/scheduler/framework/plugins/
        defaultbinder/default_binder.go: ``ObjectMeta{Namespace, Name, UID: p.UID}``); the API server checks it as
        a precondition (pkg/registry/core/pod/storage/storage.go ``setPodNodeAndMetadata``), so a stale call never
        binds a pod recreated under the same name: 409 "Precondition failed: UID in precondition: …"."""
        body = client.V1Binding(
            metadata=client.V1ObjectMeta(name=name, namespace=namespace, uid=uid or None),
            target=client.V1ObjectReference(api_version="v1", kind="Node", name=node),
        )
        try:
            self.call(
                f"bind pod {namespace}/{name} to {node}", self.core.create_namespaced_pod_binding, name, namespace, body
            )
        except ApiNotFound:
            raise GatewayRetryable(f"pod {namespace}/{name} vanished before it was bound") from None
        except ApiConflict as exc:
            # 409 on a binding: the pod already has a node, or it is not the pod we created. Ours bound by an
            # earlier attempt of this call is fine.
            try:
                found = self.call(f"read pod {namespace}/{name}", self.core.read_namespaced_pod, name, namespace)
            except ApiNotFound:
                raise GatewayRetryable(f"pod {namespace}/{name} vanished while being bound") from None
            if uid and uid_of(found) != uid:
                raise GatewayRetryable(
                    f"pod {namespace}/{name} was replaced (uid {uid_of(found)}, not {uid}) before it was bound"
                ) from None
            if node_of(found) != node:
                raise GatewayConflict(
                    f"pod {namespace}/{name} is bound to {node_of(found)}, not {node}: {exc}"
                ) from None
            self._wrote("pods", found)
            return
        # A binding's answer is a Status without the pod's new resourceVersion: read it, so that the next read
        # of the cache waits until the watch has brought the bound pod. Without ``remember`` the caller binds
        # another pod after this one and reads that one: resourceVersions only grow (the etcd revision), so
        # waiting for the last binding's waits for this one too.
        if not remember:
            return
        with contextlib.suppress(ApiNotFound, ApiConflict, GatewayRetryable):
            self._wrote(
                "pods", self.call(f"read pod {namespace}/{name}", self.core.read_namespaced_pod, name, namespace)
            )

    def pod_delete(self, pod: Mapping[str, Any], *, grace_s: float | None = None) -> None:
        """Delete ``pod`` with its own termination grace, or ``grace_s`` when that is shorter (a deadline):
        :mod:`scheduler.gateways.kube.grace`. Pass 0 only for a pod that never ran or has finished."""
        namespace, name = pod["metadata"]["namespace"], name_of(pod)
        grace = grace_to_send(pod, grace_s)
        query: dict[str, Any] = {} if grace is None else {"grace_period_seconds": grace}  # None: the pod's own
        try:
            answer = self.call(
                f"delete pod {namespace}/{name}",
                self.core.delete_namespaced_pod,
                name,
                namespace,
                **query,
                body=client.V1DeleteOptions(grace_period_seconds=grace, propagation_policy="Background"),
            )
            if labels_of(pod).get(MANAGED_BY) == SCHEDULER_NAME:
                self._wrote("pods", answer)  # the deleted (or terminating) pod, at its deletion's version
        except ApiNotFound:
            pass  # already gone: evicted is evicted
        except ApiConflict as exc:
            raise GatewayRetryable(str(exc)) from None

    def pod_evict(self, pod: Mapping[str, Any], *, grace_s: float | None = None) -> None:
        """Ask another owner's pod to leave through the eviction subresource, which honours its
        PodDisruptionBudget; a refusal (429) leaves it for the next watch. Its own termination grace applies
        unless ``grace_s`` is shorter (a deadline: :mod:`scheduler.gateways.kube.grace`)."""
        namespace, name = pod["metadata"]["namespace"], name_of(pod)
        grace = grace_to_send(pod, grace_s)
        body = client.V1Eviction(
            metadata=client.V1ObjectMeta(name=name, namespace=namespace),
            delete_options=client.V1DeleteOptions(grace_period_seconds=grace) if grace is not None else None,
        )
        try:
            self.call(
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

    # -- Events (scheduler.gateways.kube.events) ---------------------------------------------------------------

    def event_write(self, write: EventWrite) -> bool:
        """Create an ``events.k8s.io/v1`` Event, or patch its series; False when the Event to patch is gone (the
        caller creates it anew). Two attempts only: an Event is best effort and never holds up a bind."""
        events = client.EventsV1Api(self.api)
        what = f"record Event {write.namespace}/{write.name}"
        try:
            if write.patch:
                self.call(
                    what,
                    events.patch_namespaced_event,
                    write.name,
                    write.namespace,
                    dict(write.body),
                    _content_type=MERGE_PATCH,
                    attempts=min(self.attempts, 2),
                )
            else:
                body = client.EventsV1Event.from_dict(dict(write.body))
                self.call(what, events.create_namespaced_event, write.namespace, body, attempts=min(self.attempts, 2))
        except ApiNotFound:
            if write.patch:
                return False
            raise GatewayConflict(f"{what}: namespace {write.namespace} does not exist") from None
        except ApiConflict as exc:
            raise GatewayRetryable(str(exc)) from None
        return True

    def pod_log(self, namespace: str, name: str, *, container: str, tail_lines: int, limit_bytes: int) -> str | None:
        """The last ``tail_lines`` lines of a container's log, cut at ``limit_bytes`` bytes by the API server.

        None when the pod is gone (404). A 400 means the container has no log to give yet (waiting to start, not
        bound to a node): :class:`GatewayConflict` with the server's words, which the caller shows. Two attempts
        only: a reader waits on this, and the next refresh tries again."""
        try:
            found: str = self.call(
                f"read the log of pod {namespace}/{name}",
                self.core.read_namespaced_pod_log,
                name,
                namespace,
                container=container,
                tail_lines=tail_lines,
                limit_bytes=limit_bytes,
                attempts=min(self.attempts, 2),
                text=True,
            )
        except ApiNotFound:
            return None
        except ApiConflict as exc:
            raise GatewayRetryable(str(exc)) from None
        return found

    # -- namespaces ------------------------------------------------------------------------------------------

    def namespace_ensure(self, namespace: str, team: str, *, create: bool = False, level: str = "baseline") -> None:
        """Check that ``namespace`` exists and holds ``team``'s pods (its team label); a conflict otherwise.

        Team namespaces are the platform's (``manage.py team_namespaces | kubectl apply -f -``): Microcosm holds no
        right to create namespaces unless ``create`` (``KUBE_NAMESPACE_CREATE``) is set, with the opt-in grant of
        deploy/rbac.yaml. Then a missing namespace is created with the team and Pod Security (``level``) labels,
        and its RoleBindings with it (docs/deploy.md, RBAC)."""
        try:
            found = self.call(f"read namespace {namespace}", self.core.read_namespace, namespace)
        except ApiNotFound:
            if not create:
                raise GatewayConflict(
                    f"namespace {namespace} of team {team} does not exist: the platform creates team namespaces "
                    "(python manage.py team_namespaces | kubectl apply -f -), or set KUBE_NAMESPACE_CREATE=true "
                    "with the namespace-creation grant of deploy/rbac.yaml (docs/deploy.md, RBAC)"
                ) from None
            self._namespace_create(namespace, team, level)
            return
        labelled = labels_of(found).get(TEAM_LABEL)
        if labelled != team:
            said = f"is labelled {TEAM_LABEL}={labelled}" if labelled else f"has no {TEAM_LABEL} label"
            raise GatewayConflict(
                f"namespace {namespace} {said}, not {TEAM_LABEL}={team}: Microcosm runs a team's pods only in a "
                "namespace labelled for that team (python manage.py team_namespaces renders it)"
            )

    def _namespace_create(self, namespace: str, team: str, level: str) -> None:
        """The namespace and its RoleBindings (:mod:`scheduler.gateways.kube.namespaces`). Binding a ClusterRole
        needs the ``bind`` verb on it unless Microcosm already holds every right it grants (RBAC's escalation
        prevention: kubernetes pkg/registry/rbac/rolebinding/policybased/storage.go, then BindingAuthorized in
        pkg/registry/rbac/escalation_check.go, else ConfirmNoEscalation in pkg/registry/rbac/validation/rule.go);
        the opt-in ClusterRole of deploy/rbac.yaml gives it. A RoleBinding that exists is left alone."""
        manifests = team_manifests(namespace, team, level)
        body = client.V1Namespace(
            metadata=client.V1ObjectMeta(name=namespace, labels=manifests[0]["metadata"]["labels"])
        )
        with contextlib.suppress(ApiConflict):  # created meanwhile by another worker, which binds it too
            self.call(f"create namespace {namespace}", self.core.create_namespace, body)
        for binding in manifests[1:]:
            name = binding["metadata"]["name"]
            model = self.api.deserialize(json.dumps(binding), "V1RoleBinding", "application/json")
            with contextlib.suppress(ApiConflict):
                self.call(
                    f"create RoleBinding {namespace}/{name}", self.rbac.create_namespaced_role_binding, namespace, model
                )

    def namespace_team(self, namespace: str) -> str:
        """The team label of ``namespace``; a namespace that does not exist is a conflict."""
        try:
            found = self.call(f"read namespace {namespace}", self.core.read_namespace, namespace)
        except ApiNotFound:
            raise GatewayConflict(f"namespace {namespace} does not exist; ensure the team's namespace first") from None
        return labels_of(found).get(TEAM_LABEL, "")

    # -- checkpoint claims and report Secrets (scheduler.gateways.kube.checkpoint_storage) -------------------

    def claim_read(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The PersistentVolumeClaim ``namespace/name``, or None when there is none."""
        read = self.core.read_namespaced_persistent_volume_claim
        return self._read_or_none(f"read PersistentVolumeClaim {namespace}/{name}", read, name, namespace)

    def claim_create(self, manifest: Mapping[str, Any]) -> None:
        """Create a claim; one created meanwhile by another worker is what we wanted."""
        body = client.V1PersistentVolumeClaim.from_dict(dict(manifest))
        self._create(manifest, "PersistentVolumeClaim", self.core.create_namespaced_persistent_volume_claim, body)

    def secret_read(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Secret ``namespace/name``, or None when there is none."""
        return self._read_or_none(f"read Secret {namespace}/{name}", self.core.read_namespaced_secret, name, namespace)

    def secret_create(self, manifest: Mapping[str, Any]) -> bool:
        """Create a Secret; False when one of that name exists already (the caller reads it and decides)."""
        body = client.V1Secret.from_dict(dict(manifest))
        return self._create(manifest, "Secret", self.core.create_namespaced_secret, body)

    def secret_delete(self, namespace: str, name: str) -> None:
        try:
            self.call(f"delete Secret {namespace}/{name}", self.core.delete_namespaced_secret, name, namespace)
        except ApiNotFound:
            pass  # already gone: deleted is deleted
        except ApiConflict as exc:
            raise GatewayRetryable(str(exc)) from None

    # -- the jobs' headless Services (scheduler.gateways.kube.rendezvous) -----------------------------------

    def service_read(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Service ``namespace/name``, or None when there is none."""
        read = self.core.read_namespaced_service
        return self._read_or_none(f"read Service {namespace}/{name}", read, name, namespace)

    def service_create(self, manifest: Mapping[str, Any]) -> bool:
        """Create a Service; False when one of that name exists already (the caller reads it and decides)."""
        body = client.V1Service.from_dict(dict(manifest))
        return self._create(manifest, "Service", self.core.create_namespaced_service, body)

    def service_delete(self, namespace: str, name: str) -> None:
        try:
            self.call(f"delete Service {namespace}/{name}", self.core.delete_namespaced_service, name, namespace)
        except ApiNotFound:
            pass  # already gone: deleted is deleted
        except ApiConflict as exc:
            raise GatewayRetryable(str(exc)) from None

    def _read_or_none(self, what: str, method: Callable[..., Any], *args: Any) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = self.call(what, method, *args)
        except ApiNotFound:
            return None
        except ApiConflict as exc:
            raise GatewayRetryable(str(exc)) from None
        return found

    def _create(self, manifest: Mapping[str, Any], kind: str, method: Callable[..., Any], body: Any) -> bool:
        """Create a namespaced object; False when its name is taken (409), a conflict when its namespace is gone."""
        namespace, name = manifest["metadata"]["namespace"], manifest["metadata"]["name"]
        try:
            self.call(f"create {kind} {namespace}/{name}", method, namespace, body)
        except ApiConflict:
            return False
        except ApiNotFound:
            raise GatewayConflict(f"namespace {namespace} does not exist; ensure the team's namespace first") from None
        return True

    # -- ResourceClaims on DRA nodes (scheduler.gateways.kube.dra_claims) ------------------------------------------

    def resource_claims(
        self, namespace: str | None = None, *, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        """ResourceClaims of every owner, one LIST (of ``namespace``, else of every namespace): the devices they
        hold are not free, whoever allocated them (kube-scheduler's allocator counts every allocated claim too)."""
        api = client.ResourceV1Api(self.api)
        if namespace is None:
            return self.items(
                "list ResourceClaims", api.list_resource_claim_for_all_namespaces, label_selector=label_selector
            )
        return self.items(
            f"list ResourceClaims in {namespace}",
            api.list_namespaced_resource_claim,
            namespace,
            label_selector=label_selector,
        )

    def resource_claims_cached(self) -> list[dict[str, Any]]:
        """Every ResourceClaim of every owner, from the cache (module doc): what a bind on a DRA node reads for the
        devices other claims hold, without a LIST per bind. The claims of this client's own status writes are
        there (the read waits for them, as kube-scheduler's assume cache holds its own writes until the watch brings
        them: kubernetes pkg/scheduler/framework/plugins/dynamicresources/dra_manager.go); another owner's
        allocation is there once the watch has brought it (at once with ``consistent_reads``)."""
        return self.cached(RESOURCE_CLAIMS)

    def resource_claim_read(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The ResourceClaim ``namespace/name``, or None when there is none."""
        read = client.ResourceV1Api(self.api).read_namespaced_resource_claim
        return self._read_or_none(f"read ResourceClaim {namespace}/{name}", read, name, namespace)

    def resource_claim_create(self, manifest: Mapping[str, Any]) -> bool:
        """Create a ResourceClaim; False when one of its name exists (the caller reads it and decides)."""
        api = client.ResourceV1Api(self.api)
        body = client.ResourceV1ResourceClaim.from_dict(dict(manifest))
        return self._create(manifest, "ResourceClaim", api.create_namespaced_resource_claim, body)

    def resource_claim_status(self, claim: Mapping[str, Any], status: Mapping[str, Any]) -> dict[str, Any] | None:
        """Replace ``claim``'s status (its ``status`` subresource) with ``status``; the claim as the server stored it,
        or None when the claim changed since it was read (409: the caller reads it again and retries, as
        kube-scheduler's and KAI's binders do with ``retry.RetryOnConflict``).

        A PUT carrying the claim's resourceVersion, as kube-scheduler's ``UpdateStatus`` (dynamicresources.go
        bindClaim). A claim gone is a GatewayConflict; a status the server refuses (422: e.g. a reservation without
        an allocation) is one too, with the server's words."""
        meta = claim["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        api = client.ResourceV1Api(self.api)
        body = client.ResourceV1ResourceClaim.from_dict({**claim, "status": dict(status)})
        try:
            stored: dict[str, Any] = self.call(
                f"update the status of ResourceClaim {namespace}/{name}",
                api.replace_namespaced_resource_claim_status,
                name,
                namespace,
                body,
            )
        except ApiNotFound:
            raise GatewayConflict(f"ResourceClaim {namespace}/{name} is gone") from None
        except ApiConflict:
            return None
        self._wrote(RESOURCE_CLAIMS, stored)  # the next bind's read of the claims cache sees this allocation
        return stored

    def resource_claim_patch(self, namespace: str, name: str, body: Mapping[str, Any]) -> None:
        """Merge-patch a ResourceClaim (its finalizers); one gone is fine: it is what the patch was heading for."""
        api = client.ResourceV1Api(self.api)
        try:
            self.call(
                f"patch ResourceClaim {namespace}/{name}",
                api.patch_namespaced_resource_claim,
                name,
                namespace,
                dict(body),
                _content_type=MERGE_PATCH,
            )
        except ApiNotFound:
            pass
        except ApiConflict as exc:
            raise GatewayRetryable(str(exc)) from None

    def resource_claim_delete(self, namespace: str, name: str) -> None:
        api = client.ResourceV1Api(self.api)
        self._delete(f"delete ResourceClaim {namespace}/{name}", api.delete_namespaced_resource_claim, name, namespace)

    # -- node requests (scheduler.gateways.kube.node_requests; their objects: scheduler.gateways.kube.provisioning) --

    def provisioning_requests(self) -> list[dict[str, Any]]:
        """Microcosm's ProvisioningRequests in every namespace, one LIST; none when the API does not serve them (the
        Cluster Autoscaler's CRD is not installed)."""
        return self._custom_list(PR_GROUP, PR_VERSION, PR_PLURAL, "list ProvisioningRequests")

    def provisioning_request_create(self, manifest: Mapping[str, Any]) -> bool:
        """Create a ProvisioningRequest; False when one of its name exists (a retried or repeated request)."""
        namespace, name = manifest["metadata"]["namespace"], manifest["metadata"]["name"]
        custom = client.CustomObjectsApi(self.api)
        try:
            self.call(
                f"create ProvisioningRequest {namespace}/{name}",
                custom.create_namespaced_custom_object,
                PR_GROUP,
                PR_VERSION,
                namespace,
                PR_PLURAL,
                dict(manifest),
            )
        except ApiConflict:
            return False
        except ApiNotFound:
            raise GatewayConflict(
                f"cannot create ProvisioningRequest {namespace}/{name}: the namespace does not exist or the cluster "
                f"does not serve {PR_PLURAL}.{PR_GROUP}/{PR_VERSION} (install the Cluster Autoscaler's CRD and run it "
                "with --enable-provisioning-requests; docs/deploy.md, On-demand capacity)"
            ) from None
        return True

    def provisioning_request_delete(self, namespace: str, name: str) -> None:
        custom = client.CustomObjectsApi(self.api)
        self._delete(
            f"delete ProvisioningRequest {namespace}/{name}",
            custom.delete_namespaced_custom_object,
            PR_GROUP,
            PR_VERSION,
            namespace,
            PR_PLURAL,
            name,
        )

    def pod_templates(self) -> list[dict[str, Any]]:
        """The PodTemplates of Microcosm's node requests in every namespace, one LIST."""
        return self.items(
            "list node requests' PodTemplates", self.core.list_pod_template_for_all_namespaces, label_selector=REQUESTS
        )

    def pod_template_create(self, manifest: Mapping[str, Any]) -> bool:
        """Create a node request's PodTemplate; False when one of its name exists."""
        body = client.V1PodTemplate.from_dict(dict(manifest))
        return self._create(manifest, "PodTemplate", self.core.create_namespaced_pod_template, body)

    def pod_template_patch(self, namespace: str, name: str, body: Mapping[str, Any]) -> None:
        try:
            self.call(
                f"patch PodTemplate {namespace}/{name}",
                self.core.patch_namespaced_pod_template,
                name,
                namespace,
                dict(body),
                _content_type=MERGE_PATCH,
            )
        except ApiNotFound:
            raise GatewayConflict(f"PodTemplate {namespace}/{name} is gone: its node request was withdrawn") from None
        except ApiConflict as exc:
            raise GatewayRetryable(str(exc)) from None

    def pod_template_delete(self, namespace: str, name: str) -> None:
        self._delete(
            f"delete PodTemplate {namespace}/{name}", self.core.delete_namespaced_pod_template, name, namespace
        )

    def placeholders(self, *, namespace: str | None = None, request: str = "") -> list[dict[str, Any]]:
        """The placeholder pods of Microcosm's node requests (Karpenter), one LIST: every namespace's, or those of
        one request (its object name) in ``namespace``."""
        if namespace is None:
            return self.items(
                "list node requests' placeholder pods", self.core.list_pod_for_all_namespaces, label_selector=REQUESTS
            )
        return self.items(
            f"list the placeholder pods of {namespace}/{request}",
            self.core.list_namespaced_pod,
            namespace,
            label_selector=f"{REQUESTS}={request}",
        )

    def placeholder_create(self, manifest: Mapping[str, Any]) -> bool:
        """Create a placeholder pod; False when one of its name exists."""
        body = client.V1Pod.from_dict(dict(manifest))
        return self._create(manifest, "placeholder pod", self.core.create_namespaced_pod, body)

    def node_claims(self) -> list[dict[str, Any]]:
        """Karpenter's NodeClaims (cluster-scoped), one LIST; none when the API does not serve them."""
        return self._custom_list(NODECLAIM_GROUP, NODECLAIM_VERSION, NODECLAIM_PLURAL, "list NodeClaims")

    def node_claim_events(self) -> list[dict[str, Any]]:
        """Karpenter's Events of NodeClaims that found no capacity (:data:`~scheduler.gateways.kube.provisioning.
        INSUFFICIENT_CAPACITY`), one LIST: core/v1 Events in ``default``, where client-go's recorder puts the Events
        of a cluster-scoped object (client-go ``tools/record/event.go`` ``makeEvent``). Filtered here as well as by
        the field selector, which an API server proxy may drop."""
        selector = f"involvedObject.kind=NodeClaim,reason={INSUFFICIENT_CAPACITY}"
        found = self.items(
            "list NodeClaim events", self.core.list_namespaced_event, EVENT_NAMESPACE, field_selector=selector
        )
        return [
            e
            for e in found
            if e.get("reason") == INSUFFICIENT_CAPACITY and (e.get("involvedObject") or {}).get("kind") == "NodeClaim"
        ]

    def node_claim_delete(self, name: str) -> None:
        """Delete a NodeClaim: Karpenter's termination finalizer drains its node and terminates the instance."""
        custom = client.CustomObjectsApi(self.api)
        self._delete(
            f"delete NodeClaim {name}",
            custom.delete_cluster_custom_object,
            NODECLAIM_GROUP,
            NODECLAIM_VERSION,
            NODECLAIM_PLURAL,
            name,
        )

    def _custom_list(self, group: str, version: str, plural: str, what: str) -> list[dict[str, Any]]:
        custom = client.CustomObjectsApi(self.api)
        selector = REQUESTS if plural == PR_PLURAL else None
        try:
            found = self.call(what, custom.list_cluster_custom_object, group, version, plural, label_selector=selector)
        except ApiNotFound:
            return []  # the CRD is not installed: no such objects
        except ApiConflict as exc:
            raise GatewayRetryable(str(exc)) from None
        return list(found.get("items") or [])

    def _delete(self, what: str, method: Callable[..., Any], *args: Any) -> None:
        try:
            self.call(what, method, *args)
        except ApiNotFound:
            pass  # already gone: deleted is deleted
        except ApiConflict as exc:
            raise GatewayRetryable(str(exc)) from None

    # -- the mig-parted ConfigMap ----------------------------------------------------------------------------

    def mig_config_write(self, name: str, layouts: Sequence[MigLayout], *, also_keep: set[str], now: float) -> float:
        """Add config ``name`` to the mig-parted ConfigMap (read-modify-write on its resourceVersion), with every
        name the GPU Operator would offer (:func:`~scheduler.gateways.kube.mig.operator_configs`); ``""``: only
        make sure of those. Returns when ``name`` first entered the ConfigMap (``now`` if this call added it; 0.0
        for a name there before Microcosm dated its names), which tells the flow when MIG Manager's mounted copy
        can hold it (:mod:`scheduler.gateways.kube.mig`, "Propagation")."""
        target = (str(self.api.configuration.host), self.operator_namespace, self.mig_config_map)
        if (
            not name
            and time.monotonic() - _OPERATOR_CONFIGS_ENSURED.get(target, -math.inf) < OPERATOR_CONFIGS_RECHECK_S
        ):
            return now
        keep = set(also_keep)
        for raw in self.nodes():
            keep.add(labels_of(raw).get(MIG_CONFIG, ""))
            keep.add(annotations_of(raw).get(DESIRED_CONFIG, ""))
        ns, cm = self.operator_namespace, self.mig_config_map
        for _attempt in range(self.attempts):
            try:
                found = self.call(f"read ConfigMap {ns}/{cm}", self.core.read_namespaced_config_map, cm, ns)
            except ApiNotFound:
                found = None
            existing = ((found or {}).get("data") or {}).get(CONFIG_KEY, "")
            previous = (((found or {}).get("metadata") or {}).get("annotations") or {}).get(ADDED_ANNOTATION, "")
            document = config_document(existing, name, layouts, keep)
            before = config_names(existing)
            dates = added_times(previous, before, config_names(document), now)
            annotations = {ADDED_ANNOTATION: json.dumps(dates, sort_keys=True)}
            try:
                if found is None:
                    body = client.V1ConfigMap(
                        metadata=client.V1ObjectMeta(
                            name=cm, namespace=ns, labels={MANAGED_BY: SCHEDULER_NAME}, annotations=annotations
                        ),
                        data={CONFIG_KEY: document},
                    )
                    self.call(f"create ConfigMap {ns}/{cm}", self.core.create_namespaced_config_map, ns, body)
                elif document != existing:
                    version = found.get("metadata", {}).get("resourceVersion")
                    patch = {
                        "metadata": {"resourceVersion": version, "annotations": annotations},
                        "data": {CONFIG_KEY: document},
                    }
                    self.call(
                        f"update ConfigMap {ns}/{cm}",
                        self.core.patch_namespaced_config_map,
                        cm,
                        ns,
                        patch,
                        _content_type=MERGE_PATCH,
                    )
                _OPERATOR_CONFIGS_ENSURED[target] = time.monotonic()
                return dates.get(name, 0.0) if name else now
            except (ApiConflict, ApiNotFound):
                continue  # someone else wrote it in between: read again
        raise GatewayRetryable(f"ConfigMap {ns}/{cm} kept changing under us; try again")


def job_key(pod: Mapping[str, Any]) -> str:
    """The pods cache's index: ``<namespace>/<job>`` of one of Microcosm's pods."""
    return f"{(pod.get('metadata') or {}).get('namespace')}/{labels_of(pod).get(JOB_LABEL, '')}"


def uid_of(obj: Mapping[str, Any]) -> str:
    """An object's ``metadata.uid`` ("" when the server gave none)."""
    return str((obj.get("metadata") or {}).get("uid") or "")


class _ListWatchSource:
    """An informer's LIST and WATCH (:class:`~scheduler.gateways.kube.informer.ListWatch`) through a client it holds
    weakly: the watch thread must not keep a dropped client (and its connection pool) alive."""

    def __init__(self, owner: KubeClient, what: str, method: str, selector: str, *, api: str = "core") -> None:
        self._owner = weakref.ref(owner)
        self._what = what
        self._method = method
        self._api = api  # the KubeClient attribute holding the API group's client: "core", "resource"
        self._selector: dict[str, Any] = {"label_selector": selector} if selector else {}

    def _client(self) -> KubeClient:
        owner = self._owner()
        if owner is None:
            raise SourceGone(f"the client that {self._what} is gone")
        return owner

    def list_page(self, *, limit: int, continue_token: str | None) -> Mapping[str, Any]:
        owner = self._client()
        paging: dict[str, Any] = {"limit": limit} if limit else {}
        if continue_token:
            paging["_continue"] = continue_token
        answer: Mapping[str, Any] = owner.call(
            self._what, getattr(getattr(owner, self._api), self._method), **paging, **self._selector
        )
        return answer

    def watch(self, *, resource_version: str, timeout_s: int) -> Iterator[Mapping[str, Any]]:
        owner = self._client()
        method = getattr(getattr(owner, self._api), self._method)
        try:
            response = method(
                watch=True,
                resource_version=resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=timeout_s,
                _preload_content=False,
                # (connect, read): the server ends the stream at timeout_s; a read that waits longer is a dead one
                _request_timeout=(owner.request_timeout_s, timeout_s + owner.request_timeout_s),
                **self._selector,
            )
        except ApiException as exc:
            if exc.status == 410:
                raise Expired(_api_message(exc)) from None
            raise
        del owner  # the stream may last minutes: hold no reference to the client meanwhile
        try:
            for line in iter_resp_lines(response):
                if line.strip():
                    yield json.loads(line)
        finally:
            response.release_conn()


def api_client_for(url: str) -> client.ApiClient:
    """An API client for the server at ``url`` without credentials (the test emulator, a benchmark)."""
    configuration = client.Configuration(host=url)
    configuration.retries = 0  # KubeClient retries itself
    return client.ApiClient(configuration)


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
    configuration.retries = 0  # KubeClient retries itself, with backoff and Retry-After
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
