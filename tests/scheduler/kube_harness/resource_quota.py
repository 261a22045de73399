"""ResourceQuota admission of pods, as the API server does it, for the emulator.

Follows kubernetes staging/src/k8s.io/apiserver/pkg/admission/plugin/resourcequota/controller.go (CheckRequest)
with the pod evaluator of kubernetes pkg/quota/v1/evaluator/core/pods.go:

- a quota whose ``hard`` names cpu or memory (``cpu``, ``requests.cpu``, ``limits.cpu``, the same for memory)
  requires every container and init container to state them (pods.go, Constraints: "it was a mistake", kept
  for compatibility), else ``403 Forbidden``: ``pods "<name>" is forbidden: failed quota: <quota>: must specify
  limits.cpu for: main; requests.cpu for: main`` (resources sorted, containers sorted and joined by ``,``);
- a pod's usage is its requests and limits summed over its containers and native sidecars, the larger of that and
  any plain init container (k8s.io/component-helpers/resource/helpers.go, PodRequests / PodLimits), under the
  names ``cpu``/``requests.cpu``, ``limits.cpu``, ``memory``/``requests.memory``, ``limits.memory``, ``pods``,
  and ``requests.<extended>`` for extended resources (pods.go, podComputeUsageHelper);
- a quota's used amount counts the namespace's pods that have not ended (pods.go, QuotaV1Pod); a pod that would
  take any named resource past ``hard``: ``exceeded quota: <quota>, requested: <r>, used: <u>, limited: <h>``, each
  list only the exceeded resources, sorted, as Quantity prints them.

Only pod creation is checked (pods.go, Handles: create, and the resize subresource Microcosm never uses). The
API server defaults a container's missing requests to its limits before admission (kubernetes
pkg/apis/core/v1/defaults.go, SetDefaults_Pod), and so does this.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import aiohttp.web
import kmock

from tests.scheduler.kube_emulator import PODS, GatewayEmulator, status_response
from tests.scheduler.kube_harness.quantities import amount, text

_CREATE_POD = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/?$")
# pods.go, validationSet: the resources whose quota makes every container state them.
_VALIDATED = {"cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu", "limits.memory"}
_NATIVE = ("cpu", "memory", "ephemeral-storage", "pods")


@dataclass
class ResourceQuota:
    namespace: str
    name: str
    hard: dict[str, str]


@dataclass
class QuotaAdmission:
    """The ResourceQuota admission plugin (module doc); an interceptor of :class:`GatewayEmulator`."""

    quotas: list[ResourceQuota] = field(default_factory=list)

    def add(self, namespace: str, name: str, hard: dict[str, str]) -> ResourceQuota:
        quota = ResourceQuota(namespace, name, dict(hard))
        self.quotas.append(quota)
        return quota

    async def __call__(self, emulator: GatewayEmulator, raw: aiohttp.web.BaseRequest) -> aiohttp.web.Response | None:
        match = _CREATE_POD.match(raw.path)
        if raw.method != "POST" or not match:
            return None
        namespace = match.group(1)
        pod = await raw.json()
        name = (pod.get("metadata") or {}).get("name") or "Unknown"
        for quota in (q for q in self.quotas if q.namespace == namespace):
            missing = _missing(pod, set(quota.hard) & _VALIDATED)
            if missing:
                return _forbidden(name, f"failed quota: {quota.name}: must specify {missing}")
            requested = {k: v for k, v in pod_usage(pod).items() if k in quota.hard}
            used = _used(emulator, namespace, set(requested))
            hard = {k: amount(k, v) for k, v in quota.hard.items()}
            exceeded = sorted(k for k, v in requested.items() if used.get(k, 0) + v > hard[k])
            if exceeded:
                return _forbidden(
                    name,
                    f"exceeded quota: {quota.name}, requested: {_print(requested, exceeded)}, "
                    f"used: {_print(used, exceeded)}, limited: {_print(hard, exceeded)}",
                )
        return None


def _forbidden(name: str, message: str) -> aiohttp.web.Response:
    # admission.NewForbidden → apierrors.NewForbidden(pods, name, err) (apimachinery pkg/api/errors/errors.go).
    return status_response(403, "Forbidden", f'pods "{name}" is forbidden: {message}', name=name, kind="pods")


def _containers(pod: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    spec = pod.get("spec") or {}
    return list(spec.get("containers") or []), list(spec.get("initContainers") or [])


def _resources(container: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(requests, limits), requests defaulted from limits as the API server's defaulting does."""
    resources = container.get("resources") or {}
    limits = dict(resources.get("limits") or {})
    return {**limits, **(resources.get("requests") or {})}, limits


def _missing(pod: dict[str, Any], required: set[str]) -> str:
    """pods.go, Constraints/enforcePodContainerConstraints: the required names a container's usage lacks."""
    lacking: dict[str, set[str]] = {}
    containers, inits = _containers(pod)
    for container in [*containers, *inits]:
        requests, limits = _resources(container)
        have = set()
        for resource in ("cpu", "memory"):
            if resource in requests:
                have |= {resource, f"requests.{resource}"}
            if resource in limits:
                have.add(f"limits.{resource}")
        for resource in required - have:
            lacking.setdefault(resource, set()).add(container.get("name", ""))
    return "; ".join(f"{r} for: {','.join(sorted(names))}" for r, names in sorted(lacking.items()))


def pod_usage(pod: dict[str, Any]) -> dict[str, int]:
    """What a pod charges to a quota (module doc)."""
    containers, inits = _containers(pod)
    sidecars = [c for c in inits if c.get("restartPolicy") == "Always"]
    plain = [c for c in inits if c.get("restartPolicy") != "Always"]

    def total(which: int) -> dict[str, int]:
        summed: dict[str, int] = {}
        for container in [*containers, *sidecars]:
            for name, value in _resources(container)[which].items():
                summed[name] = summed.get(name, 0) + amount(name, value)
        for container in plain:
            for name, value in _resources(container)[which].items():
                summed[name] = max(summed.get(name, 0), amount(name, value))
        return summed

    requests, limits = total(0), total(1)
    usage = {"pods": 1, "count/pods": 1}
    for resource in ("cpu", "memory", "ephemeral-storage"):
        if resource in requests:
            usage[resource] = usage[f"requests.{resource}"] = requests[resource]
        if resource in limits:
            usage[f"limits.{resource}"] = limits[resource]
    for resource, value in requests.items():
        if resource not in _NATIVE and "/" in resource:  # an extended resource: requests.<name> only
            usage[f"requests.{resource}"] = value
    return usage


def _used(emulator: GatewayEmulator, namespace: str, names: set[str]) -> dict[str, int]:
    used: dict[str, int] = {}
    for (resource, ns, _name), obj in emulator.objects.items():
        if resource != kmock.resource(PODS) or ns != namespace or obj.deleted:
            continue
        pod = dict(obj)
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue  # pods.go, QuotaV1Pod: ended pods charge nothing
        for key, value in pod_usage(pod).items():
            if key in names:
                used[key] = used.get(key, 0) + value
    return used


def _print(values: dict[str, int], names: list[str]) -> str:
    return ",".join(f"{name}={text(name, values.get(name, 0))}" for name in names)
