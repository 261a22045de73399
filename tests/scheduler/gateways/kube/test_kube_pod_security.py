"""Pod Security on Kubernetes: the harness's admission (tests/scheduler/kube_harness/pod_security.py) against
upstream's own expectations, what it says of Microcosm's pods, and the gateway's team namespaces under it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from scheduler.core.model.vocabulary import Fabric
from scheduler.errors import GatewayConflict
from scheduler.gateways.kube.fabrics import FabricSettings, replica_fabric
from scheduler.gateways.kube.gateway import KubeGateway
from scheduler.gateways.kube.namespaces import team_manifests
from scheduler.gateways.kube.pods import pod_manifest
from scheduler.gateways.protocol import BindRequest, Device, NodeObservation, ReplicaPlacement
from tests.scheduler.kube_emulator import H100_ONE_LEAF, cluster_fixture
from tests.scheduler.kube_harness import pod_security
from tests.scheduler.kube_harness.pod_security import forbidden_detail, refusal, violations

ROOT = Path(__file__).resolve().parents[4]
cluster = pytest.fixture(cluster_fixture)

SETTINGS = FabricSettings(
    rdma_resource="rdma/ib_pool", tcpx_daemon_image="registry.example/tcpx:1", tcpxo_daemon_image="registry.example/o:1"
)
FABRIC_DEVICES = {Fabric.TCP: 0, Fabric.EFA: 32, Fabric.INFINIBAND: 63, Fabric.TCPX: 4, Fabric.TCPXO: 8}


def _pod(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p"}, "spec": spec}


# -- the checker says what upstream's own tests expect (policy/check_*_test.go) ----------------------------------


@pytest.mark.parametrize(
    ("pod", "level", "expected"),
    [
        # check_hostPorts_test.go, "multiple containers, multiple host port"
        (
            _pod(
                containers=[
                    {"name": "a", "ports": [{"hostPort": 0}]},
                    {"name": "b", "ports": [{"hostPort": 0}, {"hostPort": 10}, {"hostPort": 20}]},
                    {"name": "c", "ports": [{"hostPort": 0}, {"hostPort": 10}, {"hostPort": 30}]},
                ]
            ),
            "baseline",
            [("hostPort", 'containers "b", "c" use hostPorts 10, 20, 30')],
        ),
        # check_seLinuxOptions_test.go, the first case
        (
            _pod(
                securityContext={"seLinuxOptions": {"type": "foo", "user": "bar", "role": "baz"}},
                containers=[
                    {"name": "a", "securityContext": {"seLinuxOptions": {"type": "container_t"}}},
                    {"name": "d", "securityContext": {"seLinuxOptions": {"type": "container_engine_t"}}},
                    {"name": "e", "securityContext": {"seLinuxOptions": {"type": "bar"}}},
                    {"name": "f", "securityContext": {"seLinuxOptions": {"user": "bar"}}},
                    {"name": "g", "securityContext": {"seLinuxOptions": {"role": "baz"}}},
                ],
            ),
            "baseline",
            [
                (
                    "seLinuxOptions",
                    'pod and containers "e", "f", "g" set forbidden securityContext.seLinuxOptions: '
                    'types "bar", "foo"; user may not be set; role may not be set',
                )
            ],
        ),
        # check_runAsNonRoot_test.go and check_seccompProfile_restricted_test.go: nothing set
        (
            _pod(
                containers=[
                    {
                        "name": "a",
                        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                    }
                ]
            ),
            "restricted",
            [
                ("runAsNonRoot != true", 'pod or container "a" must set securityContext.runAsNonRoot=true'),
                (
                    "seccompProfile",
                    'pod or container "a" must set securityContext.seccompProfile.type to '
                    '"RuntimeDefault" or "Localhost"',
                ),
            ],
        ),
        # check_capabilities_restricted_test.go, "multiple containers"
        (
            _pod(
                securityContext={"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                containers=[
                    {"name": n, "securityContext": {"allowPrivilegeEscalation": False, "capabilities": c}}
                    for n, c in (
                        ("a", {"add": ["FOO", "BAR"]}),
                        ("b", {"add": ["BAR", "BAZ"]}),
                        ("c", {"add": ["NET_BIND_SERVICE", "CHOWN"], "drop": ["ALL", "FOO"]}),
                    )
                ],
            ),
            "restricted",
            [
                (
                    "unrestricted capabilities",
                    'containers "a", "b" must set securityContext.capabilities.drop=["ALL"]; containers "a", "b", "c" '
                    'must not include "BAR", "BAZ", "CHOWN", "FOO" in securityContext.capabilities.add',
                )
            ],
        ),
        # check_seccompProfile_baseline.go: Unconfined is refused even at baseline; privileged and host namespaces
        (
            _pod(
                hostNetwork=True,
                hostPID=True,
                securityContext={"seccompProfile": {"type": "Unconfined"}},
                containers=[{"name": "a", "securityContext": {"privileged": True}}],
            ),
            "baseline",
            [
                ("host namespaces", "hostNetwork=true, hostPID=true"),
                ("privileged", 'container "a" must not set securityContext.privileged=true'),
                ("seccompProfile", 'pod must not set securityContext.seccompProfile.type to "Unconfined"'),
            ],
        ),
    ],
)
def test_the_checker_answers_as_upstream_tests_expect(pod, level, expected) -> None:
    assert violations(pod, level) == expected


def test_the_refusal_is_the_api_servers_message_and_privileged_admits_everything() -> None:
    pod = _pod(
        containers=[{"name": "a", "securityContext": {"privileged": True}}], volumes=[{"name": "h", "hostPath": {}}]
    )
    labels = {"pod-security.kubernetes.io/enforce": "baseline"}
    assert refusal(pod, labels) == (
        'pods "p" is forbidden: violates PodSecurity "baseline:latest": hostPath volumes (volume "h"), '
        'privileged (container "a" must not set securityContext.privileged=true)'
    )
    assert refusal(pod, {}) is None  # no label: the admission configuration's default, privileged
    assert refusal(pod, {"pod-security.kubernetes.io/enforce": "privileged"}) is None
    assert "restricted:latest" in (refusal(pod, {"pod-security.kubernetes.io/enforce": "strict"}) or "")  # fails closed


# -- Microcosm's job pods --------------------------------------------------------------------------------------


def _job_pod(fabric: Fabric) -> dict[str, Any]:
    """Replica 0 of a two-node gang on nodes of ``fabric`` (TCP: no fabric: the pod any job gets)."""
    placements = tuple(ReplicaPlacement(r, n, tuple(Device(g) for g in range(8))) for r, n in enumerate("ab"))
    request = BindRequest(job="42", namespace="team-nlp", name="llama", placements=placements)
    node = NodeObservation(
        name="a",
        gpu_model="H100-SXM5-80GB",
        gpu_count=8,
        interconnect="nvswitch",
        tier="on-demand",
        fabric=str(fabric),
        fabric_devices=FABRIC_DEVICES[fabric],
    )
    parts = replica_fabric(request, placements[0], node, SETTINGS)
    return pod_manifest(request, placements[0], team="nlp", image="img", grace_s=30, fabric=parts)


def test_a_plain_job_pod_passes_baseline() -> None:
    assert violations(_job_pod(Fabric.TCP), "baseline") == []


def _documented_fabric_refusals() -> dict[str, str]:
    """The table of docs/deploy.md, "Pod Security": fabric → what baseline refuses in its pods."""
    text = (ROOT / "docs" / "deploy.md").read_text()
    section = text[text.index("## Pod Security") :]
    section = section[: section.index("\n## ", 1)]
    rows = re.findall(r"^\| `([a-z-]+)` \|([^|]+)\|", section, flags=re.MULTILINE)
    return {fabric: cell.strip().strip("`") for fabric, cell in rows}


def test_each_fabric_pods_baseline_violations_are_the_documented_ones() -> None:
    found = {str(f): forbidden_detail(violations(_job_pod(f), "baseline")) or "nothing" for f in FABRIC_DEVICES}
    assert _documented_fabric_refusals() == found


# -- the gateway's team namespaces under Pod Security -----------------------------------------------------------

TCPX_NODE = {**H100_ONE_LEAF, "node.kubernetes.io/instance-type": "a3-highgpu-8g"}


def _gang(*nodes: str) -> BindRequest:
    placements = tuple(ReplicaPlacement(r, n, tuple(Device(g) for g in range(8))) for r, n in enumerate(nodes))
    return BindRequest(job="42", namespace="team-nlp", name="llama", placements=placements, image="img")


def _gateway(cluster, **kwargs: Any) -> KubeGateway:
    pod_security.install(cluster)
    return KubeGateway(cluster.new_api_client(), clock=lambda: 1_800_000_000.0, sleep=lambda s: None, **kwargs)


def test_a_created_team_namespace_enforces_baseline_and_is_bound_for_microcosm(cluster) -> None:
    gateway = _gateway(cluster, namespace_create=True)
    gateway.namespace_ensure(namespace="team-nlp", team="nlp")

    labels = cluster.handler.namespaces["team-nlp"]["metadata"]["labels"]
    assert labels["microcosm.io/team"] == "nlp"
    assert labels["pod-security.kubernetes.io/enforce"] == "baseline"
    assert labels["pod-security.kubernetes.io/warn"] == labels["pod-security.kubernetes.io/audit"] == "restricted"
    listed = client.RbacAuthorizationV1Api(cluster.api_client).list_namespaced_role_binding("team-nlp")
    roles = {b.metadata.name: b.role_ref.name for b in listed.items if b.metadata}
    assert roles == {"microcosm": "microcosm-team", "microcosm-web": "microcosm-log-reader"}


def test_a_plain_job_binds_in_a_baseline_namespace(cluster) -> None:
    gateway = _gateway(cluster, namespace_create=True)
    gateway.namespace_ensure(namespace="team-nlp", team="nlp")
    cluster.add_node("gpu-a", H100_ONE_LEAF)

    gateway.job_bind(request=_gang("gpu-a"))

    assert [p["spec"].get("nodeName") for p in cluster.pods("team-nlp")] == ["gpu-a"]


def test_a_tcpx_gang_in_a_baseline_namespace_is_refused_clearly_and_leaves_nothing(cluster) -> None:
    fabric = FabricSettings(tcpx_daemon_image="registry.example/tcpx:1")
    gateway = _gateway(cluster, namespace_create=True, fabric=fabric)
    gateway.namespace_ensure(namespace="team-nlp", team="nlp")
    for name in ("a3-1", "a3-2"):
        cluster.add_node(name, TCPX_NODE)

    with pytest.raises(GatewayConflict) as refused:
        gateway.job_bind(request=_gang("a3-1", "a3-2"))

    message = str(refused.value)
    assert 'violates PodSecurity "baseline:latest": non-default capabilities' in message
    assert "docs/deploy.md, Pod Security" in message and "pod-security.kubernetes.io/enforce" in message
    assert cluster.pods("team-nlp") == []


def test_a_team_set_to_privileged_runs_its_tcpx_gang(cluster) -> None:
    fabric = FabricSettings(tcpx_daemon_image="registry.example/tcpx:1")
    gateway = _gateway(cluster, namespace_create=True, fabric=fabric, pod_security_team_levels={"nlp": "privileged"})
    gateway.namespace_ensure(namespace="team-nlp", team="nlp")
    for name in ("a3-1", "a3-2"):
        cluster.add_node(name, TCPX_NODE)

    gateway.job_bind(request=_gang("a3-1", "a3-2"))

    assert cluster.handler.namespaces["team-nlp"]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == (
        "privileged"
    )
    assert len(cluster.pods("team-nlp")) == 2


# -- namespaces are the platform's by default --------------------------------------------------------------------


def test_by_default_a_missing_namespace_is_refused_naming_how_to_create_it(cluster) -> None:
    gateway = _gateway(cluster)

    with pytest.raises(GatewayConflict, match=r"manage\.py team_namespaces.*KUBE_NAMESPACE_CREATE"):
        gateway.namespace_ensure(namespace="team-nlp", team="nlp")
    assert cluster.requests("POST", "/namespaces") == []


def test_a_namespace_the_platform_applied_is_accepted_and_another_teams_is_not(cluster) -> None:
    gateway = _gateway(cluster)
    namespace = team_manifests("team-nlp", "nlp", "baseline")[0]
    cluster.core.create_namespace(namespace)

    gateway.namespace_ensure(namespace="team-nlp", team="nlp")
    with pytest.raises(GatewayConflict, match=re.escape("labelled microcosm.io/team=nlp, not microcosm.io/team=cv")):
        gateway.namespace_ensure(namespace="team-nlp", team="cv")
    cluster.core.create_namespace({"metadata": {"name": "default-ish"}})
    with pytest.raises(GatewayConflict, match=re.escape("has no microcosm.io/team label")):
        gateway.namespace_ensure(namespace="default-ish", team="nlp")
