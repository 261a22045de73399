"""A validating admission webhook that denies pods, for the emulator.

The API server wraps a webhook's denial as kubernetes
staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/errors/statuserror.go (ToStatusErr) does: the status
code the webhook set, 403 Forbidden when it set none; the message ``admission webhook "<name>" denied the request:
<its message>`` (``... without explanation`` when it gave none), prefixed ``pods "<name>" is forbidden: `` (or
``Internal error occurred: `` for a 500); reason Forbidden unless the webhook named one.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp.web

from tests.scheduler.kube_emulator import GatewayEmulator, status_response

_CREATE_POD = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/?$")


@dataclass
class DenyingWebhook:
    """A webhook called ``name`` that denies the pods ``denies`` picks, with ``message`` and ``code`` (0: unset)."""

    name: str
    message: str
    code: int = 0
    denies: Callable[[dict[str, Any]], bool] = lambda pod: True

    async def __call__(self, emulator: GatewayEmulator, raw: aiohttp.web.BaseRequest) -> aiohttp.web.Response | None:
        if raw.method != "POST" or not _CREATE_POD.match(raw.path):
            return None
        pod = await raw.json()
        if not self.denies(pod):
            return None
        name = (pod.get("metadata") or {}).get("name") or "Unknown"
        code = self.code or 403
        denied = f'admission webhook "{self.name}" denied the request'
        message = f"{denied}: {self.message}" if self.message else f"{denied} without explanation"
        prefix = "Internal error occurred" if code == 500 else f'pods "{name}" is forbidden'
        reason = "InternalError" if code == 500 else "Forbidden"
        return status_response(code, reason, f"{prefix}: {message}", name=name, kind="pods")
