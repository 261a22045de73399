"""A Kubernetes API on loopback for the gateway's tests: kmock's ``KubernetesEmulator`` in a thread.

The gateway uses the official, synchronous client, so the emulator (an aiohttp app) runs on its own event
loop in a background thread and the tests talk to it over real HTTP. What the emulator lacks, this adds:

- the ``pods/binding`` subresource (sets ``spec.nodeName``; 409 when the pod already has a node or is not the
  pod whose UID the Binding names, 404 when there is no such pod) and ``pods/eviction`` (deletes the pod),
  registered as kmock reactions; a fresh ``metadata.uid`` on every object created, as the API server gives one;
- the ``pods/log`` subresource, answering the text :meth:`Cluster.seed_log` gave a pod, with ``tailLines`` and
  ``limitBytes`` applied as the API server does (the last lines, then the first bytes of those); 404 without
  the pod, 400 for a pod without a node and no log (its container has not started);
- the ``namespaces`` resource, whose URLs kmock's path parser cannot read (``/api/v1/namespaces`` has no
  namespace after the ``namespaces`` segment), served from a dict before kmock parses the request;
- fault injection: the next N requests matching a method and path answer with a status (and headers, e.g.
  ``Retry-After``) or stall longer than the client's timeout.

Everything else (nodes, pods, ConfigMaps, PersistentVolumeClaims, Secrets, Services, events.k8s.io and core Events,
PodTemplates, the autoscalers' custom resources: ``autoscaling.x-k8s.io/v1`` ProvisioningRequests and
``karpenter.sh/v1`` NodeClaims, and DRA's built-in ``resource.k8s.io/v1`` ResourceSlices, DeviceClasses and
ResourceClaims, whose collections the API server harness lists and watches like the core ones) is kmock's generic
stateful store: create, read, merge-patch, delete (a ResourceSlice validated first, as the API server does:
:mod:`tests.scheduler.kube_harness.resource_slices`; a claim's writes:
:mod:`tests.scheduler.kube_harness.resource_claims`). A delete of an object with finalizers only sets its
``deletionTimestamp``, which is how :meth:`Cluster.terminate_pod` keeps a pod in its termination grace.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import re
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp.web
import attrs
import kmock
from kubernetes import client

from scheduler.gateways.kube import informer
from tests.scheduler.kube_harness import api_server as api_server_harness
from tests.scheduler.kube_harness import resource_claims as resource_claims_harness

_NAMESPACE_PATH = re.compile(r"^/api/v1/namespaces(?:/([^/]+))?/?$")
_POD_LOG_PATH = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/log/?$")
PODS = "v1/pods"
CLAIMS = "v1/persistentvolumeclaims"
SECRETS = "v1/secrets"
SERVICES = "v1/services"
EVENTS = "events.k8s.io/v1/events"
CORE_EVENTS = "v1/events"  # what client-go's recorder writes (Karpenter's Events: kube_harness/karpenter.py)
ROLE_BINDINGS = "rbac.authorization.k8s.io/v1/rolebindings"  # a team namespace's, when Microcosm creates it
# Node requests (scheduler/gateways/kube/provisioning.py) and the autoscalers' CRDs (tests/scheduler/kube_harness/
# cluster_autoscaler.py, karpenter.py).
PODTEMPLATES = "v1/podtemplates"
PROVISIONING_REQUESTS = "autoscaling.x-k8s.io/v1/provisioningrequests"
NODECLAIMS = "karpenter.sh/v1/nodeclaims"
# Dynamic Resource Allocation (resource.k8s.io/v1, built in since Kubernetes 1.34): the DRA drivers' inventories
# (tests/scheduler/kube_harness/dra_driver.py, efa_dra_driver.py) and the classes a claim names.
RESOURCE_SLICES = "resource.k8s.io/v1/resourceslices"
DEVICE_CLASSES = "resource.k8s.io/v1/deviceclasses"
# Dynamic Resource Allocation: the replicas' ResourceClaims (tests/scheduler/kube_harness/resource_claims.py).
RESOURCE_CLAIMS = resource_claims_harness.CLAIMS


@dataclass
class Fault:
    method: str
    path: re.Pattern[str]
    status: int = 500
    times: int = 1
    headers: dict[str, str] = field(default_factory=dict)
    stall_s: float = 0.0  # > the client's timeout: a timeout


def status_response(code: int, reason: str, message: str, **details: Any) -> aiohttp.web.Response:
    """A refusal as the API server writes it: a ``Status`` object (k8s.io/apimachinery metav1.Status) with ``reason``
    (Forbidden, Invalid, Gone, ...) and the human message; ``details`` as the server fills them."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return aiohttp.web.json_response(body, status=code)


# A behaviour of a real component the harness adds (admission, a node's device plugin, ...): it sees every request
# before the store does and answers it (a refusal, say) or returns None to let it through. aiohttp caches a read
# body, so an interceptor may read it and the store still can.
Interceptor = Callable[["GatewayEmulator", aiohttp.web.BaseRequest], Awaitable[aiohttp.web.StreamResponse | None]]
# Called after a pod is bound: (namespace, pod name, node), as the kubelet on that node would learn of it.
BindHook = Callable[[str, str, str], None]


@attrs.define(kw_only=True)
class GatewayEmulator(kmock.KubernetesEmulator):
    """kmock's emulator with namespaces, binding, eviction and injected faults (module doc)."""

    faults: list[Fault] = attrs.field(factory=list)
    namespaces: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    log: list[tuple[str, str, str]] = attrs.field(factory=list)  # (method, path, query) of every request
    pod_logs: dict[tuple[str, str], str] = attrs.field(factory=dict)  # (namespace, pod) -> what it wrote
    interceptors: list[Interceptor] = attrs.field(factory=list)
    bind_hooks: list[BindHook] = attrs.field(factory=list)
    # LIST and WATCH with resourceVersions, paging and selectors (tests/scheduler/kube_harness/api_server.py)
    api_server: api_server_harness.ApiServer = attrs.field(factory=api_server_harness.ApiServer)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        api_server_harness.install(self, self.api_server)
        for resource, namespaced in (
            (PODS, True),
            ("v1/nodes", False),
            ("v1/configmaps", True),
            (CLAIMS, True),
            (SECRETS, True),
            (SERVICES, True),
            (EVENTS, True),
            (CORE_EVENTS, True),
            (ROLE_BINDINGS, True),
            (PODTEMPLATES, True),
            (PROVISIONING_REQUESTS, True),
            (NODECLAIMS, False),
            (RESOURCE_SLICES, False),
            (DEVICE_CLASSES, False),
            (RESOURCE_CLAIMS, True),
        ):
            self.resources[resource] = kmock.ResourceInfo(namespaced=namespaced)
        # ResourceClaims' writes as the API server validates them (the harness module); reads are the store's.
        self.interceptors.append(resource_claims_harness.ClaimApi())
        self["post", kmock.subresource("binding")] << self._bind
        self["post", kmock.subresource("eviction")] << self._evict

    async def __call__(self, raw: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        self.log.append((raw.method, raw.path, raw.query_string))
        for fault in self.faults:
            if fault.times > 0 and fault.method == raw.method and fault.path.search(raw.path):
                fault.times -= 1
                if fault.stall_s:
                    await asyncio.sleep(fault.stall_s)
                body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": fault.status}
                body["message"] = f"injected {fault.status}"
                return aiohttp.web.json_response(body, status=fault.status, headers=fault.headers)
        for interceptor in self.interceptors:
            answer = await interceptor(self, raw)
            if answer is not None:
                return answer
        match = _POD_LOG_PATH.match(raw.path)
        if match and raw.method == "GET":
            return self._pod_log(raw, match.group(1), match.group(2))
        match = _NAMESPACE_PATH.match(raw.path)
        if match:
            return await self._namespace(raw, match.group(1))
        return await super().__call__(raw)

    async def _handle(self, request: Any) -> aiohttp.web.StreamResponse:
        # The API server gives every object it creates a fresh uid, whatever the body says (k8s.io/apiserver
        # pkg/registry/rest/create.go FillObjectMetaSystemFields); kmock keeps the body as sent.
        if request.action == kmock.action.CREATE and isinstance(request.data, dict):
            request.data.setdefault("metadata", {})["uid"] = str(uuid.uuid4())
        return await super()._handle(request)

    async def _namespace(self, raw: aiohttp.web.BaseRequest, name: str | None) -> aiohttp.web.StreamResponse:
        def status(code: int, message: str) -> aiohttp.web.Response:
            body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "message": message}
            return aiohttp.web.json_response(body, status=code)

        if raw.method == "POST" and name is None:
            obj = await raw.json()
            new = obj["metadata"]["name"]
            if new in self.namespaces:
                return status(409, f'namespaces "{new}" already exists')
            obj = {**obj, "status": {"phase": "Active"}}
            self.namespaces[new] = obj
            return aiohttp.web.json_response(obj, status=201)
        if raw.method == "GET" and name is None:
            return aiohttp.web.json_response({"kind": "NamespaceList", "items": list(self.namespaces.values())})
        if raw.method == "GET" and name in self.namespaces:
            return aiohttp.web.json_response(self.namespaces[name])
        return status(404, f'namespaces "{name}" not found')

    def _pod_log(self, raw: aiohttp.web.BaseRequest, namespace: str, name: str) -> aiohttp.web.StreamResponse:
        def status(code: int, message: str) -> aiohttp.web.Response:
            body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "message": message}
            return aiohttp.web.json_response(body, status=code)

        key = (kmock.resource(PODS), namespace, name)
        if key not in self.objects or self.objects[key].deleted:
            return status(404, f'pods "{name}" not found')
        text = self.pod_logs.get((namespace, name))
        if text is None:
            if not self.objects[key].get("spec", {}).get("nodeName"):
                return status(400, f"pod {name} does not have a host assigned")
            text = ""
        tail = raw.query.get("tailLines")
        if tail is not None:
            lines = text.splitlines(keepends=True)
            text = "".join(lines[-int(tail) :]) if int(tail) > 0 else ""
        body = text.encode()
        limit = raw.query.get("limitBytes")
        if limit is not None:
            body = body[: int(limit)]
        return aiohttp.web.Response(body=body, content_type="text/plain")

    async def _bind(self, request: kmock.Request) -> dict[str, Any]:
        key = (kmock.resource(PODS), request.namespace, request.name)
        if key not in self.objects or self.objects[key].deleted:
            raise kmock.KubernetesError(status=404, reason="NotFound", message=f'pods "{request.name}" not found')
        pod = self.objects[key]
        # The Binding's uid is a precondition on the pod (kubernetes pkg/registry/core/pod/storage/storage.go
        # setPodNodeAndMetadata: storage.Preconditions{UID}); its failure is a storage "invalid object" error that
        # InterpretUpdateError turns into 409 Conflict (k8s.io/apiserver pkg/storage/errors/storage.go, message of
        # pkg/storage/interfaces.go Preconditions.Check).
        wanted, actual = (request.data.get("metadata") or {}).get("uid"), pod.get("metadata", {}).get("uid")
        if wanted and wanted != actual:
            message = (
                f'Operation cannot be fulfilled on pods "{request.name}": StorageError: invalid object, Code: 4, '
                f"Key: /registry/pods/{request.namespace}/{request.name}, ResourceVersion: 0, AdditionalErrorMsg: "
                f"Precondition failed: UID in precondition: {wanted}, UID in object meta: {actual}"
            )
            raise kmock.KubernetesError(status=409, reason="Conflict", message=message)
        node = pod.get("spec", {}).get("nodeName")
        if node:
            message = f"pod {request.name} is already assigned to node {node!r}"
            raise kmock.KubernetesError(status=409, reason="Conflict", message=message)
        node = request.data["target"]["name"]
        pod.patch({"spec": {"nodeName": node}})
        for hook in self.bind_hooks:
            hook(request.namespace or "", request.name or "", node)
        return {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}

    async def _evict(self, request: kmock.Request) -> dict[str, Any]:
        key = (kmock.resource(PODS), request.namespace, request.name)
        if key not in self.objects or self.objects[key].deleted:
            raise kmock.KubernetesError(status=404, reason="NotFound", message=f'pods "{request.name}" not found')
        self.objects[key].delete()
        return {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}


class Cluster:
    """The emulator on 127.0.0.1 in a background thread, with helpers to seed and inspect it over HTTP."""

    def __init__(self) -> None:
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.handler: GatewayEmulator | None = None
        self.url = ""
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve()), daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the Kubernetes emulator did not start within 10 s")
        self.api_client = self.new_api_client()
        self.core = client.CoreV1Api(self.api_client)
        self.custom = client.CustomObjectsApi(self.api_client)
        self.resource = client.ResourceV1Api(self.api_client)
        self._nvidia_dra: Any = None

    async def _serve(self) -> None:
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with GatewayEmulator() as handler, kmock.Server(handler) as server:
            # Bookmarks far more often than the real server's minute: a consistent read (KubeClient) waits for
            # its cache to reach the server's version, which a bookmark brings when nothing of its kind changed.
            handler.api_server.bookmark_interval_s = 0.005
            from tests.scheduler.kube_harness.resource_slices import validate_resource_slice

            handler.interceptors.append(validate_resource_slice)  # the API server always validates
            self.handler = handler
            self.url = str(server.url).rstrip("/")
            self._ready.set()
            await self._stop.wait()

    def close(self) -> None:
        if self.handler is not None:
            self.handler.api_server.closed = True  # end the open watches, or the server waits for them
        informer.stop_all()  # the gateways' caches: their server is going
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)
        self.api_client.close()

    def new_api_client(self) -> client.ApiClient:
        configuration = client.Configuration(host=self.url)
        configuration.retries = 0  # the gateway retries; urllib3's own retries would hide the faults
        return client.ApiClient(configuration)

    # -- faults and the request log ----------------------------------------------------------------------

    def fail(self, method: str, path: str, status: int = 500, *, times: int = 1, **kwargs: Any) -> Fault:
        assert self.handler is not None
        fault = Fault(method=method, path=re.compile(path), status=status, times=times, **kwargs)
        self.handler.faults.append(fault)
        return fault

    def requests(self, method: str | None = None, path: str = "") -> list[tuple[str, str]]:
        assert self.handler is not None
        log = list(self.handler.log)
        return [(m, p) for m, p, _q in log if (method is None or m == method) and re.search(path, p)]

    def clear_log(self) -> None:
        assert self.handler is not None
        self.handler.log.clear()

    def seed(self, resource: str, objects: list[dict[str, Any]]) -> None:
        """Put many objects straight into the store (thousands of POSTs would be slow), versioned at once."""
        assert self.handler is not None and self._loop is not None
        handler = self.handler

        def put() -> None:
            for obj in objects:
                meta = obj["metadata"]
                handler.objects[kmock.resource(resource), meta.get("namespace"), meta["name"]] = obj
            handler.api_server.sync(handler, force=True)

        done = threading.Event()
        self._loop.call_soon_threadsafe(lambda: (put(), done.set()))
        if not done.wait(60):
            raise RuntimeError("seeding the emulator took over 60 s")

    # -- seeding and inspecting, over HTTP -----------------------------------------------------------------

    def add_node(
        self,
        name: str,
        labels: dict[str, str],
        *,
        taints: list[dict[str, Any]] | None = None,
        ready: bool = True,
        allocatable: dict[str, str] | None = None,
        unschedulable: bool = False,
        capacity: dict[str, str] | None = None,
    ) -> None:
        self.core.create_node(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": labels},
                "spec": {"taints": taints or [], "unschedulable": unschedulable},
                "status": {
                    "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                    **({"allocatable": allocatable} if allocatable is not None else {}),
                    **({"capacity": capacity} if capacity is not None else {}),
                },
            }
        )

    # -- Dynamic Resource Allocation (resource.k8s.io/v1) ---------------------------------------------------

    @property
    def nvidia_dra(self) -> Any:
        """The NVIDIA GPU DRA driver's kubelet plugin on the DRA nodes (tests/scheduler/kube_harness/dra_driver.py)."""
        if self._nvidia_dra is None:
            from tests.scheduler.kube_harness.dra_driver import NvidiaDraDriver

            self._nvidia_dra = NvidiaDraDriver(self)
        return self._nvidia_dra

    def add_dra_node(
        self,
        name: str,
        labels: dict[str, str] | None = None,
        *,
        gpus: int = 8,
        board: Any = None,
        mig: list[list[tuple[str, int]]] | None = None,
        dynamic_mig: bool = False,
        efa: int = 0,
        ena: bool = False,
        pcie_roots: int = 2,
        **node: Any,
    ) -> Any:
        """A node whose GPUs the NVIDIA DRA driver publishes (no ``nvidia.com/gpu`` in its capacity: the device plugin
        does not run there) and, with ``efa``, whose EFA interfaces the EFA DRA driver publishes, both under
        ``pcie_roots`` PCIe roots (0: neither driver publishes a pcieRoot). Returns the
        driver's view of its GPUs (:class:`~tests.scheduler.kube_harness.dra_driver.DraGpus`) for republishing."""
        from tests.scheduler.kube_harness import dra_driver, efa_dra_driver

        self.add_node(name, labels or {}, **node)
        found = None
        if gpus:
            found = dra_driver.DraGpus(
                name, board or dra_driver.H100, gpus, mig=mig or (), dynamic_mig=dynamic_mig, pcie_roots=pcie_roots
            )
            self.nvidia_dra.publish(found)
        if efa:
            efa_dra_driver.publish(self, name, efa, ena=ena, roots=pcie_roots)
        return found

    def add_device_classes(self) -> None:
        """The DeviceClasses the drivers' charts install: ``gpu.nvidia.com``, ``mig.nvidia.com``
        (dra-driver-nvidia-gpu deployments/helm/.../deviceclass-gpu.yaml, deviceclass-mig.yaml) and
        ``efa.networking.k8s.aws`` (dranet examples/aws_eks_examples/gpu-efa/device-class.yaml)."""
        for name, expression in (
            (
                "gpu.nvidia.com",
                "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",
            ),
            (
                "mig.nvidia.com",
                "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'",
            ),
            (
                "efa.networking.k8s.aws",
                'device.driver == "dra.net" && '
                "device.attributes[\"dra.net\"].pciDevice == 'Elastic Fabric Adapter (EFA)'",
            ),
        ):
            self.resource.create_device_class(
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "DeviceClass",
                    "metadata": {"name": name},
                    "spec": {"selectors": [{"cel": {"expression": expression}}]},
                }
            )

    def resource_slices(self) -> list[dict[str, Any]]:
        return [self.api_client.sanitize_for_serialization(s) for s in self.resource.list_resource_slice().items]

    def node(self, name: str) -> dict[str, Any]:
        return self.api_client.sanitize_for_serialization(self.core.read_node(name))

    def patch_node(self, name: str, body: dict[str, Any]) -> None:
        self.core.patch_node(name, body, _content_type="application/merge-patch+json")

    def delete_node(self, name: str) -> None:
        self.core.delete_node(name)

    def pods(self, namespace: str | None = None) -> list[dict[str, Any]]:
        found = (
            self.core.list_pod_for_all_namespaces() if namespace is None else self.core.list_namespaced_pod(namespace)
        )
        return [self.api_client.sanitize_for_serialization(p) for p in found.items]

    def set_pod_phase(self, namespace: str, name: str, phase: str, **status: Any) -> None:
        """What the kubelet would report."""
        self.core.patch_namespaced_pod_status(
            name, namespace, {"status": {"phase": phase, **status}}, _content_type="application/merge-patch+json"
        )

    def terminate_pod(self, namespace: str, name: str) -> None:
        """A delete with a grace period, as a drain or ``kubectl delete`` sends it: the pod gets its
        ``deletionTimestamp`` and stays while the kubelet stops it (here: until :meth:`release_pod`)."""
        self.core.patch_namespaced_pod(
            name, namespace, {"metadata": {"finalizers": [KUBELET_FINALIZER]}}, _content_type=MERGE_PATCH
        )
        self.core.delete_namespaced_pod(name, namespace)

    def release_pod(self, namespace: str, name: str) -> None:
        """The kubelet is done with a terminating pod: it goes."""
        self.core.patch_namespaced_pod(name, namespace, {"metadata": {"finalizers": []}}, _content_type=MERGE_PATCH)

    def seed_log(self, namespace: str, name: str, text: str) -> None:
        """What pod ``namespace/name``'s container has written so far (its log, as the kubelet keeps it)."""
        assert self.handler is not None
        self.handler.pod_logs[(namespace, name)] = text

    def resource_claims(self, namespace: str | None = None) -> list[dict[str, Any]]:
        """The ResourceClaims of ``namespace`` (None: every namespace), as the official client lists them."""
        api = client.ResourceV1Api(self.api_client)
        found = (
            api.list_resource_claim_for_all_namespaces(_preload_content=False)
            if namespace is None
            else api.list_namespaced_resource_claim(namespace, _preload_content=False)
        )
        return list(json.loads(found.data).get("items") or [])

    def claims(self, namespace: str) -> list[dict[str, Any]]:
        found = self.core.list_namespaced_persistent_volume_claim(namespace)
        return [self.api_client.sanitize_for_serialization(c) for c in found.items]

    def add_claim(self, namespace: str, name: str) -> None:
        """A claim a team made itself."""
        self.core.create_namespaced_persistent_volume_claim(
            namespace,
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Ti"}}},
            },
        )

    def secrets(self, namespace: str) -> dict[str, dict[str, Any]]:
        found = self.core.list_namespaced_secret(namespace)
        return {s.metadata.name: self.api_client.sanitize_for_serialization(s) for s in found.items}

    def add_secret(self, namespace: str, name: str, *, labels: dict[str, str], data: dict[str, str]) -> None:
        self.core.create_namespaced_secret(
            namespace,
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "labels": labels}, "data": data},
        )

    def services(self, namespace: str) -> dict[str, dict[str, Any]]:
        found = self.core.list_namespaced_service(namespace)
        return {s.metadata.name: self.api_client.sanitize_for_serialization(s) for s in found.items}

    def add_pod(self, namespace: str, name: str, *, node: str, resources: dict[str, str], labels: dict | None = None):
        """Another owner's pod (not Microcosm's), already running on ``node``."""
        self.core.create_namespaced_pod(
            namespace,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
                "spec": {
                    "nodeName": node,
                    "containers": [{"name": "c", "image": "busybox", "resources": {"limits": resources}}],
                },
                "status": {"phase": "Running"},
            },
        )


MERGE_PATCH = "application/merge-patch+json"
KUBELET_FINALIZER = "tests.microcosm.io/kubelet"  # holds a terminating pod in the emulator


# An 8-GPU H100 node as the GPU Operator labels it, MIG off, under one AWS leaf switch (cycle-level tests).
H100_ONE_LEAF = {
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.memory": "81559",
    "nvidia.com/mig.capable": "true",
    "nvidia.com/mig.config": "all-disabled",
    "nvidia.com/mig.config.state": "success",
    "topology.k8s.aws/network-node-layer-2": "nn-spine",
    "topology.k8s.aws/network-node-layer-3": "nn-leaf",
}


def iso(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC).isoformat().replace("+00:00", "Z")


def cluster_fixture() -> Iterator[Cluster]:
    cluster = Cluster()
    try:
        yield cluster
    finally:
        cluster.close()


# An idle MIG-capable H100 node as the GPU Operator labels it before any reconfiguration (docs/gpu-facts.md, GPU
# Feature Discovery labels, MIG Manager reconfiguration flow): MIG off ("all-disabled"), the last reconfiguration a
# success.
MIG_NODE_LABELS = {
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.count": "2",
    "nvidia.com/gpu.memory": "81559",
    "nvidia.com/mig.capable": "true",
    "nvidia.com/mig.strategy": "mixed",
    "nvidia.com/mig.config": "all-disabled",
    "nvidia.com/mig.config.state": "success",
}


class Sleeps(list[float]):
    """The gateway's ``sleep``: records each wait it asked for instead of waiting, so a test asserts the backoff."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


class ManualClock:
    """The gateway's clock in MIG-flow tests: time moves only when a test sets ``now``."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def manual_gateway(cluster: Cluster, clock: ManualClock, *, mig_config_timeout_s: float) -> Any:
    """A KubeGateway on the emulator that never sleeps and reads ``clock``: MIG timeouts are driven by the test;
    its reads see every change the test made before them (``consistent_reads``)."""
    from scheduler.gateways.kube.gateway import KubeGateway

    return KubeGateway(
        cluster.new_api_client(),
        consistent_reads=True,
        namespace_create=True,
        clock=clock,
        sleep=lambda _s: None,
        mig_config_timeout_s=mig_config_timeout_s,
        request_timeout_s=2,
    )
