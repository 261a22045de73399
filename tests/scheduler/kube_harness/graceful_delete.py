"""The API server's graceful deletion of pods: how long a deleted or evicted pod is given to stop.

kmock deletes at once whatever the request says; this interceptor works out the grace the real API server would
give, from the DeleteOptions sent and the pod, and records it beside what was sent (:class:`Deletion`), so a test
can check that nothing running is forced. It answers nothing: the store then deletes as before.

Upstream (kubernetes pkg/registry/core/pod/strategy.go ``podStrategy.CheckGracefulDelete``):

- ``gracePeriodSeconds`` in the DeleteOptions wins; without it the pod's own ``terminationGracePeriodSeconds``
  applies (defaulted to 30 s when the pod names none, pkg/apis/core/v1/defaults.go ``SetDefaults_PodSpec``);
- a pod not bound to a node (no ``spec.nodeName``), or already finished (phase Succeeded or Failed), is deleted at
  once (period 0) whatever was asked;
- an eviction hands its ``deleteOptions`` to that same delete, or empty DeleteOptions when it carries none
  (pkg/registry/core/pod/storage/eviction.go ``EvictionREST.Create``).

A DELETE's grace may come in the query (``gracePeriodSeconds``) or the body's DeleteOptions; the client sends both
alike, the body is read first as the API server's handler merges them (k8s.io/apiserver pkg/endpoints/handlers/
delete.go: the body is decoded, then the query parameters over it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import aiohttp.web
import kmock

if TYPE_CHECKING:
    from tests.scheduler.kube_emulator import GatewayEmulator

_POD = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)(/eviction)?/?$")
DEFAULT_GRACE_S = 30  # pkg/apis/core/v1/defaults.go


@dataclass(frozen=True, slots=True)
class Deletion:
    namespace: str
    name: str
    evicted: bool  # through the eviction subresource (else a DELETE)
    sent: int | None  # gracePeriodSeconds in the request; None: none sent (the pod's own applies)
    grace: int  # what the API server gives the pod


class GracefulDelete:
    """The interceptor (module doc); ``deletions`` in the order they arrived."""

    def __init__(self) -> None:
        self.deletions: list[Deletion] = []

    def of(self, name: str) -> list[Deletion]:
        return [d for d in self.deletions if d.name == name]

    async def __call__(
        self, emulator: GatewayEmulator, raw: aiohttp.web.BaseRequest
    ) -> aiohttp.web.StreamResponse | None:
        match = _POD.match(raw.path)
        if match is None:
            return None
        evicted = match.group(3) is not None
        if (raw.method, evicted) not in (("DELETE", False), ("POST", True)):
            return None
        namespace, name = match.group(1), match.group(2)
        key = (kmock.resource("v1/pods"), namespace, name)
        if key not in emulator.objects or emulator.objects[key].deleted:
            return None  # the store answers 404
        stored = emulator.objects[key]
        body: dict[str, Any] = (await raw.json()) if raw.body_exists else {}
        options = (body.get("deleteOptions") or {}) if evicted else body
        sent = options.get("gracePeriodSeconds")
        if not evicted and "gracePeriodSeconds" in raw.query:
            sent = int(raw.query["gracePeriodSeconds"])
        own = (stored.get("spec") or {}).get("terminationGracePeriodSeconds")
        grace = int(sent) if sent is not None else DEFAULT_GRACE_S if own is None else int(own)
        if not (stored.get("spec") or {}).get("nodeName"):
            grace = 0
        if (stored.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            grace = 0
        self.deletions.append(Deletion(namespace, name, evicted, None if sent is None else int(sent), grace))
        return None
