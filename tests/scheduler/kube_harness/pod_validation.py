"""The API server's validation of a container's huge-page resources, as an interceptor on pod creation.

Modelled on kubernetes/kubernetes ``pkg/apis/core/validation/validation.go``
(``ValidateContainerResourceRequirements``): a container that asks ``hugepages-<size>`` must also ask cpu or
memory (``field.Forbidden(fldPath, "HugePages require cpu or memory")``), and huge pages are not overcommitted,
so a request must equal its limit ("must be equal to ... limit" for a non-overcommitable resource). The server
answers 422 Invalid before anything is stored.
"""

from __future__ import annotations

from typing import Any

import aiohttp.web

from tests.scheduler.kube_emulator import GatewayEmulator, status_response

_COMPUTE = ("cpu", "memory")


def _problems(container: dict[str, Any]) -> list[str]:
    resources = container.get("resources") or {}
    limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
    huge = {name for name in {*limits, *requests} if name.startswith("hugepages-")}
    if not huge:
        return []
    path = f"spec.containers[{container.get('name')}].resources"
    problems = []
    if not any(name in limits or name in requests for name in _COMPUTE):
        problems.append(f"{path}: Forbidden: HugePages require cpu or memory")
    for name in sorted(huge):
        if name in requests and name in limits and requests[name] != limits[name]:
            problems.append(
                f"{path}.requests[{name}]: Invalid value: {requests[name]!r}: must be equal to {name} limit"
            )
    return problems


async def validate_pod_resources(
    emulator: GatewayEmulator, raw: aiohttp.web.BaseRequest
) -> aiohttp.web.StreamResponse | None:
    """Refuse a pod create whose containers break the huge-page rules (module doc); None lets it through."""
    if raw.method != "POST" or not raw.path.endswith("/pods"):
        return None
    pod = await raw.json()
    problems = [p for c in (pod.get("spec") or {}).get("containers") or [] for p in _problems(c)]
    if not problems:
        return None
    name = (pod.get("metadata") or {}).get("name", "")
    return status_response(422, "Invalid", f'Pod "{name}" is invalid: ' + ", ".join(problems), name=name, kind="Pod")
