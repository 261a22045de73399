"""A team's namespace as Microcosm expects it, as plain JSON (no ``kubernetes``): its labels and RoleBindings.

A team's pods run in its own namespace (``Team.namespace``). Microcosm's service accounts hold no cluster-wide
right there: each team namespace binds them to the ClusterRoles of ``deploy/rbac.yaml`` through RoleBindings, so
the scheduler can create pods, Secrets and Services in the teams' namespaces and nowhere else (docs/deploy.md,
RBAC). The namespace also carries the team label (which team's pods it holds) and the Pod Security labels
(docs/deploy.md, Pod Security): the level the API server enforces on every pod created there.

The platform applies these objects (``manage.py team_namespaces | kubectl apply -f -``), or Microcosm creates
them itself when ``KUBE_NAMESPACE_CREATE`` allows it
(:meth:`scheduler.gateways.kube.client.KubeClient.namespace_ensure`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.gateways.kube.pods import MANAGED_BY, SCHEDULER_NAME, TEAM_LABEL

# Pod Security admission's namespace labels (kubernetes staging/src/k8s.io/pod-security-admission/api/constants.go).
POD_SECURITY_PREFIX = "pod-security.kubernetes.io/"
POD_SECURITY_ENFORCE = POD_SECURITY_PREFIX + "enforce"
POD_SECURITY_LEVELS = ("privileged", "baseline", "restricted")  # least to most restrictive
# What a team namespace is warned and audited at, whatever it enforces: a pod that would fail ``restricted``
# shows in kubectl's warnings and the audit log, so a team can see how far its pods are from it.
POD_SECURITY_WARN = "restricted"

# Microcosm's own namespace and identities (deploy/namespace.yaml, deploy/serviceaccount.yaml).
MICROCOSM_NAMESPACE = "microcosm"
SCHEDULER_ACCOUNT = "microcosm"
WEB_ACCOUNT = "microcosm-web"
# The ClusterRoles a team namespace binds (deploy/rbac.yaml): defined once for the cluster, bound per namespace.
TEAM_ROLE = "microcosm-team"
LOG_READER_ROLE = "microcosm-log-reader"
RBAC_GROUP = "rbac.authorization.k8s.io"


def pod_security_labels(level: str) -> dict[str, str]:
    """The Pod Security labels of a team namespace that enforces ``level`` (warned and audited at restricted)."""
    if level not in POD_SECURITY_LEVELS:
        raise ValueError(f"Pod Security level {level!r} is not one of {', '.join(POD_SECURITY_LEVELS)}")
    return {
        POD_SECURITY_ENFORCE: level,
        POD_SECURITY_PREFIX + "warn": POD_SECURITY_WARN,
        POD_SECURITY_PREFIX + "audit": POD_SECURITY_WARN,
    }


def namespace_labels(team: str, level: str) -> dict[str, str]:
    return {TEAM_LABEL: team, MANAGED_BY: SCHEDULER_NAME, **pod_security_labels(level)}


def namespace_manifest(namespace: str, team: str, level: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": namespace, "labels": namespace_labels(team, level)},
    }


def role_binding_manifests(namespace: str, team: str) -> list[dict[str, Any]]:
    """The RoleBindings that give Microcosm its rights in ``namespace``: the scheduler's (microcosm-team) and the
    web tier's (microcosm-log-reader: the job page's logs)."""
    return [
        _role_binding(namespace, team, name=SCHEDULER_ACCOUNT, role=TEAM_ROLE, account=SCHEDULER_ACCOUNT),
        _role_binding(namespace, team, name=WEB_ACCOUNT, role=LOG_READER_ROLE, account=WEB_ACCOUNT),
    ]


def _role_binding(namespace: str, team: str, *, name: str, role: str, account: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": namespace, "labels": {TEAM_LABEL: team, MANAGED_BY: SCHEDULER_NAME}},
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": MICROCOSM_NAMESPACE}],
    }


def team_level(team: str, default: str, per_team: Mapping[str, str]) -> str:
    """The Pod Security level ``team``'s namespace enforces: its own (``KUBE_POD_SECURITY_TEAM_LEVELS``) or the
    default (``KUBE_POD_SECURITY_LEVEL``)."""
    return per_team.get(team, default)


def team_manifests(namespace: str, team: str, level: str) -> list[dict[str, Any]]:
    """Everything a team namespace needs, in the order ``kubectl apply`` must create it."""
    return [namespace_manifest(namespace, team, level), *role_binding_manifests(namespace, team)]
