"""deploy/: every manifest parses, matches the kubernetes client's models, and agrees with the project."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
MODELS = {
    ("v1", "Namespace"): "V1Namespace",
    ("v1", "ServiceAccount"): "V1ServiceAccount",
    ("v1", "ConfigMap"): "V1ConfigMap",
    ("v1", "Secret"): "V1Secret",
    ("v1", "Service"): "V1Service",
    ("networking.k8s.io/v1", "NetworkPolicy"): "V1NetworkPolicy",
    ("apps/v1", "Deployment"): "V1Deployment",
    ("batch/v1", "Job"): "V1Job",
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): "V1ClusterRole",
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): "V1ClusterRoleBinding",
    ("rbac.authorization.k8s.io/v1", "Role"): "V1Role",
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): "V1RoleBinding",
}
COMMANDS = {
    "microcosm-web": ["gunicorn", "portal.wsgi"],
    "microcosm-worker": ["celery", "-A", "portal", "worker"],
    "microcosm-beat": ["celery", "-A", "portal", "beat"],
    "microcosm-migrate": ["python", "manage.py", "migrate"],
}


def _kustomization() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())


def _documents() -> list[dict[str, Any]]:
    docs = []
    for name in _kustomization()["resources"]:
        docs += [doc for doc in yaml.safe_load_all((DEPLOY / name).read_text()) if doc is not None]
    return docs


def _by_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for doc in _documents() if doc["kind"] == kind}


def _pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["spec"]["template"]["spec"]


def _container(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in _pod_spec(doc)["containers"] if c["name"] == name)


def test_kustomization_lists_every_manifest() -> None:
    files = sorted(p.name for p in DEPLOY.glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(_kustomization()["resources"]) == files


@pytest.mark.parametrize("doc", _documents(), ids=lambda d: f"{d['kind']}/{d['metadata']['name']}")
def test_every_document_is_a_valid_kubernetes_object(doc: dict[str, Any]) -> None:
    model = MODELS[(doc["apiVersion"], doc["kind"])]
    api = client.ApiClient()
    obj = api.deserialize(json.dumps(doc), model, "application/json")  # validates types and required fields
    # The models drop keys they do not know: a round trip that loses nothing has no misspelled field.
    assert api.sanitize_for_serialization(obj) == doc


def test_the_workloads_run_the_projects_commands_with_the_settings() -> None:
    workloads = {**_by_kind("Deployment"), **_by_kind("Job")}
    assert set(workloads) == set(COMMANDS)
    image = _kustomization()["images"][0]["name"]
    for name, doc in workloads.items():
        # One container runs the project; beside it only the web pods' proxy (test_the_proxy_* below).
        (container,) = [c for c in _pod_spec(doc)["containers"] if c["image"] == image]
        others = {c["name"] for c in _pod_spec(doc)["containers"]} - {container["name"]}
        assert others == ({"proxy"} if name == "microcosm-web" else set()), name
        assert container["command"][: len(COMMANDS[name])] == COMMANDS[name], name
        assert container["image"] == image, name
        sources = {(s.get("configMapRef") or s.get("secretRef"))["name"] for s in container["envFrom"]}
        assert sources == {"microcosm-settings", "microcosm-secrets"}, name
        if doc["kind"] == "Deployment":
            assert (
                doc["spec"]["selector"]["matchLabels"].items() <= doc["spec"]["template"]["metadata"]["labels"].items()
            )
    assert _by_kind("Deployment")["microcosm-beat"]["spec"]["replicas"] == 1
    assert set(_by_kind("ConfigMap")) == {"microcosm-settings"} and set(_by_kind("Secret")) == {"microcosm-secrets"}


def test_only_the_worker_holds_the_scheduler_identity() -> None:
    accounts = {name: _pod_spec(doc).get("serviceAccountName") for name, doc in _by_kind("Deployment").items()}
    assert accounts == {"microcosm-web": "microcosm-web", "microcosm-worker": "microcosm", "microcosm-beat": None}
    assert set(_by_kind("ServiceAccount")) == {"microcosm", "microcosm-web"}


def test_the_service_reaches_the_web_pods_through_the_proxy() -> None:
    service = _by_kind("Service")["microcosm-web"]
    web = _by_kind("Deployment")["microcosm-web"]
    assert service["spec"]["selector"].items() <= web["spec"]["template"]["metadata"]["labels"].items()
    # Every port of the Service is the proxy's: in-cluster callers (job pods, Prometheus) meet nginx too.
    proxy_ports = {p["name"] for p in _container(web, "proxy")["ports"]}
    assert {p["targetPort"] for p in service["spec"]["ports"]} == proxy_ports == {"http"}
    assert "ports" not in _container(web, "web")


def _rules(doc: dict[str, Any]) -> set[tuple[str, str, tuple[str, ...]]]:
    return {
        (group, resource, tuple(sorted(rule["verbs"])))
        for rule in doc["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }


def test_rbac_grants_exactly_the_least_privilege_set() -> None:
    cluster_role = _by_kind("ClusterRole")["microcosm-scheduler"]
    assert _rules(cluster_role) == {
        ("", "nodes", ("get", "list", "patch", "watch")),
        ("", "pods", ("get", "list", "watch")),
        ("", "pods/eviction", ("create",)),
        ("", "namespaces", ("get",)),
        # Node requests (docs/deploy.md, On-demand capacity through the cloud's autoscaler)
        ("", "podtemplates", ("list",)),
        ("autoscaling.x-k8s.io", "provisioningrequests", ("list",)),
        ("karpenter.sh", "nodeclaims", ("delete", "list")),
        # Dynamic Resource Allocation (docs/deploy.md, Dynamic Resource Allocation (DRA) clusters)
        ("resource.k8s.io", "resourceslices", ("get", "list", "watch")),
        ("resource.k8s.io", "deviceclasses", ("get", "list", "watch")),
        ("resource.k8s.io", "resourceclaims", ("list", "watch")),  # the devices other owners' claims hold (a cache)
    }
    roles = _by_kind("Role")
    assert set(roles) == {"microcosm-mig-config", "microcosm-autoscaler-events"}
    role = roles["microcosm-mig-config"]
    assert role["metadata"]["namespace"] == _settings_default("GPU_OPERATOR_NAMESPACE")
    assert _rules(role) == {("", "configmaps", ("create", "get", "patch")), ("", "pods", ("delete",))}
    # Karpenter's NodeClaim Events, where client-go records a cluster object's: read-only, in default only.
    events = roles["microcosm-autoscaler-events"]
    assert events["metadata"]["namespace"] == "default" and _rules(events) == {("", "events", ("list",))}
    for binding in [_by_kind("ClusterRoleBinding")["microcosm-scheduler"], *_by_kind("RoleBinding").values()]:
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "microcosm", "namespace": "microcosm"}]
    assert _by_kind("ClusterRoleBinding")["microcosm-scheduler"]["roleRef"]["name"] == cluster_role["metadata"]["name"]
    assert {b["metadata"]["namespace"]: b["roleRef"]["name"] for b in _by_kind("RoleBinding").values()} == {
        r["metadata"]["namespace"]: name for name, r in roles.items()
    }


def test_the_web_identity_reads_pod_logs_and_nothing_else() -> None:
    assert set(_by_kind("ClusterRole")) == {
        "microcosm-scheduler",
        "microcosm-team",
        "microcosm-log-reader",
        "microcosm-namespace-creator",
    }
    assert _rules(_by_kind("ClusterRole")["microcosm-log-reader"]) == {("", "pods/log", ("get",))}
    # Bound in each team namespace (tests/test_deploy_rbac.py), never cluster-wide.
    assert set(_by_kind("ClusterRoleBinding")) == {"microcosm-scheduler"}


# The modules that read the settings: the composition root, and the Kubernetes gateway's own settings beside it.
SETTINGS_READERS = ("portal/settings.py", "scheduler/gateways/kube/settings.py")


def _settings_readers() -> dict[str, Any]:
    """Every variable the settings modules read through an env_* reader, with its default if it is a literal."""
    nodes = [n for path in SETTINGS_READERS for n in ast.walk(ast.parse((ROOT / path).read_text()))]
    found: dict[str, Any] = {}
    for node in nodes:
        is_reader = isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id.startswith("env_")
        if is_reader and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            default = next((k.value for k in node.keywords if k.arg == "default"), None)
            found[node.args[0].value] = default.value if isinstance(default, ast.Constant) else None
    return found


def _settings_default(name: str) -> Any:
    return _settings_readers()[name]


def test_every_setting_in_the_manifests_is_read_by_the_settings() -> None:
    readers = _settings_readers()
    settings_keys = set(_by_kind("ConfigMap")["microcosm-settings"]["data"])
    secret_keys = set(_by_kind("Secret")["microcosm-secrets"]["stringData"])
    assert settings_keys - readers.keys() == set()
    assert secret_keys - readers.keys() == set()
    assert secret_keys == {"SECRET_KEY", "DATABASE_URL", "REDIS_URL", "METRICS_TOKEN"}
    assert not settings_keys & secret_keys
    assert _by_kind("ConfigMap")["microcosm-settings"]["data"]["CLUSTER_BACKEND"] == "kubernetes"


def test_the_secret_is_marked_as_a_placeholder() -> None:
    text = (DEPLOY / "secret.yaml").read_text()
    assert "PLACEHOLDER" in text and "kubectl -n microcosm create secret generic microcosm-secrets" in text
    assert all(
        "REPLACE-ME" in v for k, v in _by_kind("Secret")["microcosm-secrets"]["stringData"].items() if k != "REDIS_URL"
    )


def test_the_probe_host_is_an_allowed_host() -> None:
    web = _by_kind("Deployment")["microcosm-web"]
    headers = {h["name"]: h["value"] for h in _container(web, "proxy")["readinessProbe"]["httpGet"]["httpHeaders"]}
    allowed = _by_kind("ConfigMap")["microcosm-settings"]["data"]["ALLOWED_HOSTS"].split(",")
    assert headers["Host"] in allowed


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (with its built-in kustomize) is not installed")
def test_kustomize_renders_and_keeps_the_role_in_the_gpu_operator_namespace() -> None:
    rendered = subprocess.run(
        ["kubectl", "kustomize", str(DEPLOY)], check=True, capture_output=True, text=True, timeout=60
    ).stdout
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    namespaces = {(d["kind"], d["metadata"]["name"]): d["metadata"].get("namespace") for d in docs}
    assert namespaces[("Role", "microcosm-mig-config")] == "gpu-operator"
    assert namespaces[("Deployment", "microcosm-worker")] == "microcosm"
    images = {
        c["name"]: c["image"] for d in docs if d["kind"] in ("Deployment", "Job") for c in _pod_spec(d)["containers"]
    }
    newest = {i["name"]: f"{i['newName']}:{i['newTag']}" for i in _kustomization()["images"]}
    assert images.pop("proxy") == newest["nginx"]
    assert set(images.values()) == {newest["microcosm"]}
    # The generated ConfigMap carries deploy/proxy/nginx.conf, and the web pods mount it under its hashed name.
    generated = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("microcosm-proxy")]
    (config_map,) = generated
    assert config_map["metadata"]["namespace"] == "microcosm"
    assert config_map["data"] == {"nginx.conf": (DEPLOY / "proxy" / "nginx.conf").read_text()}
    web = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "microcosm-web")
    mounted = {v["name"]: v.get("configMap", {}).get("name") for v in _pod_spec(web)["volumes"]}
    assert mounted["proxy-config"] == config_map["metadata"]["name"]


# --- The front: nginx in each web pod, gunicorn behind it on loopback (deploy/proxy/nginx.conf) ---------------

NGINX_CONF = DEPLOY / "proxy" / "nginx.conf"


def _nginx_directives() -> dict[str, list[str]]:
    """Every simple directive of nginx.conf (name → the values it is given, in order), comments left out."""
    found: dict[str, list[str]] = {}
    for line in NGINX_CONF.read_text().splitlines():
        matched = re.match(r"\s*([a-z_]+)\s+([^;{]*);", line.split("#", 1)[0])
        if matched:
            found.setdefault(matched.group(1), []).append(matched.group(2).strip())
    return found


def _command_option(command: list[str], option: str) -> str:
    return command[command.index(option) + 1]


def test_the_proxy_config_is_generated_from_the_one_file() -> None:
    (generator,) = _kustomization()["configMapGenerator"]
    assert generator["name"] == "microcosm-proxy" and generator["namespace"] == "microcosm"
    assert generator["files"] == ["nginx.conf=proxy/nginx.conf"]
    web = _by_kind("Deployment")["microcosm-web"]
    volumes = {v["name"]: v for v in _pod_spec(web)["volumes"]}
    assert volumes["proxy-config"]["configMap"]["name"] == generator["name"]
    mounts = {m["name"]: m["mountPath"] for m in _container(web, "proxy")["volumeMounts"]}
    command = _container(web, "proxy")["command"]
    assert _command_option(command, "-c") == f"{mounts['proxy-config']}/nginx.conf"
    # The prefix (pid file, spilled bodies and answers) is the emptyDir: the root filesystem stays read-only.
    assert _command_option(command, "-p").rstrip("/") == mounts["proxy-tmp"]
    assert "emptyDir" in volumes["proxy-tmp"]
    assert command[0] == "nginx" and _command_option(command, "-g") == "daemon off;"


def test_gunicorn_listens_on_loopback_behind_the_proxy() -> None:
    web = _by_kind("Deployment")["microcosm-web"]
    bind = _command_option(_container(web, "web")["command"], "--bind")
    assert bind.startswith("127.0.0.1:"), "gunicorn on the pod's address would let in-cluster callers skip nginx"
    directives = _nginx_directives()
    assert directives["proxy_pass"] == [f"http://{bind}"]
    (proxy_port,) = _container(web, "proxy")["ports"]
    assert directives["listen"] == [str(proxy_port["containerPort"])]
    # The kubelet cannot reach a loopback port: gunicorn's liveness is asked from inside its container.
    liveness = " ".join(_container(web, "web")["livenessProbe"]["exec"]["command"])
    host, port = bind.split(":")
    assert f"('{host}', {port})" in liveness


def test_the_proxy_buffers_requests_and_answers_and_times_out_slow_clients() -> None:
    directives = _nginx_directives()
    # https://gunicorn.org/deploy: sync workers need a proxy that buffers; nginx's defaults, said explicitly.
    assert directives["proxy_request_buffering"] == ["on"]
    assert directives["proxy_buffering"] == ["on"]
    for name in ("client_header_timeout", "client_body_timeout", "send_timeout"):
        (value,) = directives[name]
        assert re.fullmatch(r"\d+s", value) and int(value[:-1]) <= 30, name
    # Django's own limit (DATA_UPLOAD_MAX_MEMORY_SIZE, 1 MiB) answers first; nginx stops what is far past it.
    assert directives["client_max_body_size"] == ["2m"]


def test_the_proxy_container_is_probed_limited_and_unprivileged() -> None:
    web = _by_kind("Deployment")["microcosm-web"]
    proxy = _container(web, "proxy")
    readiness = proxy["readinessProbe"]["httpGet"]
    assert (readiness["path"], readiness["port"]) == ("/healthz", "http")
    assert proxy["livenessProbe"]["tcpSocket"]["port"] == "http"
    assert set(proxy["resources"]["requests"]) == {"cpu", "memory"} and set(proxy["resources"]["limits"]) == {"memory"}
    assert _pod_spec(web)["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 10001,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert proxy["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    # An unprivileged user cannot bind below 1024.
    assert proxy["ports"][0]["containerPort"] >= 1024


def test_the_network_policy_admits_the_proxy_port_alone() -> None:
    (policy,) = _by_kind("NetworkPolicy").values()
    web = _by_kind("Deployment")["microcosm-web"]
    assert policy["metadata"]["namespace"] == web["metadata"]["namespace"]
    assert policy["spec"]["podSelector"]["matchLabels"] == web["spec"]["selector"]["matchLabels"]
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = policy["spec"]["ingress"]
    assert "from" not in rule  # the ingress controller, job pods in every team namespace, Prometheus
    assert rule["ports"] == [{"protocol": "TCP", "port": _container(web, "proxy")["ports"][0]["name"]}]
