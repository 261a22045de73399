"""On-demand nodes through the cloud's autoscaler, on the emulated cluster with the unmodified official client: the
Kubernetes gateway asks the Cluster Autoscaler (ProvisioningRequest) and Karpenter (placeholder pods) for nodes,
observes them arrive with their pool, binds a job there, and gives them back (scheduler/gateways/kube/
node_requests.py). The autoscalers are tests/scheduler/kube_harness/cluster_autoscaler.py and karpenter.py, each
behaviour citing the upstream file it follows."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import replace

import aiohttp.web
import pytest

from scheduler.errors import GatewayConflict, GatewayError, GatewayRetryable
from scheduler.gateways.kube.gateway import KubeGateway
from scheduler.gateways.kube.provisioning import (
    CONSUME_ANNOTATION,
    NODES_ANNOTATION,
    QUEUED_PROVISIONING,
    insufficient_capacity,
    launch_failures,
    request_state,
)
from scheduler.gateways.protocol import (
    BindRequest,
    Device,
    NodeRequestObservation,
    NodeRequestSpec,
    NodeRequestState,
    ProvisioningGateway,
    ReplicaPlacement,
)
from scheduler.pool_labels import pool_of
from tests.scheduler.kube_emulator import H100_ONE_LEAF, Cluster, ManualClock, cluster_fixture, status_response
from tests.scheduler.kube_harness.cluster_autoscaler import ClusterAutoscaler, NodeGroup
from tests.scheduler.kube_harness.karpenter import Karpenter, NodePool

cluster = pytest.fixture(cluster_fixture)
NS = "team-nlp"
GKE_POOL = "gpu-ondemand"
KARPENTER_POOL = "p5-ondemand"
GFD = {k: v for k, v in H100_ONE_LEAF.items() if k.startswith("nvidia.com/")}  # what GPU Feature Discovery labels
PR = ("autoscaling.x-k8s.io", "v1", "provisioningrequests")


@pytest.fixture
def gateway(cluster: Cluster, clock: ManualClock) -> KubeGateway:
    gateway = KubeGateway(
        cluster.new_api_client(),
        consistent_reads=True,
        namespace_create=True,
        clock=clock,
        sleep=lambda _s: None,
        request_timeout_s=2,
        attempts=2,
        node_requests=True,
    )
    gateway.namespace_ensure(namespace=NS, team="nlp")
    return gateway


def _ca(cluster: Cluster, **group: object) -> ClusterAutoscaler:
    labels = {**GFD, "cloud.google.com/gke-nodepool": GKE_POOL}
    return ClusterAutoscaler(cluster, [NodeGroup(GKE_POOL, labels, **group)])  # type: ignore[arg-type]  # test knobs


def _karpenter(cluster: Cluster, **pool: object) -> Karpenter:
    return Karpenter(cluster, [NodePool(KARPENTER_POOL, dict(GFD), **pool)])  # type: ignore[arg-type]  # test knobs


def _spec(
    autoscaler: str = "cluster-autoscaler", *, nodes: int = 2, id: str = "r1", job: str = "101"
) -> NodeRequestSpec:
    pool = GKE_POOL if autoscaler == "cluster-autoscaler" else KARPENTER_POOL
    label = "cloud.google.com/gke-nodepool" if autoscaler == "cluster-autoscaler" else "karpenter.sh/nodepool"
    return NodeRequestSpec(
        id=id,
        job=job,
        namespace=NS,
        pool=pool,
        nodes=nodes,
        gpu_model="H100-80GB",
        gpus_per_node=8,
        placement_group=nodes > 1,
        autoscaler=autoscaler,
        node_selector={label: pool},
    )


def _bind(gateway: KubeGateway, nodes: tuple[str, ...], job: str = "101") -> None:
    placements = tuple(
        ReplicaPlacement(r, node, tuple(Device(g) for g in range(8))) for r, node in enumerate(sorted(nodes))
    )
    gateway.job_bind(
        request=BindRequest(job=job, namespace=NS, name="peak", placements=placements, image="ghcr.io/acme/serve:1")
    )


def _request(gateway: KubeGateway, job: str = "101") -> NodeRequestObservation:
    """The one observation of the job's request."""
    (found,) = [r for r in gateway.observe().node_requests if r.job == job]
    return found


def _pools(gateway: KubeGateway) -> dict[str, str]:
    return {n.name: n.pool for n in gateway.observe().nodes}


def _prs(cluster: Cluster) -> list[dict]:
    return cluster.custom.list_namespaced_custom_object(*PR[:2], NS, PR[2])["items"]


def test_the_kubernetes_gateway_is_a_provisioning_gateway(gateway) -> None:
    assert isinstance(gateway, ProvisioningGateway)


def test_a_nodes_pool_is_the_first_autoscaler_label_it_carries() -> None:
    assert pool_of({"karpenter.sh/nodepool": "a", "eks.amazonaws.com/nodegroup": "b"}) == "a"
    assert pool_of({"kubernetes.azure.com/agentpool": "gpu"}) == "gpu"
    assert pool_of({"cloud.google.com/gke-nodepool": "g"}) == "g"
    assert pool_of({"topology.kubernetes.io/zone": "z"}) == ""


# -- the Cluster Autoscaler and GKE ---------------------------------------------------------------------------


def test_a_cluster_autoscaler_request_is_one_provisioning_request_over_one_pod_template(cluster, gateway) -> None:
    gateway.nodes_request(request=_spec())

    (pr,) = _prs(cluster)
    assert pr["metadata"]["name"] == "mc-nr-r1"
    assert pr["metadata"]["labels"]["microcosm.io/job"] == "101"
    assert pr["spec"] == {
        "provisioningClassName": "best-effort-atomic-scale-up.autoscaling.x-k8s.io",
        "podSets": [{"podTemplateRef": {"name": "mc-nr-r1"}, "count": 2}],
    }
    template = cluster.api_client.sanitize_for_serialization(cluster.core.read_namespaced_pod_template("mc-nr-r1", NS))
    spec = template["template"]["spec"]
    assert spec["containers"][0]["resources"]["requests"] == {"nvidia.com/gpu": "8"}
    assert spec["nodeSelector"] == {"cloud.google.com/gke-nodepool": GKE_POOL}
    assert {"key": "nvidia.com/gpu", "operator": "Exists"} in spec["tolerations"]
    # A gang's nodes in one zone (podAffinity on the request's own pods)
    (term,) = spec["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "topology.kubernetes.io/zone"
    assert cluster.pods(NS) == []  # nothing for kube-scheduler: the CA simulates the template's pods itself


def test_a_peak_arrives_is_served_on_new_nodes_and_leaves_with_the_nodes_released_cluster_autoscaler(
    cluster, gateway, clock
) -> None:
    ca = _ca(cluster, boot_s=300.0)
    gateway.nodes_request(request=_spec())
    assert _request(gateway).state is NodeRequestState.PENDING

    ca.step(clock.now)  # Accepted, and the atomic scale-up asked of the node group: Provisioned
    request = _request(gateway)
    assert (request.state, request.message) == (
        NodeRequestState.PROVISIONED,
        "CapacityIsProvisioned: Capacity is found in the cluster",
    )
    assert request.since == clock.now
    assert _pools(gateway) == {}  # the VMs are booting

    clock.now += 300
    ca.step(clock.now)
    assert _pools(gateway) == {f"{GKE_POOL}-1": GKE_POOL, f"{GKE_POOL}-2": GKE_POOL}

    _bind(gateway, (f"{GKE_POOL}-1", f"{GKE_POOL}-2"))
    pods = cluster.pods(NS)
    assert {p["metadata"]["annotations"][CONSUME_ANNOTATION] for p in pods} == {"mc-nr-r1"}
    ca.step(clock.now)  # the CA counts the consuming pods: its booking ends
    (pr,) = _prs(cluster)
    expired = ca.condition(pr, "BookingExpired")
    assert expired is not None and expired["reason"] == "CapacityBookingConsumed"
    assert _request(gateway).state is NodeRequestState.PROVISIONED

    # The peak is over: the job leaves, the request is withdrawn, the empty nodes are released.
    gateway.job_evict(job="101", namespace=NS, grace_s=0, reason="finished")
    gateway.nodes_request_withdraw(request="r1", namespace=NS)
    for node in (f"{GKE_POOL}-1", f"{GKE_POOL}-2"):
        gateway.node_release(node=node)
        assert cluster.node(node)["spec"]["unschedulable"] is True
    assert gateway.observe().node_requests == ()
    ca.step(clock.now)
    clock.now += 600  # --scale-down-unneeded-time
    ca.step(clock.now)
    assert ca.removed == [f"{GKE_POOL}-1", f"{GKE_POOL}-2"]
    assert _pools(gateway) == {}
    gateway.node_release(node=f"{GKE_POOL}-1")  # gone: nothing to do


def test_gke_queued_provisioning_brings_tainted_nodes_microcosm_binds_on_with_the_class_parameters(
    cluster, gateway, clock
) -> None:
    """A GKE node pool created with queued provisioning: asked with its class and the pool's parameters as they are;
    its nodes carry cloud.google.com/gke-queued=true:NoSchedule, which Microcosm's pods tolerate, so they are
    schedulable and the job binds there consuming the request."""
    labels = {**GFD, "cloud.google.com/gke-nodepool": GKE_POOL}
    ca = ClusterAutoscaler(cluster, [NodeGroup(GKE_POOL, labels, queued=True)], gke=True)
    parameters = {"maxRunDurationSeconds": "86400"}
    gateway.nodes_request(
        request=replace(_spec(), provisioning_class=QUEUED_PROVISIONING, provisioning_parameters=parameters)
    )
    (pr,) = _prs(cluster)
    assert (pr["spec"]["provisioningClassName"], pr["spec"]["parameters"]) == (QUEUED_PROVISIONING, parameters)
    template = cluster.api_client.sanitize_for_serialization(cluster.core.read_namespaced_pod_template("mc-nr-r1", NS))
    queued = {"key": "cloud.google.com/gke-queued", "operator": "Equal", "value": "true"}
    assert queued in template["template"]["spec"]["tolerations"]

    ca.step(clock.now)
    assert _request(gateway).state is NodeRequestState.PROVISIONED
    assert ca.parameters_seen[(NS, "mc-nr-r1")] == parameters
    clock.now += 300
    ca.step(clock.now)
    nodes = (f"{GKE_POOL}-1", f"{GKE_POOL}-2")
    observed = {n.name: n for n in gateway.observe().nodes}
    for name in nodes:
        assert {"key": "cloud.google.com/gke-queued", "value": "true", "effect": "NoSchedule"} in (
            cluster.node(name)["spec"]["taints"]
        )
        assert (observed[name].pool, observed[name].schedulable) == (GKE_POOL, True)
    _bind(gateway, nodes)
    pods = cluster.pods(NS)
    assert {p["metadata"]["annotations"][CONSUME_ANNOTATION] for p in pods} == {"mc-nr-r1"}
    assert {p["metadata"]["annotations"]["autoscaling.x-k8s.io/provisioning-class-name"] for p in pods} == {
        QUEUED_PROVISIONING
    }
    assert all(queued in p["spec"]["tolerations"] for p in pods)


def test_a_queued_pool_takes_only_its_class_and_the_open_source_ca_leaves_that_class_alone(
    cluster, gateway, clock
) -> None:
    labels = {**GFD, "cloud.google.com/gke-nodepool": GKE_POOL}
    ca = ClusterAutoscaler(cluster, [NodeGroup(GKE_POOL, labels, queued=True)], gke=True)
    gateway.nodes_request(request=_spec())  # best-effort-atomic, at a queued pool
    ca.step(clock.now)
    assert _request(gateway).message == "CapacityIsNotFound: Capacity is not found, CA will try to find it later."

    open_source = ClusterAutoscaler(cluster, [NodeGroup(GKE_POOL, labels)])  # no queued-provisioning.gke.io
    gateway.nodes_request(request=replace(_spec(id="r2", job="102"), provisioning_class=QUEUED_PROVISIONING))
    open_source.step(clock.now)
    assert _request(gateway, "102").message == "not accepted by the Cluster Autoscaler yet"


def test_a_group_whose_taint_the_template_does_not_tolerate_cannot_take_the_request(cluster, gateway, clock) -> None:
    labels = {**GFD, "cloud.google.com/gke-nodepool": GKE_POOL}
    taint = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
    ca = ClusterAutoscaler(cluster, [NodeGroup(GKE_POOL, labels, taints=[taint])])
    gateway.nodes_request(request=_spec())
    ca.step(clock.now)
    assert _request(gateway).message.startswith("CapacityIsNotFound")


def test_a_stockout_is_the_autoscalers_words_and_the_group_is_retried_after_its_backoff(
    cluster, gateway, clock
) -> None:
    ca = _ca(cluster, stockout=True)
    gateway.nodes_request(request=_spec())

    ca.step(clock.now)
    request = _request(gateway)
    assert (request.state, request.message) == (
        NodeRequestState.PENDING,
        "CapacityIsNotFound: Capacity is not found, CA will try to find it later.",
    )
    ca.groups[GKE_POOL].stockout = False  # the cloud has capacity again, but the group is backed off for 5 min
    clock.now += 60
    ca.step(clock.now)
    assert _request(gateway).state is NodeRequestState.PENDING
    clock.now += 240
    ca.step(clock.now)
    assert _request(gateway).state is NodeRequestState.PROVISIONED


def test_a_request_never_provisioned_fails_when_it_expires(cluster, gateway, clock) -> None:
    ca = _ca(cluster, stockout=True)
    ca.expiration_s = 3600.0  # 7 days upstream
    gateway.nodes_request(request=_spec())
    ca.step(clock.now)
    clock.now += 3601
    ca.step(clock.now)
    request = _request(gateway)
    assert (request.state, request.message) == (NodeRequestState.FAILED, "Expired: ProvisioningRequest is expired")
    assert _pools(gateway) == {}


def test_a_request_beyond_the_groups_size_is_not_provisioned_in_part(cluster, gateway, clock) -> None:
    ca = _ca(cluster, max_size=1)
    gateway.nodes_request(request=_spec(nodes=2))
    ca.step(clock.now)
    clock.now += 3600
    ca.step(clock.now)
    assert _request(gateway).state is NodeRequestState.PENDING
    assert _pools(gateway) == {}  # all or nothing: not one node of the two


def test_capacity_revoked_is_observed_and_the_nodes_are_gone(cluster, gateway, clock) -> None:
    ca = _ca(cluster, boot_s=0.0)
    gateway.nodes_request(request=_spec(nodes=1))
    ca.step(clock.now)
    ca.step(clock.now)
    assert _pools(gateway) == {f"{GKE_POOL}-1": GKE_POOL}

    ca.revoke(NS, "mc-nr-r1", clock.now)
    request = _request(gateway)
    assert (request.state, request.message) == (
        NodeRequestState.REVOKED,
        "CapacityRevoked: the provider reclaimed the nodes",
    )
    assert _pools(gateway) == {}


def test_an_unconsumed_booking_expires_and_the_ca_scales_the_empty_nodes_down_unless_disabled(
    cluster, gateway, clock
) -> None:
    ca = _ca(cluster, boot_s=0.0)
    gateway.nodes_request(request=_spec())
    ca.step(clock.now)
    ca.step(clock.now)
    cluster.patch_node(
        f"{GKE_POOL}-2", {"metadata": {"annotations": {"cluster-autoscaler.kubernetes.io/scale-down-disabled": "true"}}}
    )
    clock.now += 300
    ca.step(clock.now)
    assert ca.removed == []  # the booking holds them (processor.go bookCapacity)

    clock.now += 301  # 10 min after Provisioned
    ca.step(clock.now)
    request = _request(gateway)
    assert request.state is NodeRequestState.PROVISIONED
    assert "CapacityReservationTimeExpired" in request.message
    clock.now += 600
    ca.step(clock.now)
    assert ca.removed == [f"{GKE_POOL}-1"]  # -2 is annotated scale-down-disabled


def test_withdraw_deletes_every_object_and_asking_twice_creates_nothing_more(cluster, gateway) -> None:
    gateway.nodes_request(request=_spec())
    gateway.nodes_request(request=_spec())  # a retried apply
    assert len(_prs(cluster)) == 1
    assert len(cluster.core.list_namespaced_pod_template(NS).items) == 1

    gateway.nodes_request_withdraw(request="r1", namespace=NS)
    gateway.nodes_request_withdraw(request="r1", namespace=NS)  # unknown now: nothing
    assert _prs(cluster) == []
    assert cluster.core.list_namespaced_pod_template(NS).items == []
    assert gateway.observe().node_requests == ()


def test_a_cluster_without_the_autoscalers_crds_has_no_node_requests(cluster, gateway) -> None:
    cluster.fail("GET", r"/provisioningrequests$", 404)  # the CRD is not installed: the API does not serve it
    assert gateway.observe().node_requests == ()


def test_asking_karpenter_twice_makes_one_placeholder_per_node(cluster, gateway) -> None:
    gateway.nodes_request(request=_spec("karpenter"))
    gateway.nodes_request(request=_spec("karpenter"))
    assert sorted(p["metadata"]["name"] for p in _placeholders(cluster)) == ["mc-nr-r1-0", "mc-nr-r1-1"]
    gateway.nodes_request_withdraw(request="r1", namespace=NS)
    assert _placeholders(cluster) == [] and cluster.core.list_namespaced_pod_template(NS).items == []


def test_a_worker_that_does_not_observe_node_requests_refuses_to_make_one(cluster, clock) -> None:
    gateway = KubeGateway(cluster.new_api_client(), clock=clock, sleep=lambda _s: None, request_timeout_s=2)
    with pytest.raises(GatewayConflict, match="KUBE_NODE_REQUESTS=1"):
        gateway.nodes_request(request=_spec())
    assert _prs(cluster) == []


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"autoscaler": "simulated"}, "autoscaler"),
        ({"nodes": 0}, "nodes"),
        ({"node_selector": {}}, "node_selector"),
    ],
)
def test_bad_input_is_refused_naming_the_field_and_nothing_is_created(cluster, gateway, change, field) -> None:
    import dataclasses

    with pytest.raises(GatewayConflict, match=field):
        gateway.nodes_request(request=dataclasses.replace(_spec(), **change))
    assert _prs(cluster) == [] and cluster.core.list_namespaced_pod_template(NS).items == []


# -- API errors, as the rest of the gateway maps them --------------------------------------------------------


async def _no_provisioning_request_grant(
    _emulator: object, raw: aiohttp.web.BaseRequest
) -> aiohttp.web.Response | None:
    """RBAC's refusal without the node-request grant (tests/scheduler/kube_harness/authorization.py, its words)."""
    if raw.method != "POST" or not raw.path.endswith("/provisioningrequests"):
        return None
    message = (
        'provisioningrequests.autoscaling.x-k8s.io is forbidden: User "system:serviceaccount:microcosm:microcosm" '
        f'cannot create resource "provisioningrequests" in API group "autoscaling.x-k8s.io" in the namespace "{NS}"'
    )
    return status_response(403, "Forbidden", message, group="autoscaling.x-k8s.io", kind="provisioningrequests")


def test_a_refusal_without_the_rbac_grant_is_a_deployment_error_and_leaves_no_template_behind(cluster, gateway) -> None:
    assert cluster.handler is not None
    cluster.handler.interceptors.append(_no_provisioning_request_grant)
    with pytest.raises(GatewayError, match=re.escape("apply deploy/rbac.yaml")) as raised:
        gateway.nodes_request(request=_spec())
    assert not isinstance(raised.value, GatewayConflict | GatewayRetryable)
    assert cluster.core.list_namespaced_pod_template(NS).items == []


def test_a_namespace_gone_or_no_provisioning_request_api_is_a_conflict_that_says_how_to_fix_it(
    cluster, gateway
) -> None:
    cluster.fail("POST", r"/provisioningrequests$", 404)
    with pytest.raises(GatewayConflict, match="--enable-provisioning-requests"):
        gateway.nodes_request(request=_spec())
    assert cluster.core.list_namespaced_pod_template(NS).items == []


@pytest.mark.parametrize(
    ("conditions", "state", "message"),
    [
        ([], NodeRequestState.PENDING, "not accepted by the Cluster Autoscaler yet"),
        ([("Accepted", "True", "Accepted", "ok")], NodeRequestState.PENDING, "Accepted: ok"),
        (
            [("Provisioned", "False", "CapacityIsNotFound", "later")],
            NodeRequestState.PENDING,
            "CapacityIsNotFound: later",
        ),
        ([("Provisioned", "True", "CapacityIsProvisioned", "")], NodeRequestState.PROVISIONED, "CapacityIsProvisioned"),
        (
            [
                ("Provisioned", "True", "CapacityIsFound", "x"),
                ("BookingExpired", "True", "CapacityBookingConsumed", ""),
            ],
            NodeRequestState.PROVISIONED,
            "CapacityIsFound: x; CapacityBookingConsumed",
        ),
        (
            [("Provisioned", "True", "P", ""), ("CapacityRevoked", "True", "R", "gone")],
            NodeRequestState.REVOKED,
            "R: gone",
        ),
        (
            [("Failed", "True", "FailedToCreatePods", "no template")],
            NodeRequestState.FAILED,
            "FailedToCreatePods: no template",
        ),
    ],
)
def test_a_provisioning_requests_conditions_are_its_state(conditions, state, message) -> None:
    pr = {
        "status": {
            "conditions": [
                {"type": t, "status": st, "reason": r, "message": m, "lastTransitionTime": "2027-01-15T08:00:00Z"}
                for t, st, r, m in conditions
            ]
        }
    }
    found = request_state(pr)
    assert found[:2] == (state, message)
    assert found[2] == (None if not conditions else 1800000000.0)  # 2027-01-15T08:00:00Z


def test_a_server_error_is_retried_and_then_retryable(cluster, gateway) -> None:
    cluster.fail("POST", r"/provisioningrequests$", 503, times=1)
    gateway.nodes_request(request=_spec())  # the second attempt goes through
    assert len(_prs(cluster)) == 1

    cluster.fail("POST", r"/provisioningrequests$", 500, times=5)
    with pytest.raises(GatewayRetryable):
        gateway.nodes_request(request=_spec(id="r2", job="102"))
    names = [t.metadata.name for t in cluster.core.list_namespaced_pod_template(NS).items]
    assert names == ["mc-nr-r1"]  # r2's template was undone


def test_a_409_on_create_is_the_request_already_there(cluster, gateway) -> None:
    gateway.nodes_request(request=_spec())
    cluster.clear_log()
    gateway.nodes_request(request=_spec())  # 409 on both creates: what was asked is there
    assert [p.rsplit("/", 1)[1] for _m, p in cluster.requests("POST")] == ["podtemplates", "provisioningrequests"]


def test_a_cycle_reads_the_requests_in_two_lists_and_karpenters_in_three_more_only_while_one_waits(
    cluster, gateway
) -> None:
    gateway.nodes_request(request=_spec())
    gateway.observe()
    cluster.clear_log()
    gateway.observe()
    assert _lists(cluster) == Counter({"provisioningrequests": 1, "podtemplates": 1})

    gateway.nodes_request(request=_spec("karpenter", id="k1", job="102"))
    cluster.clear_log()
    gateway.observe()
    assert _lists(cluster) == Counter(
        {"provisioningrequests": 1, "podtemplates": 1, "pods": 1, "nodeclaims": 1, "events": 1}
    )
    # The Events a field selector picks, in default only (deploy/rbac.yaml grants no more).
    ((_m, path, query),) = [e for e in cluster.handler.log if e[1].endswith("/events")]  # type: ignore[union-attr]
    assert path == "/api/v1/namespaces/default/events" and "reason%3DInsufficientCapacityError" in query


def _lists(cluster: Cluster) -> Counter[str]:
    assert cluster.handler is not None
    found: Counter[str] = Counter()
    for method, path, query in cluster.handler.log:
        match = re.search(r"/(provisioningrequests|podtemplates|nodeclaims|pods|events)$", path)
        if method == "GET" and match and "watch=" not in query and "limit=1" not in query:
            if match.group(1) == "pods" and "node-request" not in query:
                continue  # the pods cache's own reads
            found[match.group(1)] += 1
    return found


# -- Karpenter -------------------------------------------------------------------------------------------------


def _placeholders(cluster: Cluster) -> list[dict]:
    return [p for p in cluster.pods(NS) if "microcosm.io/node-request" in (p["metadata"].get("labels") or {})]


def _run(karpenter: Karpenter, clock: ManualClock, seconds: float, every: float = 10.0) -> None:
    """Karpenter's loop every ``every`` seconds for ``seconds`` (its batch window closes between two steps)."""
    end = clock.now + seconds
    while clock.now < end:
        clock.now += every
        karpenter.step(clock.now)


def test_a_peak_arrives_is_served_on_new_nodes_and_leaves_with_the_nodes_released_karpenter(
    cluster, gateway, clock
) -> None:
    karpenter = _karpenter(cluster)
    gateway.nodes_request(request=_spec("karpenter"))
    placeholders = _placeholders(cluster)
    assert len(placeholders) == 2
    assert all(
        "schedulerName" not in p["spec"] or p["spec"]["schedulerName"] == "default-scheduler" for p in placeholders
    )
    assert all("app.kubernetes.io/managed-by" not in p["metadata"]["labels"] for p in placeholders)
    assert gateway.observe().jobs == {}  # a placeholder is no replica of the job

    karpenter.step(clock.now)  # kube-scheduler: nowhere to go
    request = _request(gateway)
    assert request.state is NodeRequestState.PENDING
    assert request.message.startswith("Unschedulable: 0/0 nodes are available")

    _run(karpenter, clock, 200)  # batch, launch, register, and kube-scheduler binds the placeholders
    nodes = tuple(sorted(_pools(gateway)))
    assert len(nodes) == 2 and set(_pools(gateway).values()) == {KARPENTER_POOL}
    request = _request(gateway)
    assert (request.state, request.nodes) == (NodeRequestState.PROVISIONED, nodes)

    _bind(gateway, nodes)  # the placeholders make way for the job's pods
    assert _placeholders(cluster) == []
    # Karpenter never repacks a node under a replica: Microcosm moves its own work.
    assert {p["metadata"]["annotations"].get("karpenter.sh/do-not-disrupt") for p in cluster.pods(NS)} == {"true"}
    template = cluster.core.read_namespaced_pod_template("mc-nr-r1", NS)
    assert template.metadata.annotations[NODES_ANNOTATION] == ",".join(nodes)
    _run(karpenter, clock, 60)
    assert _request(gateway).state is NodeRequestState.PROVISIONED
    assert karpenter.removed == []  # busy nodes are not consolidated

    gateway.job_evict(job="101", namespace=NS, grace_s=0, reason="finished")
    gateway.nodes_request_withdraw(request="r1", namespace=NS)
    for node in nodes:
        gateway.node_release(node=node)  # cordon, and delete its NodeClaim
    karpenter.step(clock.now)
    assert sorted(karpenter.removed) == list(nodes)
    assert _pools(gateway) == {}
    assert cluster.custom.list_cluster_custom_object("karpenter.sh", "v1", "nodeclaims")["items"] == []


def test_karpenter_gangs_arrive_in_part_and_a_withdrawal_lets_the_loop_release_what_came(
    cluster, gateway, clock
) -> None:
    karpenter = _karpenter(cluster, limit_nodes=1, consolidate_after_s=None)
    gateway.nodes_request(request=_spec("karpenter"))
    _run(karpenter, clock, 300)

    request = _request(gateway)
    assert request.state is NodeRequestState.PENDING
    assert len(request.nodes) == 1 and "0/1 nodes are available" in request.message

    gateway.nodes_request_withdraw(request="r1", namespace=NS)
    assert _placeholders(cluster) == []
    gateway.node_release(node=request.nodes[0])
    karpenter.step(clock.now)
    assert karpenter.removed == list(request.nodes)


def test_an_insufficient_capacity_launch_deletes_the_nodeclaim_says_so_and_karpenter_tries_again(
    cluster, gateway, clock
) -> None:
    karpenter = _karpenter(cluster, ice=1)
    gateway.nodes_request(request=_spec("karpenter", nodes=1))
    _run(karpenter, clock, 50)  # kube-scheduler's verdict, the batch, its NodeClaim and the launch 30 s later
    ((claim, reason, _said),) = karpenter.events
    assert reason == "InsufficientCapacityError" and re.fullmatch(rf"{KARPENTER_POOL}-[b-z2-9]{{5}}", claim)
    assert cluster.custom.list_cluster_custom_object("karpenter.sh", "v1", "nodeclaims")["items"] == []
    # Karpenter's Event, as client-go's recorder writes it for a cluster-scoped NodeClaim: in namespace default.
    (event,) = cluster.core.list_namespaced_event("default").items
    assert (event.type, event.reason, event.involved_object.kind, event.involved_object.name) == (
        "Warning",
        "InsufficientCapacityError",
        "NodeClaim",
        claim,
    )
    # The request waits, in Karpenter's words (the job's reason carries them: test_kube_peak.py).
    request = _request(gateway)
    assert (request.state, request.message) == (
        NodeRequestState.PENDING,
        f"InsufficientCapacityError: NodeClaim {claim} event: insufficient capacity, all requested instance types "
        "were unavailable during launch",
    )

    _run(karpenter, clock, 240)
    assert _request(gateway).state is NodeRequestState.PROVISIONED


def test_a_stockout_before_the_request_is_not_its_words_and_unreadable_events_leave_kube_schedulers(
    cluster, gateway, clock
) -> None:
    karpenter = _karpenter(cluster, ice=1)
    gateway.nodes_request(request=_spec("karpenter", nodes=1, id="r0", job="100"))
    _run(karpenter, clock, 50)
    gateway.nodes_request_withdraw(request="r0", namespace=NS)
    _run(karpenter, clock, 600)
    karpenter.pools[KARPENTER_POOL].limit_nodes = 0  # nothing launches: the placeholder stays unschedulable
    gateway.nodes_request(request=_spec("karpenter", nodes=1))
    _run(karpenter, clock, 20)
    request = _request(gateway)
    assert request.state is NodeRequestState.PENDING and request.message.startswith("Unschedulable: 0/")
    # Events Microcosm may not read (no grant in default): the request is observed all the same.
    cluster.fail("GET", r"^/api/v1/namespaces/default/events", status=403, times=10)
    assert _request(gateway).message.startswith("Unschedulable: 0/")


def test_a_launch_failure_is_the_requests_message(cluster, gateway, clock) -> None:
    """Launched=Unknown, reason LaunchFailed (launch.go SetUnknownWithReason), with the cloud's words."""
    karpenter = _karpenter(cluster, launch_error="creating instance, InvalidParameter: no such subnet")
    gateway.nodes_request(request=_spec("karpenter", nodes=1))
    _run(karpenter, clock, 50)
    request = _request(gateway)
    assert (request.state, request.message) == (
        NodeRequestState.PENDING,
        "LaunchFailed: creating instance, InvalidParameter: no such subnet",
    )


def test_karpenter_consolidates_an_empty_node_after_consolidate_after_unless_do_not_disrupt(
    cluster, gateway, clock
) -> None:
    karpenter = _karpenter(cluster, consolidate_after_s=300.0)
    gateway.nodes_request(request=_spec("karpenter"))
    _run(karpenter, clock, 200)
    nodes = sorted(_pools(gateway))
    cluster.patch_node(nodes[1], {"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}})

    gateway.nodes_request_withdraw(request="r1", namespace=NS)  # the job went elsewhere: its nodes stand empty
    _run(karpenter, clock, 100)
    assert karpenter.removed == []
    _run(karpenter, clock, 220)
    assert karpenter.removed == [nodes[0]]
    assert [e[1] for e in karpenter.events] == ["DisruptionTerminating"]


def _ice(claim: str, at: str, *, reason: str = "InsufficientCapacityError") -> dict:
    return {
        "metadata": {"name": f"{claim}.1", "namespace": "default"},
        "involvedObject": {"kind": "NodeClaim", "name": claim},
        "reason": reason,
        "message": f"NodeClaim {claim} event: insufficient capacity, none left",
        "lastTimestamp": at,
    }


def test_stockout_events_are_read_per_pool_by_the_nodeclaims_generated_name_the_newest_winning() -> None:
    events = [
        _ice("p5-od-bbbbc", "2026-12-05T10:00:00Z"),
        _ice("p5-od-bbbbd", "2026-12-05T10:05:00Z"),  # newer: its words
        _ice("h100-x2z9k", "2026-12-05T09:00:00Z"),
        _ice("p5-od-manual", "2026-12-05T11:00:00Z"),  # not a generated name: whose pool is unknown
        _ice("p5-od-bbbbf", "2026-12-05T12:00:00Z", reason="NodeClassNotReady"),
        {**_ice("p5-od-bbbbg", ""), "metadata": {"name": "x"}},  # no time at all
    ]
    found = insufficient_capacity(events)
    assert sorted(found) == ["h100", "p5-od"]
    said, _at = found["p5-od"]
    assert said == "InsufficientCapacityError: NodeClaim p5-od-bbbbd event: insufficient capacity, none left"


def test_a_nodeclaim_awaiting_its_first_reconcile_is_no_launch_failure() -> None:
    def claim(status: str, reason: str) -> dict:
        condition = {"type": "Launched", "status": status, "reason": reason, "message": "boom"}
        return {"metadata": {"labels": {"karpenter.sh/nodepool": "p5"}}, "status": {"conditions": [condition]}}

    assert launch_failures([claim("Unknown", "AwaitingReconciliation")]) == {}
    assert launch_failures([claim("Unknown", "LaunchFailed")]) == {"p5": "LaunchFailed: boom"}
    assert launch_failures([claim("False", "LaunchFailed")]) == {"p5": "LaunchFailed: boom"}  # before v1
