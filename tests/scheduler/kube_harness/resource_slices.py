"""The API server's validation of a ResourceSlice (``resource.k8s.io/v1``), as an interceptor on its writes.

Modelled on kubernetes/kubernetes ``pkg/apis/resource/validation/validation.go`` (``ValidateResourceSlice``,
``validateResourceSliceSpec``, ``validateResourcePool``) and the limits of ``staging/src/k8s.io/api/resource/v1/
types.go``; the server answers 422 Invalid, reason ``Invalid``, with every field error joined, before anything is
stored:

- ``spec.driver`` and ``spec.pool.name`` are required, ``spec.pool.resourceSliceCount`` must be greater than zero and
  ``spec.pool.generation`` not negative;
- exactly one of ``nodeName``, ``nodeSelector``, ``allNodes`` and ``perDeviceNodeSelection`` (a Required error when
  none is set, Invalid "but multiple fields are set" when several are);
- at most ``ResourceSliceMaxDevices`` (128) devices, ``ResourceSliceMaxDevicesWithAdvancedFeatures`` (64) when a
  device consumes counters or has taints; device names required and unique within the slice (``validateSet``:
  a Duplicate error); at most ``ResourceSliceMaxCounterSets`` (8) shared counter sets, and not both devices and
  shared counters in one slice (``+zeroOrOneOf=ResourceSliceType``, Kubernetes 1.35 and later: the NVIDIA driver's
  dynamic MIG publishes its counters in a slice of their own there, ``generateSplitResourceSlices``).

Device names unique across the slices of a pool is not the server's rule: the scheduler declares such a pool
invalid when it reads it (``structured/internal/stable/pools_stable.go`` ``poolIsInvalid``), and so does the gateway.
A merge patch is validated on the object it produces (the server validates the result of every update).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import aiohttp.web
import kmock

from tests.scheduler.kube_emulator import GatewayEmulator, status_response

RESOURCE_SLICES = "resource.k8s.io/v1/resourceslices"
MAX_DEVICES = 128
MAX_DEVICES_ADVANCED = 64
MAX_COUNTER_SETS = 8
_PATH = "/apis/resource.k8s.io/v1/resourceslices"
_SELECTIONS = ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection")


def problems(slice_: Mapping[str, Any]) -> list[str]:
    """The field errors of one ResourceSlice, in the server's words (module doc); empty when it is valid."""
    spec = slice_.get("spec") or {}
    found: list[str] = []
    if not spec.get("driver"):
        found.append("spec.driver: Required value")
    pool = spec.get("pool") or {}
    if not pool.get("name"):
        found.append("spec.pool.name: Required value")
    count = pool.get("resourceSliceCount")
    if not isinstance(count, int) or count <= 0:
        found.append(f"spec.pool.resourceSliceCount: Invalid value: {json.dumps(count)}: must be greater than zero")
    generation = pool.get("generation", 0)
    if not isinstance(generation, int) or generation < 0:
        found.append(
            f"spec.pool.generation: Invalid value: {json.dumps(generation)}: must be greater than or equal to zero"
        )
    selected = [f"`{key}`" for key in _SELECTIONS if spec.get(key) not in (None, False, "")]
    one_of = "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required"
    if not selected:
        found.append(f"spec: Required value: {one_of}")
    elif len(selected) > 1:
        found.append(f'spec: Invalid value: "{{{", ".join(selected)}}}": {one_of}, but multiple fields are set')
    devices = spec.get("devices") or []
    counters = spec.get("sharedCounters") or []
    if devices and counters:
        found.append("spec: Invalid value: only one of `devices` and `sharedCounters` may be set")
    advanced = any(d.get("consumesCounters") or d.get("taints") for d in devices)
    limit = MAX_DEVICES_ADVANCED if advanced else MAX_DEVICES
    if len(devices) > limit:
        found.append(f"spec.devices: Too many: {len(devices)}: must have at most {limit} items")
    seen: set[str] = set()
    for i, device in enumerate(devices):
        name = device.get("name")
        if not name:
            found.append(f"spec.devices[{i}].name: Required value")
        elif name in seen:
            found.append(f'spec.devices[{i}].name: Duplicate value: "{name}"')
        seen.add(str(name))
    if len(counters) > MAX_COUNTER_SETS:
        found.append(f"spec.sharedCounters: Too many: {len(counters)}: must have at most {MAX_COUNTER_SETS} items")
    return found


def _merged(stored: Any, patch: Any) -> Any:
    """JSON merge patch (RFC 7386): what a PATCH with ``application/merge-patch+json`` makes of ``stored``."""
    if not isinstance(patch, dict):
        return patch
    result = dict(stored) if isinstance(stored, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merged(result.get(key), value)
    return result


async def validate_resource_slice(
    emulator: GatewayEmulator, raw: aiohttp.web.BaseRequest
) -> aiohttp.web.StreamResponse | None:
    """Refuse a ResourceSlice create or patch the API server would refuse (module doc); None lets it through."""
    if raw.method not in ("POST", "PATCH", "PUT") or not raw.path.startswith(_PATH):
        return None
    body = await raw.json()
    name = raw.path[len(_PATH) :].strip("/")
    if raw.method == "PATCH":
        key = (kmock.resource(RESOURCE_SLICES), None, name)
        if key not in emulator.objects or emulator.objects[key].deleted:
            return None  # the store answers 404
        body = _merged(emulator.objects[key].last.raw, body)
    name = name or str((body.get("metadata") or {}).get("name") or "")
    found = problems(body)
    if not found:
        return None
    message = f'ResourceSlice.resource.k8s.io "{name}" is invalid: ' + ", ".join(found)
    return status_response(422, "Invalid", message, name=name, group="resource.k8s.io", kind="ResourceSlice")
