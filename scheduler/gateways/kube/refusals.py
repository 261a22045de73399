"""What an API server's refusal (401, 403, 400, 422) means, from its status and message (no ``kubernetes`` import).

A 403 is not always a missing permission. The API server answers 403 Forbidden for several refusals, each with
its own words, and only one of them is fixed by ``deploy/rbac.yaml``:

- **RBAC**: ``pods is forbidden: User "…" cannot create resource "pods" in API group "" in the namespace "x"``
  (kubernetes staging/src/k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/errors.go, forbiddenMessage);
- **ResourceQuota**: ``pods "p" is forbidden: failed quota: <quota>: must specify limits.cpu for: main; …`` or
  ``… exceeded quota: <quota>, requested: …, used: …, limited: …`` (kubernetes
  staging/src/k8s.io/apiserver/pkg/admission/plugin/resourcequota/controller.go, CheckRequest);
- **LimitRange**: ``pods "p" is forbidden: maximum cpu usage per Container is 4, but limit is 8`` (kubernetes
  plugin/pkg/admission/limitranger/admission.go);
- **Pod Security**: ``pods "p" is forbidden: violates PodSecurity "baseline:latest": …`` (kubernetes
  staging/src/k8s.io/pod-security-admission/admission/admission.go);
- **a validating or mutating webhook**: ``… admission webhook "<name>" denied the request: …``, with the status the
  webhook chose, 403 unless it set another (kubernetes
  staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/errors/statuserror.go, ToStatusErr).

A 403 without any of these words on a write is another admission plugin's refusal; on a read it can only be
authorization. 400 and 422 mean the object itself is invalid. All but RBAC and 401 refuse *this object* (this
placement's pod), not the deployment: the caller treats them as a conflict (the bind is undone, the job requeued
with the reason); RBAC and 401 are a deployment error that no re-plan fixes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum


class RefusalKind(StrEnum):
    RBAC = "rbac"
    UNAUTHORIZED = "unauthorized"
    QUOTA = "quota"
    LIMIT_RANGE = "limit-range"
    POD_SECURITY = "pod-security"
    WEBHOOK = "webhook"
    INVALID = "invalid"
    ADMISSION = "admission"  # another admission plugin's 403


@dataclass(frozen=True, slots=True)
class Refusal:
    """A refusal diagnosed: what refused, the words to show, and whether it refuses only this object."""

    kind: RefusalKind
    message: str
    conflict: bool  # True: this object is refused (re-plan); False: the deployment is wrong (fix it, then retry)


_QUOTA = re.compile(r"(?:failed quota|exceeded quota|status unknown for quota): ([^:,\s]+)")
_QUOTA_ANY = re.compile(r"failed quota|exceeded quota|insufficient quota to consume|status unknown for quota")
_MUST_SPECIFY = re.compile(r"must specify (.+)$")
_POD_SECURITY = re.compile(r'violates PodSecurity "([^"]+)"')
_WEBHOOK = re.compile(r'admission webhook "([^"]+)" denied the request')
_RBAC = re.compile(r'User "([^"]*)" cannot (\S+) resource "([^"]*)"')
_READS = ("list ", "read ", "get ", "watch ")
_LIMIT_RANGE = re.compile(r"usage per (?:Container|Pod) is|limit to request ratio per (?:Container|Pod) is")


_OBJECT = re.compile(r" ([a-z0-9][a-z0-9.-]*)/[^\s/]+")  # "create pod team-nlp/mc-42-0": the namespace


def diagnose(status: int, message: str, *, what: str) -> Refusal:
    """The meaning of an API refusal of ``what`` (``create pod team-nlp/mc-42-0``, whose namespace the advice
    names) with ``status`` and the server's ``message``."""
    found_namespace = _OBJECT.search(what)
    namespace = found_namespace.group(1) if found_namespace else ""
    where = f"namespace {namespace}'s" if namespace else "the namespace's"
    head = f"{what} was refused ({status}: {message})"
    webhook = _WEBHOOK.search(message)
    if webhook:  # first: a webhook's own message may quote any other component's words
        return Refusal(
            RefusalKind.WEBHOOK,
            f"{head}: the cluster's admission webhook {webhook.group(1)!r} denied it; change the job as its message "
            "says, or ask the cluster's administrators about that webhook's policy",
            conflict=True,
        )
    if status == 401:
        return Refusal(
            RefusalKind.UNAUTHORIZED,
            f"{head}: the API server does not accept Microcosm's credentials; check the service account token or "
            "KUBECONFIG (docs/deploy.md)",
            conflict=False,
        )
    if status == 403 and _QUOTA_ANY.search(message):
        found = _QUOTA.search(message)
        quota = f"ResourceQuota {found.group(1)}" if found else "ResourceQuota"
        if _MUST_SPECIFY.search(message):
            advice = (
                f"{where} {quota} requires cpu/memory requests and limits on every container; set the job's cpu and "
                "host_memory_gib, or KUBE_CPU_PER_GPU / KUBE_HOST_MEMORY_GIB_PER_GPU (docs/deploy.md, Pod resources)"
            )
        else:
            advice = (
                f"{where} {quota} has no room for this pod; lower the job's cpu or host_memory_gib, wait for the "
                "team's other pods to end, or ask the cluster's administrators to raise the quota"
            )
        return Refusal(RefusalKind.QUOTA, f"{head}: {advice}", conflict=True)
    if status == 403 and _POD_SECURITY.search(message):
        level = _POD_SECURITY.search(message)
        assert level is not None
        return Refusal(
            RefusalKind.POD_SECURITY,
            f"{head}: {where} Pod Security level {level.group(1)!r} forbids this pod; a team whose jobs need it "
            "runs in a namespace whose pod-security.kubernetes.io/enforce level admits them "
            "(KUBE_POD_SECURITY_TEAM_LEVELS; docs/deploy.md, Pod Security), or the job runs without what the "
            "message names",
            conflict=True,
        )
    if status == 403 and _LIMIT_RANGE.search(message):
        return Refusal(
            RefusalKind.LIMIT_RANGE,
            f"{head}: {where} LimitRange bounds each container's cpu/memory; set the job's cpu and host_memory_gib "
            "within it, or KUBE_CPU_PER_GPU / KUBE_HOST_MEMORY_GIB_PER_GPU (docs/deploy.md, Pod resources)",
            conflict=True,
        )
    # Admission runs on writes only (create, update, delete, connect: kubernetes staging/src/k8s.io/apiserver/pkg/
    # admission/interfaces.go, Operation), so a read's 403 is authorization whatever its words.
    if status == 403 and (_RBAC.search(message) or what.startswith(_READS)):
        return Refusal(
            RefusalKind.RBAC,
            f"{head}; the service account lacks a permission: apply deploy/rbac.yaml (docs/deploy.md, RBAC)",
            conflict=False,
        )
    if status == 403:
        return Refusal(
            RefusalKind.ADMISSION,
            f"{head}: an admission plugin of the cluster refused this object; its message says why",
            conflict=True,
        )
    return Refusal(
        RefusalKind.INVALID, f"{head}: the cluster finds the object invalid; retrying cannot help", conflict=True
    )
