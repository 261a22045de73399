"""deploy/rbac.yaml is least privilege: each KubeClient method's grant at the narrowest scope, nothing else; and
every deploy/ workload passes Pod Security ``restricted`` (docs/deploy.md, RBAC and Pod Security)."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.gateways.kube.client import KubeClient
from scheduler.gateways.kube.namespaces import MICROCOSM_NAMESPACE, role_binding_manifests
from tests.scheduler.kube_harness.pod_security import violations

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
RBAC = "rbac.authorization.k8s.io"
AUTOSCALING, KARPENTER, RESOURCE = "autoscaling.x-k8s.io", "karpenter.sh", "resource.k8s.io"

# Where a grant holds: "cluster" (a ClusterRoleBinding), "team" (a team namespace's RoleBinding of
# scheduler/gateways/kube/namespaces.py), "operator" (the GPU Operator's namespace), "default" (namespace default:
# Events of cluster-scoped objects) or "opt-in" (a ClusterRole that
# deploy/rbac.yaml binds to nothing: the administrator binds it with KUBE_NAMESPACE_CREATE).
Grant = tuple[str, str, str, str, str]  # (identity, scope, API group, resource, verb)
# A RoleBinding's namespace → its scope: the GPU Operator's, or default (Karpenter's NodeClaim Events).
NAMESPACE_SCOPES = {"gpu-operator": "operator", "default": "default"}
SCHEDULER, WEB = "microcosm", "microcosm-web"

# Every KubeClient method that calls the API → the grants its calls need. Reads of a pod after a conflicting
# create or bind are covered by the cluster-wide pods get (a MIG drain reads every namespace anyway).
USES: dict[str, list[Grant]] = {
    # The list-then-watch caches of nodes, of Microcosm's pods and (KUBE_DRA) of ResourceSlices and every
    # ResourceClaim (scheduler/gateways/kube/informer.py).
    "cached": [
        (SCHEDULER, "cluster", "", resource, verb) for resource in ("nodes", "pods") for verb in ("list", "watch")
    ]
    + [
        (SCHEDULER, "cluster", RESOURCE, resource, verb)
        for resource in ("resourceslices", "resourceclaims")
        for verb in ("list", "watch")
    ],
    "device_classes": [(SCHEDULER, "cluster", RESOURCE, "deviceclasses", "list")],
    "node_read": [(SCHEDULER, "cluster", "", "nodes", "get")],
    "node_patch": [(SCHEDULER, "cluster", "", "nodes", "patch")],
    "pods_ours": [(SCHEDULER, "cluster", "", "pods", "list")],
    "pods_on": [(SCHEDULER, "cluster", "", "pods", "list")],
    "mig_managers": [(SCHEDULER, "cluster", "", "pods", "list")],
    "pod_create": [(SCHEDULER, "team", "", "pods", "create"), (SCHEDULER, "cluster", "", "pods", "get")],
    "pod_bind": [(SCHEDULER, "team", "", "pods/binding", "create"), (SCHEDULER, "cluster", "", "pods", "get")],
    # Our pods in team namespaces; a wedged MIG Manager pod in the GPU Operator's namespace (mig_flow.py).
    "pod_delete": [(SCHEDULER, "team", "", "pods", "delete"), (SCHEDULER, "operator", "", "pods", "delete")],
    "pod_evict": [(SCHEDULER, "cluster", "", "pods/eviction", "create")],
    "pod_log": [(WEB, "team", "", "pods/log", "get")],
    "namespace_ensure": [
        (SCHEDULER, "cluster", "", "namespaces", "get"),
        (SCHEDULER, "opt-in", "", "namespaces", "create"),
        (SCHEDULER, "opt-in", RBAC, "rolebindings", "create"),
        (SCHEDULER, "opt-in", RBAC, "clusterroles", "bind"),  # RBAC's escalation check on the RoleBindings' roles
    ],
    "namespace_team": [(SCHEDULER, "cluster", "", "namespaces", "get")],
    "claim_read": [(SCHEDULER, "team", "", "persistentvolumeclaims", "get")],
    "claim_create": [(SCHEDULER, "team", "", "persistentvolumeclaims", "create")],
    "secret_read": [(SCHEDULER, "team", "", "secrets", "get")],
    "secret_create": [(SCHEDULER, "team", "", "secrets", "create")],
    "secret_delete": [(SCHEDULER, "team", "", "secrets", "delete")],
    "service_read": [(SCHEDULER, "team", "", "services", "get")],
    "service_create": [(SCHEDULER, "team", "", "services", "create")],
    "service_delete": [(SCHEDULER, "team", "", "services", "delete")],
    "mig_config_write": [(SCHEDULER, "operator", "", "configmaps", v) for v in ("get", "create", "patch")],
    # Events on pods, events.k8s.io/v1 as kube-scheduler writes them: a new one, or its series' count.
    "event_write": [(SCHEDULER, "team", "events.k8s.io", "events", v) for v in ("create", "patch")],
    # Node requests (scheduler/gateways/kube/node_requests.py): listed cluster-wide once a cycle, written in the
    # job's team namespace; Karpenter's NodeClaims are cluster objects.
    "provisioning_requests": [(SCHEDULER, "cluster", AUTOSCALING, "provisioningrequests", "list")],
    "provisioning_request_create": [(SCHEDULER, "team", AUTOSCALING, "provisioningrequests", "create")],
    "provisioning_request_delete": [(SCHEDULER, "team", AUTOSCALING, "provisioningrequests", "delete")],
    "pod_templates": [(SCHEDULER, "cluster", "", "podtemplates", "list")],
    "pod_template_create": [(SCHEDULER, "team", "", "podtemplates", "create")],
    "pod_template_patch": [(SCHEDULER, "team", "", "podtemplates", "patch")],
    "pod_template_delete": [(SCHEDULER, "team", "", "podtemplates", "delete")],
    "placeholders": [(SCHEDULER, "cluster", "", "pods", "list")],
    "placeholder_create": [(SCHEDULER, "team", "", "pods", "create")],
    "node_claims": [(SCHEDULER, "cluster", KARPENTER, "nodeclaims", "list")],
    "node_claim_delete": [(SCHEDULER, "cluster", KARPENTER, "nodeclaims", "delete")],
    # ResourceClaims on DRA nodes (scheduler/gateways/kube/claim_binding.py): every claim is listed cluster-wide (the
    # devices other owners hold), a replica's is written in its team namespace, its status through the subresource.
    "resource_claims": [(SCHEDULER, "cluster", RESOURCE, "resourceclaims", "list")],
    "resource_claim_read": [(SCHEDULER, "team", RESOURCE, "resourceclaims", "get")],
    "resource_claim_create": [(SCHEDULER, "team", RESOURCE, "resourceclaims", "create")],
    "resource_claim_status": [(SCHEDULER, "team", RESOURCE, "resourceclaims/status", "update")],
    "resource_claim_patch": [(SCHEDULER, "team", RESOURCE, "resourceclaims", "patch")],
    "resource_claim_delete": [(SCHEDULER, "team", RESOURCE, "resourceclaims", "delete")],
    # Karpenter's Events on NodeClaims, where client-go's recorder writes a cluster object's: namespace default.
    "node_claim_events": [(SCHEDULER, "default", "", "events", "list")],
}
# KubeClient methods that make no API call of their own.
NO_CALL = {"call", "items"}
# Granted for work not yet in KubeClient (fold each into USES once its call is here): DRA's reads of one slice or one
# class and a watch of the classes, for writing ResourceClaims (docs/deploy.md, DRA clusters).
PENDING: set[Grant] = {
    (SCHEDULER, "cluster", RESOURCE, "resourceslices", "get"),
    (SCHEDULER, "cluster", RESOURCE, "deviceclasses", "get"),
    (SCHEDULER, "cluster", RESOURCE, "deviceclasses", "watch"),
}


def _documents() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOY / "rbac.yaml").read_text()) if d]


def _roles() -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for d in _documents() if d["kind"] in ("ClusterRole", "Role")}


def _granted() -> set[Grant]:
    """Every (identity, scope, group, resource, verb) deploy/rbac.yaml and the team RoleBindings give."""
    roles = _roles()
    bindings = [d for d in _documents() if d["kind"] in ("ClusterRoleBinding", "RoleBinding")]
    scoped: list[tuple[str, str, dict[str, Any]]] = []  # (identity, scope, role)
    for binding in bindings:
        namespace = binding["metadata"].get("namespace", "")
        scope = "cluster" if binding["kind"] == "ClusterRoleBinding" else NAMESPACE_SCOPES[namespace]
        role = roles[(binding["roleRef"]["kind"], binding["roleRef"]["name"])]
        scoped += [(s["name"], scope, role) for s in binding["subjects"] if s["namespace"] == MICROCOSM_NAMESPACE]
    for binding in role_binding_manifests("team-x", "x"):
        role = roles[(binding["roleRef"]["kind"], binding["roleRef"]["name"])]
        scoped += [(s["name"], "team", role) for s in binding["subjects"]]
    bound = {id(role) for _i, _s, role in scoped}
    scoped += [(SCHEDULER, "opt-in", role) for role in roles.values() if id(role) not in bound]
    return {
        (identity, scope, group, resource, verb)
        for identity, scope, role in scoped
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def _calling_methods() -> set[str]:
    """KubeClient's public methods whose body calls the API (``self.core``/``self.rbac``/``self.resource``/
    ``self.call``); those reading a cache (``nodes``, ``resource_slices``) have the grants of ``cached``."""
    found = set()
    for name, method in inspect.getmembers(KubeClient, inspect.isfunction):
        if name.startswith("_"):
            continue
        source = inspect.getsource(method)
        attrs = ("core.", "rbac.", "resource.", "call(", "items(")
        attrs += ("_create(", "_read_or_none(", "_delete(", "_custom_list(")
        if any(f"self.{attr}" in source for attr in attrs):
            found.add(name)
    return found


def test_every_client_method_that_calls_the_api_has_its_grants_listed() -> None:
    assert _calling_methods() - NO_CALL == set(USES)


def test_every_grant_used_is_given_and_nothing_given_is_unused() -> None:
    needed = {grant for grants in USES.values() for grant in grants}
    granted = _granted()
    assert needed - granted == set(), "used but not granted"
    assert granted - needed - PENDING == set(), "granted but unused"
    assert granted >= PENDING


def test_no_wildcards_and_no_cluster_wide_writes_of_pods_or_secrets() -> None:
    text = (DEPLOY / "rbac.yaml").read_text()
    assert "*" not in "".join(line.split("#", 1)[0] for line in text.splitlines())
    cluster = {g for g in _granted() if g[1] == "cluster"}
    assert not {g for g in cluster if g[3] == "secrets"}, "no Secret outside team namespaces"
    assert not {g for g in cluster if g[3] == "pods" and g[4] not in ("get", "list", "watch")}


def test_the_team_roles_are_never_bound_cluster_wide_and_bind_is_limited_to_them() -> None:
    cluster_bound = {d["roleRef"]["name"] for d in _documents() if d["kind"] == "ClusterRoleBinding"}
    team_roles = {b["roleRef"]["name"] for b in role_binding_manifests("team-x", "x")}
    assert not cluster_bound & team_roles
    (bind,) = [r for r in _roles()[("ClusterRole", "microcosm-namespace-creator")]["rules"] if "bind" in r["verbs"]]
    assert sorted(bind["resourceNames"]) == sorted(team_roles)


# -- Pod Security: Microcosm's own pods pass restricted ---------------------------------------------------------


def _workloads() -> list[tuple[str, dict[str, Any]]]:
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    found = []
    for name in kustomization["resources"]:
        for doc in yaml.safe_load_all((DEPLOY / name).read_text()):
            if doc and doc["kind"] in ("Deployment", "Job", "StatefulSet", "DaemonSet"):
                found.append((doc["metadata"]["name"], doc["spec"]["template"]))
    return found


@pytest.mark.parametrize(("name", "template"), [pytest.param(n, t, id=n) for n, t in _workloads()])
def test_every_workload_passes_restricted(name: str, template: dict[str, Any]) -> None:
    assert violations(template, "restricted") == [], name
    for container in template["spec"]["containers"]:
        assert container.get("securityContext", {}).get("readOnlyRootFilesystem") is True, (name, container["name"])


def _mounts(template: dict[str, Any], container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    volumes = {v["name"]: v for v in template["spec"]["volumes"]}
    return {m["mountPath"]: volumes[m["name"]] for m in container.get("volumeMounts", [])}


def test_the_workloads_write_only_to_their_empty_dirs_and_the_web_sees_its_static_files() -> None:
    """A read-only root: temporary files go to an emptyDir at /tmp, beat's schedule file (settings' VAR_DIR) to one
    at /app/var. The web pods mount nothing over /app/var: the image collected its static files there (STATIC_ROOT),
    and an emptyDir would hide them from WhiteNoise."""
    settings = (ROOT / "portal" / "settings.py").read_text()
    assert 'VAR_DIR = BASE_DIR / "var"' in settings and 'STATIC_ROOT = VAR_DIR / "staticfiles"' in settings
    assert 'CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")' in settings
    for name, template in _workloads():
        for container in template["spec"]["containers"]:
            if container["image"] != "microcosm":
                continue
            mounts = _mounts(template, container)
            assert "emptyDir" in mounts["/tmp"], name
            if name == "microcosm-web":
                assert not [path for path in mounts if "/app/var/staticfiles".startswith(path)], name
            if name == "microcosm-beat":
                assert "emptyDir" in mounts["/app/var"], name
