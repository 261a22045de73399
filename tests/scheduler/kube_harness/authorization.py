"""RBAC's refusal, for the emulator: a service account without a verb on a resource.

The API server's authorization filter answers 403 Forbidden with kubernetes
staging/src/k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/errors.go (ForbiddenStatus, forbiddenMessage):
``<resource> is forbidden: User "<user>" cannot <verb> resource "<resource>" in API group "<group>" in the
namespace "<namespace>"`` (``<resource> "<name>" is forbidden`` when the request names one), before admission runs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import aiohttp.web

from tests.scheduler.kube_emulator import GatewayEmulator, status_response

SERVICE_ACCOUNT = "system:serviceaccount:microcosm:microcosm"
_VERBS = {"POST": "create", "GET": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
_NAMESPACED = re.compile(r"^/api/v1/namespaces/([^/]+)/([^/]+)/?([^/]*)")


@dataclass
class RbacDenial:
    """The service account lacks ``verb`` on core ``resource`` (e.g. create pods)."""

    verb: str
    resource: str
    user: str = SERVICE_ACCOUNT

    async def __call__(self, emulator: GatewayEmulator, raw: aiohttp.web.BaseRequest) -> aiohttp.web.Response | None:
        match = _NAMESPACED.match(raw.path)
        if not match or match.group(2) != self.resource or _VERBS.get(raw.method) != self.verb:
            return None
        namespace, name = match.group(1), match.group(3)
        subject = f'{self.resource} "{name}"' if name else self.resource
        message = (
            f'{subject} is forbidden: User "{self.user}" cannot {self.verb} resource "{self.resource}" in API group "" '
            f'in the namespace "{namespace}"'
        )
        return status_response(403, "Forbidden", message, name=name, kind=self.resource)
