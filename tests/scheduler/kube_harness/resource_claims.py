"""``resource.k8s.io/v1`` ResourceClaims for the emulator: the API server's rules, the kubelet's DRA admission and the
resourceclaim controller, as their upstream sources behave.

**The API server** (:class:`ClaimApi`, an interceptor of every write to ``resourceclaims``; LIST and WATCH are the
API server harness's, :mod:`tests.scheduler.kube_harness.api_server`). Followed:

- kubernetes pkg/registry/resource/resourceclaim/strategy.go: a create drops any ``status`` (``PrepareForCreate``);
  an update of the claim keeps the stored status, an update of ``status`` keeps the stored spec and metadata
  (``PrepareForUpdate`` of the two strategies); the status is its own subresource (``/status``);
- kubernetes pkg/apis/resource/validation/validation.go: ``ValidateResourceClaim`` (each request a DNS-label name,
  unique, exactly one of ``exactly``/``firstAvailable``, a device class, ``count`` > 0 for ``ExactCount`` and absent
  for ``All``; at most 32 requests, types.go ``DeviceRequestsMaxSize``), ``ValidateResourceClaimUpdate`` (the spec is
  immutable) and ``validateResourceClaimStatusUpdate``: at most 256 ``reservedFor`` entries, each with resource,
  name and uid, uids unique; ``reservedFor`` "may not be specified when `allocated` is not set" (so a claim is
  deallocated only together with, or after, the removal of its last reservation); no new entry once the claim is
  being deleted; an allocation cannot change once set ("field is immutable"); a new allocation's results name a
  request of the claim, a driver, a pool and a device; the claim's constraints and, stricter than the real server,
  the allocator's rule for them (:mod:`tests.scheduler.kube_harness.device_constraints`). A refusal is 422
  ``Invalid``: ``ResourceClaim.resource.k8s.io "<name>" is invalid: <field>: <type>: <detail>``
  (apimachinery errors.NewInvalid);
- an update carrying a ``metadata.resourceVersion`` other than the stored one is 409 Conflict ("the object has been
  modified; please apply your changes to the latest version and try again", the storage's optimistic concurrency);
- a delete of a claim with finalizers only sets its ``deletionTimestamp`` (kmock's store does that, and drops the
  claim once an update empties its finalizers).

**The kubelet** (:class:`DraKubelet`, a bind hook like the device plugin's): kubernetes pkg/kubelet/cm/dra/manager.go
``prepareResources`` reads each claim the pod names from the API server ("fetch ResourceClaim <name>: …" when it
cannot) and refuses the pod unless the claim is reserved for it ("pod <name> (<uid>) is not allowed to use
ResourceClaim <claim> (<uid>)"); the driver's NodePrepareResources then prepares the allocated devices, which must
be its own on this node: the devices its ResourceSlices publish for the node (or, in tests that build them by hand,
the ``nodes`` given). Preparing a dynamic-MIG partition (a MIG device that consumes counters and has no ``uuid``)
creates its MIG instance (kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/device_state.go
``Prepare`` → nvlib.go ``createMigDevice``), which NVML refuses when its memory slices overlap an instance or a
whole-GPU use on that GPU ("Insufficient Resources"); the instance goes when its pod is done (``Unprepare``). The
slices are not republished (driver.go republishes after a prepare only for passthrough).
A refused pod is not started: the kubelet records a ``FailedPrepareDynamicResources`` Warning
(pkg/kubelet/events/event.go) and the pod stays ``Pending`` with its container waiting in ``ContainerCreating``;
the sync loop retries it (:meth:`DraKubelet.resync`). An admitted pod runs.

**The resourceclaim controller** (:class:`ClaimController`): kubernetes pkg/controller/resourceclaim/controller.go
``syncClaim``: a ``reservedFor`` entry whose pod is gone, replaced (another uid) or done (``isPodDone``: Succeeded or
Failed, or deleted before it was bound) is removed; with the last one the allocation is cleared too when the claim
carries the scheduler's finalizer, which is then removed; a claim owned by such a pod (a controller reference) is
deleted. The garbage collector deletes a claim whose owner pod is gone.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiohttp.web
import kmock

from tests.scheduler.kube_harness import device_constraints

if TYPE_CHECKING:
    from scheduler.gateways.kube.dra_devices import DraNode
    from tests.scheduler.kube_emulator import GatewayEmulator

CLAIMS = "resource.k8s.io/v1/resourceclaims"
SLICES = "resource.k8s.io/v1/resourceslices"
PODS = "v1/pods"
FINALIZER = "resource.kubernetes.io/delete-protection"
RESERVED_FOR_MAX = 256  # types.go ResourceClaimReservedForMaxSize
REQUESTS_MAX = 32  # types.go DeviceRequestsMaxSize
_PATH = re.compile(r"^/apis/resource\.k8s\.io/v1/namespaces/([^/]+)/resourceclaims(?:/([^/]+))?(/status)?/?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
CONFLICT = "the object has been modified; please apply your changes to the latest version and try again"


def _status(code: int, reason: str, message: str) -> aiohttp.web.Response:
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}  # fmt: skip
    return aiohttp.web.json_response(body, status=code)


def _invalid(name: str, errors: list[str]) -> aiohttp.web.Response:
    return _status(422, "Invalid", f'ResourceClaim.resource.k8s.io "{name}" is invalid: ' + ", ".join(errors))


def spec_errors(spec: Mapping[str, Any]) -> list[str]:
    """validation.go validateDeviceClaim, for what a claim of exact requests can get wrong."""
    errors: list[str] = []
    requests = ((spec.get("devices") or {}).get("requests")) or []
    if len(requests) > REQUESTS_MAX:
        errors.append(f"spec.devices.requests: Too many: {len(requests)}: must have at most {REQUESTS_MAX} items")
    seen: set[str] = set()
    for index, request in enumerate(requests):
        path = f"spec.devices.requests[{index}]"
        name = str(request.get("name") or "")
        if not _DNS_LABEL.match(name) or len(name) > 63:
            errors.append(f'{path}.name: Invalid value: "{name}": a lowercase RFC 1123 label must consist of lower '
                          "case alphanumeric characters or '-'")  # fmt: skip
        elif name in seen:
            errors.append(f'{path}.name: Duplicate value: "{name}"')
        seen.add(name)
        exactly, first = request.get("exactly"), request.get("firstAvailable")
        if bool(exactly) == bool(first):
            errors.append(f"{path}: Required value: exactly one of `exactly` or `firstAvailable` is required")
            continue
        if not exactly:
            continue
        if not exactly.get("deviceClassName"):
            errors.append(f"{path}.exactly.deviceClassName: Required value")
        mode = exactly.get("allocationMode") or "ExactCount"  # defaults.go: ExactCount, count 1
        count = exactly.get("count", 1 if mode == "ExactCount" else 0)
        if mode == "ExactCount" and int(count) <= 0:
            errors.append(f"{path}.exactly.count: Invalid value: {count}: must be greater than zero")
        elif mode == "All" and count:
            errors.append(
                f"{path}.exactly.count: Invalid value: {count}: must not be specified when allocationMode is 'All'"
            )
        elif mode not in ("ExactCount", "All"):
            errors.append(f'{path}.exactly.allocationMode: Unsupported value: "{mode}"')
    return errors + device_constraints.spec_errors(spec)


def status_errors(
    new: Mapping[str, Any], old: Mapping[str, Any], *, spec: Mapping[str, Any], deleting: bool
) -> list[str]:
    """validation.go validateResourceClaimStatusUpdate."""
    errors: list[str] = []
    reserved = new.get("reservedFor") or []
    if len(reserved) > RESERVED_FOR_MAX:
        errors.append(f"status.reservedFor: Too many: {len(reserved)}: must have at most {RESERVED_FOR_MAX} items")
    uids: set[str] = set()
    for index, ref in enumerate(reserved):
        for key in ("resource", "name", "uid"):
            if not ref.get(key):
                errors.append(f"status.reservedFor[{index}].{key}: Required value")
        if ref.get("uid") in uids:
            errors.append(f'status.reservedFor[{index}]: Duplicate value: {{"uid":"{ref.get("uid")}"}}')
        uids.add(ref.get("uid"))
    allocated = new.get("allocation")
    if reserved and not allocated:
        errors.append("status.reservedFor: Forbidden: may not be specified when `allocated` is not set")
    if reserved and allocated and deleting:
        before = {r.get("uid") for r in old.get("reservedFor") or []}
        if any(r.get("uid") not in before for r in reserved):
            errors.append("status.reservedFor: Forbidden: new entries may not be added while `deallocationRequested` "
                          "or `deletionTimestamp` are set")  # fmt: skip
    if old.get("allocation") and allocated:
        if allocated != old["allocation"]:
            errors.append("status.allocation: Invalid value: field is immutable")
    elif allocated:
        names = {str(r.get("name")) for r in (spec.get("devices") or {}).get("requests") or []}
        for index, result in enumerate(((allocated.get("devices") or {}).get("results")) or []):
            path = f"status.allocation.devices.results[{index}]"
            if result.get("request") not in names:
                errors.append(f'{path}.request: Invalid value: "{result.get("request")}": must be the name of a '
                              "request in the claim")  # fmt: skip
            for key in ("driver", "pool", "device"):
                if not result.get(key):
                    errors.append(f"{path}.{key}: Required value")
    return errors


@dataclass
class ClaimApi:
    """The API server's writes of ResourceClaims (module doc); an interceptor of :class:`GatewayEmulator`."""

    writes: list[tuple[str, str, str]] = field(default_factory=list)  # (verb, namespace, name) of accepted writes

    async def __call__(self, emulator: GatewayEmulator, raw: aiohttp.web.BaseRequest) -> aiohttp.web.Response | None:
        match = _PATH.match(raw.path)
        if match is None or raw.method in ("GET", "DELETE"):
            return None  # reads: the store and the API server harness; deletes: the store (finalizers)
        namespace, name, status = match.group(1), match.group(2), bool(match.group(3))
        body = await raw.json()
        if not isinstance(body, Mapping):  # a JSON patch: the real server applies it; Microcosm never sends one
            return _status(415, "UnsupportedMediaType", "the emulator applies merge patches and whole objects only")
        if raw.method == "POST" and name is None:
            return self._create(emulator, namespace, body)
        if name is None or raw.method not in ("PUT", "PATCH"):
            return _status(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        key = (kmock.resource(CLAIMS), namespace, name)
        if key not in emulator.objects or emulator.objects[key].deleted:
            return _status(404, "NotFound", f'resourceclaims.resource.k8s.io "{name}" not found')
        emulator.api_server.sync(emulator, force=True)
        stored = emulator.objects[key]
        current: dict[str, Any] = dict(stored.last.raw)
        if raw.method == "PUT":
            version = (body.get("metadata") or {}).get("resourceVersion")
            if version and version != (current.get("metadata") or {}).get("resourceVersion"):
                return _status(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on resourceclaims.resource.k8s.io "{name}": {CONFLICT}',
                )
            new = body
        else:
            new = _merge(current, body)
        deleting = bool((current.get("metadata") or {}).get("deletionTimestamp"))
        if status:
            errors = status_errors(new.get("status") or {}, current.get("status") or {}, spec=current.get("spec") or {},
                                   deleting=deleting)  # fmt: skip
            allocated = (new.get("status") or {}).get("allocation")
            if not errors and allocated and not (current.get("status") or {}).get("allocation"):
                errors = device_constraints.allocation_errors(current.get("spec") or {}, allocated,
                                                              _slice_devices(emulator))  # fmt: skip
            if errors:
                return _invalid(name, errors)
            stored.patch({"status": None})
            stored.patch({"status": new.get("status") or {}})
        else:
            if (new.get("spec") or {}) != (current.get("spec") or {}):
                return _invalid(name, ["spec: Invalid value: field is immutable"])
            meta = new.get("metadata") or {}
            changes = {k: meta.get(k) for k in ("labels", "annotations", "finalizers", "ownerReferences")}
            stored.patch({"metadata": {k: v for k, v in changes.items()}})
            meta_now = stored.last.raw.get("metadata") or {}
            if meta_now.get("deletionTimestamp") and not meta_now.get("finalizers"):
                emulator.api_server.sync(emulator, force=True)
                answer = dict(stored.last.raw)
                stored.delete()  # the store's garbage collection of a released object
                emulator.api_server.sync(emulator, force=True)
                self.writes.append(("update", namespace, name))
                return aiohttp.web.json_response(answer)
        emulator.api_server.sync(emulator, force=True)
        self.writes.append(("update-status" if status else "update", namespace, name))
        return aiohttp.web.json_response(dict(stored.last.raw))

    def _create(self, emulator: GatewayEmulator, namespace: str, body: Mapping[str, Any]) -> aiohttp.web.Response:
        meta = dict(body.get("metadata") or {})
        name = str(meta.get("name") or "")
        if emulator.namespaces and namespace not in emulator.namespaces:
            return _status(404, "NotFound", f'namespaces "{namespace}" not found')
        errors = spec_errors(body.get("spec") or {})
        if not name:
            errors.insert(0, "metadata.name: Required value: name or generateName is required")
        if errors:
            return _invalid(name, errors)
        key = (kmock.resource(CLAIMS), namespace, name)
        if key in emulator.objects and not emulator.objects[key].deleted:
            return _status(409, "AlreadyExists", f'resourceclaims.resource.k8s.io "{name}" already exists')
        meta.update(namespace=namespace, creationTimestamp=_now())
        meta.pop("resourceVersion", None)
        obj = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": meta, "spec": body.get("spec")}
        obj["status"] = {}  # strategy.go PrepareForCreate: a new claim has no status, whatever was sent
        if key in emulator.objects:
            emulator.objects[key].create(obj)
        else:
            emulator.objects[key] = obj
        emulator.api_server.sync(emulator, force=True)
        self.writes.append(("create", namespace, name))
        return aiohttp.web.json_response(dict(emulator.objects[key].last.raw), status=201)


def _merge(base: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON merge patch (RFC 7386): objects merge, ``null`` deletes, anything else replaces."""
    out = dict(base)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _now() -> str:
    return datetime.datetime.now(tz=datetime.UTC).isoformat().replace("+00:00", "Z")


def _slice_devices(emulator: GatewayEmulator) -> dict[tuple[str, str, str], Mapping[str, Any]]:
    """Every device the cluster's ResourceSlices publish, by (driver, pool, name)."""
    found: dict[tuple[str, str, str], Mapping[str, Any]] = {}
    for key, raw in list(emulator.objects.items()):
        if key[0] != kmock.resource(SLICES) or raw.deleted:
            continue
        spec = raw.get("spec") or {}
        pool = (spec.get("pool") or {}).get("name", "")
        for device in spec.get("devices") or []:
            found[(spec.get("driver", ""), pool, device.get("name", ""))] = device
    return found


def _live(emulator: GatewayEmulator, resource: str, namespace: str, name: str) -> Any | None:
    key = (kmock.resource(resource), namespace, name)
    if key not in emulator.objects or emulator.objects[key].deleted:
        return None
    return emulator.objects[key]


@dataclass
class DraKubelet:
    """The kubelet's DRA manager on every node with the drivers' NodePrepareResources (module doc). ``nodes``: the
    devices each DRA node's drivers publish, which are all they can prepare there."""

    emulator: GatewayEmulator
    nodes: Mapping[str, DraNode] = field(default_factory=dict)
    refused: list[tuple[str, str, str]] = field(default_factory=list)  # (namespace, pod, message)
    prepared: dict[tuple[str, str], set[tuple[str, str, str]]] = field(default_factory=dict)  # pod → its devices
    waiting: dict[tuple[str, str], str] = field(default_factory=dict)  # refused pods the sync loop retries: → node
    # Dynamic-MIG instances and whole-GPU uses on a dynamic node: (node, counter set) → pod → its memory slices.
    instances: dict[tuple[str, str], dict[tuple[str, str], set[str]]] = field(default_factory=dict)
    created: list[tuple[str, str, str]] = field(default_factory=list)  # (node, pod, partition) MIG instances made

    def on_bind(self, namespace: str, name: str, node: str) -> None:
        """The bind hook: the kubelet on ``node`` learns of the pod and prepares its claims before starting it."""
        self.admit(namespace, name, node)

    def admit(self, namespace: str, name: str, node: str) -> None:
        pod = _live(self.emulator, PODS, namespace, name)
        if pod is None or not (pod.get("spec") or {}).get("resourceClaims"):
            return
        message, devices = self._prepare(pod, namespace, name, node)
        if message:
            self.refused.append((namespace, name, message))
            self.waiting[(namespace, name)] = node
            # kubelet.go SyncPod: the Warning event, the pod left Pending with its containers not created.
            waiting = {"reason": "ContainerCreating"}
            statuses = [{"name": c.get("name"), "image": c.get("image", ""), "imageID": "", "restartCount": 0,
                         "state": {"waiting": waiting}, "ready": False}
                        for c in (pod.get("spec") or {}).get("containers") or []]  # fmt: skip
            pod.patch({"status": {"phase": "Pending", "containerStatuses": statuses}})
            self._event(namespace, name, message)
            return
        self.waiting.pop((namespace, name), None)
        self.prepared[(namespace, name)] = devices
        pod.patch({"status": {"phase": "Running"}})

    def resync(self) -> None:
        """The kubelet's sync loop: retry every pod it refused that is still bound here."""
        for (namespace, name), node in list(self.waiting.items()):
            self.admit(namespace, name, node)

    def _prepare(self, pod: Any, namespace: str, name: str, node: str) -> tuple[str, set[tuple[str, str, str]]]:
        uid = (pod.get("metadata") or {}).get("uid", "")
        devices: set[tuple[str, str, str]] = set()
        for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
            claim_name = entry.get("resourceClaimName")
            if not claim_name:
                return f'pod "{namespace}/{name}": ResourceClaim not created yet', set()
            claim = _live(self.emulator, CLAIMS, namespace, claim_name)
            if claim is None:
                return (f'fetch ResourceClaim {claim_name}: resourceclaims.resource.k8s.io "{claim_name}" not found',
                        set())  # fmt: skip
            status = claim.get("status") or {}
            if not any(r.get("uid") == uid for r in status.get("reservedFor") or []):
                claim_uid = (claim.get("metadata") or {}).get("uid", "")
                return f"pod {name} ({uid}) is not allowed to use ResourceClaim {claim_name} ({claim_uid})", set()
            own = self._published(node)
            for result in ((status.get("allocation") or {}).get("devices") or {}).get("results") or []:
                device = (result.get("driver", ""), result.get("pool", ""), result.get("device", ""))
                if device not in own:
                    return (f"prepare dynamic resources: NodePrepareResources failed for ResourceClaim {claim_name}: "
                            f"device {device[2]} of pool {device[1]} is not on node {node}"), set()  # fmt: skip
                devices.add(device)
        refusal = self._create_instances(node, (namespace, name), devices)
        return refusal, devices if not refusal else set()

    def _published(self, node: str) -> dict[tuple[str, str, str], Mapping[str, Any]]:
        """The devices the drivers publish for ``node``: its ResourceSlices' (the ``nodes`` given take precedence)."""
        given = self.nodes.get(node)
        if given is not None:
            return {(d.driver, d.pool, d.name): {} for d in given.devices}
        found: dict[tuple[str, str, str], Mapping[str, Any]] = {}
        for key, raw in list(self.emulator.objects.items()):
            if key[0] != kmock.resource(SLICES) or raw.deleted:
                continue
            spec = raw.get("spec") or {}
            if spec.get("nodeName") == node:
                pool = (spec.get("pool") or {}).get("name", "")
                for device in spec.get("devices") or []:
                    found[(spec.get("driver", ""), pool, device.get("name", ""))] = device
        return found

    def _create_instances(self, node: str, pod: tuple[str, str], devices: set[tuple[str, str, str]]) -> str:
        """Make the MIG instances of the dynamic-MIG devices of ``pod`` (module doc); the refusal, or ''."""
        published = self._published(node)
        for held in self.instances.values():  # Unprepare: a done pod's instances are destroyed
            for other in [p for p in held if p != pod and not self._running(*p)]:
                del held[other]
        wanted: dict[tuple[str, str], set[str]] = {}
        for device in sorted(devices):
            raw = published.get(device) or {}
            for use in raw.get("consumesCounters") or []:
                slices = {c for c in use.get("counters") or {} if c.startswith("memory-slice-")}
                wanted.setdefault((node, use.get("counterSet", "")), set()).update(slices)
        for key, slices in wanted.items():
            for other, taken in self.instances.get(key, {}).items():
                if other != pod and taken & slices:
                    return (f"prepare dynamic resources: NodePrepareResources failed: error creating MIG device on "
                            f"{key[1]}: Insufficient Resources (memory slices held by pod {other[1]})")  # fmt: skip
        for key, slices in wanted.items():
            self.instances.setdefault(key, {})[pod] = slices
        for device in sorted(devices):
            raw = published.get(device) or {}
            if (
                raw.get("consumesCounters")
                and "uuid" not in (raw.get("attributes") or {})
                and (((raw.get("attributes") or {}).get("type") or {}).get("string") == "mig")
            ):
                self.created.append((node, pod[1], device[2]))
        return ""

    def _running(self, namespace: str, name: str) -> bool:
        pod = _live(self.emulator, PODS, namespace, name)
        return pod is not None and ((pod.get("status") or {}).get("phase")) not in ("Succeeded", "Failed")

    def _event(self, namespace: str, name: str, message: str) -> None:
        key = (kmock.resource("events.k8s.io/v1/events"), namespace, f"{name}.dra")
        event = {"apiVersion": "events.k8s.io/v1", "kind": "Event",
                 "metadata": {"name": f"{name}.dra", "namespace": namespace}, "type": "Warning",
                 "reason": "FailedPrepareDynamicResources", "reportingController": "kubelet",
                 "note": f"Failed to prepare dynamic resources: {message}",
                 "regarding": {"kind": "Pod", "namespace": namespace, "name": name}}  # fmt: skip
        if key in self.emulator.objects and not self.emulator.objects[key].deleted:
            self.emulator.objects[key].patch(event)
        else:
            self.emulator.objects[key] = event


@dataclass
class ClaimController:
    """kube-controller-manager's resourceclaim controller and the garbage collector, for claims (module doc)."""

    emulator: GatewayEmulator
    deleted: list[tuple[str, str]] = field(default_factory=list)

    def sync(self) -> None:
        emulator = self.emulator
        for key in [k for k in list(emulator.objects) if k[0] == kmock.resource(CLAIMS)]:
            claim = emulator.objects[key]
            if claim.deleted:
                continue
            namespace, name = key[1], key[2]
            status = dict(claim.get("status") or {})
            reserved = status.get("reservedFor") or []
            valid = [r for r in reserved if not self._pod_done(namespace, r.get("name", ""), r.get("uid", ""))]
            finalizers = list((claim.get("metadata") or {}).get("finalizers") or [])
            if len(valid) < len(reserved):
                status["reservedFor"] = valid or None
                if not valid and FINALIZER in finalizers:
                    status["allocation"] = None  # deallocated with the last reservation
                claim.patch({"status": status})
                if not claim.get("status", {}).get("allocation") and FINALIZER in finalizers:
                    finalizers.remove(FINALIZER)
                    claim.patch({"metadata": {"finalizers": finalizers}})
            owner = next((r for r in (claim.get("metadata") or {}).get("ownerReferences") or []
                          if r.get("controller") and r.get("kind") == "Pod"), None)  # fmt: skip
            if not valid and owner is not None and self._pod_done(namespace, owner["name"], owner["uid"]):
                meta = claim.get("metadata") or {}
                if meta.get("finalizers"):
                    if not meta.get("deletionTimestamp"):
                        claim.patch({"metadata": {"deletionTimestamp": _now()}})
                else:
                    claim.delete()
                    self.deleted.append((namespace, name))
        emulator.api_server.sync(emulator, force=True)

    def _pod_done(self, namespace: str, name: str, uid: str) -> bool:
        """Gone, replaced, or done (controller.go ``isPodDone``: a terminal phase, or deleted and never bound)."""
        pod = _live(self.emulator, PODS, namespace, name)
        if pod is None or (pod.get("metadata") or {}).get("uid") != uid:
            return True
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return True
        return bool((pod.get("metadata") or {}).get("deletionTimestamp")) and not (pod.get("spec") or {}).get(
            "nodeName"
        )
