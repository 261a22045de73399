"""The Kubernetes gateway with the unmodified official client, over HTTP, against kmock's emulator."""

from __future__ import annotations

import json

import pytest

from scheduler.errors import GatewayConflict, GatewayError, GatewayRetryable
from scheduler.gateways.kube.gateway import KubeGateway
from scheduler.gateways.protocol import BindRequest, ClusterGateway, Device, ReplicaPhase, ReplicaPlacement
from tests.scheduler.kube_emulator import Sleeps, cluster_fixture, iso

cluster = pytest.fixture(cluster_fixture)

H100 = {
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.memory": "81559",
    "nvidia.com/mig.capable": "true",
    "nvidia.com/mig.strategy": "mixed",
}
A100_40 = {
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.memory": "40960",
    "nvidia.com/mig.capable": "true",
}
NOW = 1_800_000_000.0


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
def gateway(cluster, sleeps) -> KubeGateway:
    return KubeGateway(
        cluster.new_api_client(),
        consistent_reads=True,
        namespace_create=True,
        clock=lambda: NOW,
        sleep=sleeps,
        request_timeout_s=1.0,
        default_image="",
    )


def _bind_request(job: str = "42", *placements: ReplicaPlacement, image: str = "ghcr.io/acme/train:1") -> BindRequest:
    return BindRequest(
        job=job,
        namespace="team-nlp",
        name="llama-finetune",
        placements=placements,
        image=image,
        command=("python", "train.py"),
        env={"EPOCHS": "3"},
        checkpoint_interval_s=600,
        checkpoint_dir=f"/checkpoints/job-{job}",
        resume_from=f"/checkpoints/job-{job}/step-000000100.ckpt",
    )


def _gang(node: str = "gpu-a", replicas: int = 3) -> BindRequest:
    return _bind_request(
        "42", *(ReplicaPlacement(r, node, (Device(2 * r), Device(2 * r + 1))) for r in range(replicas))
    )


def test_it_is_a_cluster_gateway(gateway) -> None:
    assert isinstance(gateway, ClusterGateway)
    assert gateway.name == "kubernetes"


# -- observe --------------------------------------------------------------------------------------------------


def test_gpu_operator_labelled_nodes_are_observed_with_model_tier_and_topology(cluster, gateway) -> None:
    cluster.add_node(
        "p5-1",
        {
            **H100,
            "karpenter.sh/capacity-type": "spot",
            "topology.kubernetes.io/zone": "us-east-1a",
            "topology.k8s.aws/network-node-layer-1": "nn-top",
            "topology.k8s.aws/network-node-layer-2": "nn-spine-1",
            "topology.k8s.aws/network-node-layer-3": "nn-leaf-7",
        },
    )
    cluster.add_node(
        "a3-1",
        {
            **A100_40,
            "cloud.google.com/gke-spot": "false",
            "cloud.google.com/gce-topology-block": "block-a",
            "cloud.google.com/gce-topology-subblock": "sub-3",
        },
    )
    cluster.add_node("eks-1", {**H100, "eks.amazonaws.com/capacityType": "ON_DEMAND"})
    cluster.add_node("aks-1", {**H100, "kubernetes.azure.com/scalesetpriority": "spot"})
    cluster.add_node("reserved-1", {**H100, "karpenter.sh/capacity-type": "reserved"})
    cluster.add_node("cpu-1", {"kubernetes.io/os": "linux"})  # no GPU: not the scheduler's business
    cluster.add_node("t4-1", {"nvidia.com/gpu.product": "Tesla-T4", "nvidia.com/gpu.count": "1"})  # not in catalog

    nodes = {node.name: node for node in gateway.observe().nodes}

    assert sorted(nodes) == ["a3-1", "aks-1", "eks-1", "p5-1", "reserved-1"]
    p5 = nodes["p5-1"]
    assert (p5.gpu_model, p5.gpu_count, p5.interconnect, p5.tier) == ("H100-SXM5-80GB", 8, "nvswitch", "spot")
    assert (p5.zone, p5.spine, p5.leaf) == ("us-east-1a", "nn-spine-1", "nn-spine-1/nn-leaf-7")
    assert p5.schedulable and p5.interruption is None and p5.mig == ((),) * 8
    a3 = nodes["a3-1"]
    assert (a3.gpu_model, a3.tier, a3.spine, a3.leaf) == ("A100-SXM4-40GB", "on-demand", "block-a", "block-a/sub-3")
    assert nodes["eks-1"].tier == "on-demand"
    assert nodes["aks-1"].tier == "spot"
    assert nodes["reserved-1"].tier == "reserved"


def test_mig_layouts_come_from_the_operator_config_and_gfd_counts(cluster, gateway) -> None:
    cluster.add_node(
        "mig-named",
        {
            **H100,
            "nvidia.com/gpu.count": "2",
            "nvidia.com/mig.config": "all-3g.40gb",
            "nvidia.com/mig.config.state": "success",
            "nvidia.com/mig-3g.40gb.count": "4",
        },
    )
    cluster.add_node(
        "mig-counts",  # a hand-made config: the layout is packed from GFD's counts
        {
            **H100,
            "nvidia.com/gpu.count": "2",
            "nvidia.com/mig.config": "custom-x",
            "nvidia.com/mig.config.state": "success",
            "nvidia.com/mig-4g.40gb.count": "1",
            "nvidia.com/mig-3g.40gb.count": "1",
            "nvidia.com/mig-1g.10gb.count": "7",
        },
    )
    cluster.add_node(
        "mig-pending",
        {
            **H100,
            "nvidia.com/gpu.count": "1",
            "nvidia.com/mig.config": "all-balanced",
            "nvidia.com/mig.config.state": "pending",
        },
    )

    nodes = {node.name: node for node in gateway.observe().nodes}

    assert nodes["mig-named"].mig == ((("3g.40gb", 0), ("3g.40gb", 4)),) * 2
    packed = nodes["mig-counts"].mig
    assert packed[0] == (("4g.40gb", 0), ("3g.40gb", 4))
    assert packed[1] == tuple(("1g.10gb", start) for start in range(7))
    pending = nodes["mig-pending"]
    assert pending.mig_status.state == "pending" and not pending.schedulable


def test_cordon_not_ready_and_repelling_taints_close_a_node_but_gpu_and_spot_taints_do_not(cluster, gateway) -> None:
    cluster.add_node("cordoned", H100, unschedulable=True)
    cluster.add_node("not-ready", H100, ready=False)
    cluster.add_node("tainted", H100, taints=[{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}])
    cluster.add_node(
        "gpu-pool",
        {**H100, "kubernetes.azure.com/scalesetpriority": "spot"},
        taints=[
            {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
            {"key": "kubernetes.azure.com/scalesetpriority", "value": "spot", "effect": "NoSchedule"},
            {"key": "soft", "value": "x", "effect": "PreferNoSchedule"},
        ],
    )

    nodes = {node.name: node.schedulable for node in gateway.observe().nodes}

    assert nodes == {"cordoned": False, "not-ready": False, "tainted": False, "gpu-pool": True}


def test_spot_taints_become_interruptions(cluster, gateway) -> None:
    noticed = NOW - 30
    cluster.add_node(
        "spot-1",
        {**H100, "karpenter.sh/capacity-type": "spot"},
        taints=[{"key": "aws-node-termination-handler/spot-itn", "effect": "NoSchedule", "timeAdded": iso(noticed)}],
    )
    cluster.add_node("spot-2", H100)

    nodes = {node.name: node for node in gateway.observe().nodes}
    assert nodes["spot-2"].interruption is None

    cluster.patch_node("spot-2", {"spec": {"taints": [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]}})
    nodes = {node.name: node for node in gateway.observe().nodes}

    itn = nodes["spot-1"].interruption
    assert (itn.source, itn.noticed_at, itn.deadline_at) == ("spot-itn", noticed, noticed + 120)
    assert not nodes["spot-1"].schedulable
    disrupted = nodes["spot-2"].interruption
    assert (disrupted.source, disrupted.noticed_at, disrupted.deadline_at) == ("karpenter-disrupted", NOW, None)
    assert not nodes["spot-2"].schedulable


# -- bind -----------------------------------------------------------------------------------------------------


def test_a_gang_is_created_and_bound_pod_by_pod_with_resources_labels_and_env(cluster, gateway) -> None:
    cluster.add_node("gpu-a", H100, allocatable={"nvidia.com/gpu": "8"})
    gateway.namespace_ensure(namespace="team-nlp", team="nlp")

    gateway.job_bind(request=_gang())

    # Each replica is created, then bound, before the next one is created.
    assert cluster.requests("POST", "/pods") == [
        call
        for r in range(3)
        for call in (
            ("POST", "/api/v1/namespaces/team-nlp/pods"),
            ("POST", f"/api/v1/namespaces/team-nlp/pods/mc-42-{r}/binding"),
        )
    ]
    pods = {p["metadata"]["name"]: p for p in cluster.pods("team-nlp")}
    assert sorted(pods) == ["mc-42-0", "mc-42-1", "mc-42-2"]
    pod = pods["mc-42-1"]
    assert pod["spec"]["schedulerName"] == "microcosm"
    assert pod["spec"]["nodeName"] == "gpu-a"
    assert pod["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "microcosm",
        "microcosm.io/job": "42",
        "microcosm.io/replica": "1",
        "microcosm.io/team": "nlp",
        "microcosm.io/priority": "normal",
    }
    container = pod["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert set(container["resources"]["limits"]) == {"nvidia.com/gpu", "cpu", "memory"}
    assert container["image"] == "ghcr.io/acme/train:1" and container["command"] == ["python", "train.py"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["CHECKPOINT_DIR"] == "/checkpoints/job-42"
    assert env["CHECKPOINT_INTERVAL_S"] == "600"
    assert env["RESUME_FROM"] == "/checkpoints/job-42/step-000000100.ckpt"
    assert env["EPOCHS"] == "3" and env["MICROCOSM_REPLICA"] == "1" and env["MICROCOSM_REPLICAS"] == "3"
    assert json.loads(pod["metadata"]["annotations"]["microcosm.io/devices"]) == [[2, None, None], [3, None, None]]

    job = gateway.observe().jobs["42"]
    assert job.namespace == "team-nlp"
    assert [(r.replica, r.phase, r.node) for r in job.replicas] == [(r, ReplicaPhase.BOUND, "gpu-a") for r in range(3)]
    assert job.replicas[1].devices == (Device(2), Device(3))


def test_mig_replicas_request_the_mixed_strategy_resource(cluster, gateway) -> None:
    cluster.add_node(
        "mig-1",
        {
            **H100,
            "nvidia.com/gpu.count": "1",
            "nvidia.com/mig.config": "all-balanced",
            "nvidia.com/mig.config.state": "success",
            "nvidia.com/mig-1g.10gb.count": "2",
            "nvidia.com/mig-2g.20gb.count": "1",
            "nvidia.com/mig-3g.40gb.count": "1",
        },
    )
    gateway.namespace_ensure(namespace="team-nlp", team="nlp")
    layout = gateway.observe().nodes[0].mig[0]
    start = dict((p, s) for p, s in layout)["3g.40gb"]

    gateway.job_bind(request=_bind_request("7", ReplicaPlacement(0, "mig-1", (Device(0, "3g.40gb", start),))))

    (pod,) = cluster.pods("team-nlp")
    assert set(pod["spec"]["containers"][0]["resources"]["limits"]) == {"nvidia.com/mig-3g.40gb", "cpu", "memory"}
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/mig-3g.40gb"] == "1"
    with pytest.raises(GatewayConflict, match="held by another job"):
        gateway.job_bind(request=_bind_request("8", ReplicaPlacement(0, "mig-1", (Device(0, "3g.40gb", start),))))
    with pytest.raises(GatewayConflict, match="no MIG instance"):
        gateway.job_bind(request=_bind_request("9", ReplicaPlacement(0, "mig-1", (Device(0, "7g.80gb", 0),))))


def test_rebinding_the_same_gang_changes_nothing(cluster, gateway) -> None:
    cluster.add_node("gpu-a", H100)
    gateway.namespace_ensure(namespace="team-nlp", team="nlp")
    gateway.job_bind(request=_gang())
    cluster.clear_log()

    gateway.job_bind(request=_gang())

    assert [m for m, _p in cluster.requests()] == ["GET"]  # one look at the job's pods, nothing written
    assert len(cluster.pods("team-nlp")) == 3


def test_a_crash_between_create_and_bind_is_finished_by_the_next_call(cluster, gateway) -> None:
    cluster.add_node("gpu-a", H100)
    gateway.namespace_ensure(namespace="team-nlp", team="nlp")
    cluster.fail("POST", r"/pods/mc-42-1/binding$", 503, times=4)  # every attempt of the first call
    with pytest.raises(GatewayRetryable):
        gateway.job_bind(request=_gang())
    assert cluster.pods("team-nlp") == []  # undone: no replica runs alone

    gateway.job_bind(request=_gang())

    assert {p["spec"]["nodeName"] for p in cluster.pods("team-nlp")} == {"gpu-a"}


def test_a_partial_failure_removes_every_replica_already_bound(cluster, gateway) -> None:
    cluster.add_node("gpu-a", H100)
    gateway.namespace_ensure(namespace="team-nlp", team="nlp")
    cluster.fail("POST", r"/pods/mc-42-2/binding$", 409)  # the last replica was taken by someone else

    with pytest.raises(GatewayConflict, match="mc-42-2"):
        gateway.job_bind(request=_gang())

    assert cluster.pods("team-nlp") == []
    assert cluster.services("team-nlp") == {}  # the gang's rendezvous Service goes with its pods
    assert len(cluster.requests("POST", "/binding$")) == 3  # replicas 0 and 1 were bound, then undone
    deletes = cluster.requests("DELETE", r"/pods/mc-42-")
    assert sorted(p for _m, p in deletes) == [f"/api/v1/namespaces/team-nlp/pods/mc-42-{r}" for r in range(3)]


def test_binding_refuses_closed_nodes_and_bound_elsewhere_before_touching_anything(cluster, gateway) -> None:
    cluster.add_node("gpu-a", H100)
    cluster.add_node("cordoned", H100, unschedulable=True)
    gateway.namespace_ensure(namespace="team-nlp", team="nlp")

    with pytest.raises(GatewayConflict, match="cordoned"):
        gateway.job_bind(request=_gang("cordoned"))
    with pytest.raises(GatewayConflict, match="not in the cluster"):
        gateway.job_bind(request=_gang("gone-node"))
    with pytest.raises(GatewayConflict, match="does not exist"):
        gateway.job_bind(request=_bind_request("5", ReplicaPlacement(0, "gpu-a", (Device(8),))))
    assert cluster.requests("POST", "/pods") == []

    gateway.job_bind(request=_gang("gpu-a", replicas=1))
    with pytest.raises(GatewayConflict, match="already on gpu-a"):
        gateway.job_bind(request=_bind_request("42", ReplicaPlacement(0, "other", (Device(0), Device(1)))))


def test_binding_respects_what_the_device_plugin_has_left(cluster, gateway) -> None:
    cluster.add_node("gpu-a", H100, allocatable={"nvidia.com/gpu": "8"})
    gateway.namespace_ensure(namespace="team-nlp", team="nlp")
    cluster.add_pod("default", "someone-else", node="gpu-a", resources={"nvidia.com/gpu": "4"})

    with pytest.raises(GatewayConflict, match=r"offers 8 nvidia\.com/gpu, 4 in use"):
        gateway.job_bind(request=_gang("gpu-a", replicas=3))
    gateway.job_bind(request=_gang("gpu-a", replicas=2))


def test_a_job_without_an_image_or_namespace_is_refused(cluster, gateway) -> None:
    cluster.add_node("gpu-a", H100)
    with pytest.raises(GatewayConflict, match="no container image"):
        gateway.job_bind(request=_bind_request("1", ReplicaPlacement(0, "gpu-a", (Device(0),)), image=""))
    with pytest.raises(GatewayConflict, match="namespace team-nlp does not exist"):
        gateway.job_bind(request=_bind_request("1", ReplicaPlacement(0, "gpu-a", (Device(0),))))


def test_namespace_ensure_creates_once_with_the_team_label(cluster, gateway) -> None:
    gateway.namespace_ensure(namespace="team-cv", team="cv")
    gateway.namespace_ensure(namespace="team-cv", team="cv")

    assert cluster.handler.namespaces["team-cv"]["metadata"]["labels"]["microcosm.io/team"] == "cv"
    assert len(cluster.requests("POST", "/api/v1/namespaces$")) == 1


# -- pod phases, eviction, node loss --------------------------------------------------------------------------


def test_pod_phases_map_to_replica_phases(cluster, gateway) -> None:
    cluster.add_node("gpu-a", H100)
    gateway.namespace_ensure(namespace="team-nlp", team="nlp")
    gateway.job_bind(request=_gang(replicas=4))
    cluster.set_pod_phase("team-nlp", "mc-42-0", "Running")
    cluster.set_pod_phase("team-nlp", "mc-42-1", "Succeeded")
    cluster.set_pod_phase(
        "team-nlp",
        "mc-42-2",
        "Failed",
        containerStatuses=[
            {
                "name": "main",
                "image": "ghcr.io/acme/train:1",
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "state": {"terminated": {"exitCode": 3, "reason": "Error"}},
            }
        ],
    )
    cluster.set_pod_phase("team-nlp", "mc-42-3", "Failed", reason="Terminated", message="node shutdown")

    replicas = gateway.observe().jobs["42"].replicas

    assert [r.phase for r in replicas] == [
        ReplicaPhase.RUNNING,
        ReplicaPhase.SUCCEEDED,
        ReplicaPhase.FAILED,
        ReplicaPhase.GONE,
    ]
    assert "exited with code 3" in replicas[2].message


def test_eviction_deletes_with_the_pods_own_grace_and_is_idempotent(cluster, gateway) -> None:
    cluster.add_node("gpu-a", H100)
    gateway.namespace_ensure(namespace="team-nlp", team="nlp")
    gateway.job_bind(request=_gang(replicas=2))

    gateway.job_evict(job="42", namespace="team-nlp", grace_s=45.5, reason="priority")
    gateway.job_evict(job="42", namespace="team-nlp", grace_s=45.5, reason="priority")

    assert cluster.pods("team-nlp") == []
    # 45.5 s is no deadline shorter than the pods' own 30 s: no override is sent (the pods' own grace applies)
    assert [q for _m, _p, q in cluster.handler.log if _m == "DELETE"] == [""] * 2
    assert "42" not in gateway.observe().jobs


def test_deleting_a_node_makes_its_replicas_gone(cluster, gateway) -> None:
    cluster.add_node("spot-1", {**H100, "karpenter.sh/capacity-type": "spot"})
    cluster.add_node("gpu-b", H100)
    gateway.namespace_ensure(namespace="team-nlp", team="nlp")
    gateway.job_bind(
        request=_bind_request(
            "42", ReplicaPlacement(0, "spot-1", (Device(0),)), ReplicaPlacement(1, "gpu-b", (Device(0),))
        )
    )

    cluster.delete_node("spot-1")
    observation = gateway.observe()

    assert [n.name for n in observation.nodes] == ["gpu-b"]
    replicas = observation.jobs["42"].replicas
    assert [(r.phase, r.message) for r in replicas] == [
        (ReplicaPhase.GONE, "node spot-1 is gone"),
        (ReplicaPhase.BOUND, ""),
    ]


# -- API errors -----------------------------------------------------------------------------------------------


def test_5xx_and_429_are_retried_with_backoff_and_retry_after(cluster, gateway, sleeps) -> None:
    cluster.add_node("gpu-a", H100)
    cluster.fail("GET", r"^/api/v1/nodes$", 503, times=2)
    cluster.fail("GET", r"^/api/v1/pods$", 429, headers={"Retry-After": "7"})

    assert [n.name for n in gateway.observe().nodes] == ["gpu-a"]

    assert sleeps == [0.5, 1.0, 7.0]  # exponential backoff, then what the server asked for


def test_exhausted_retries_raise_retryable(cluster, gateway, sleeps) -> None:
    cluster.fail("GET", r"^/api/v1/nodes$", 500, times=10)

    with pytest.raises(GatewayRetryable, match="list nodes failed 4 times"):
        gateway.observe()
    assert sleeps == [0.5, 1.0, 2.0]


def test_a_timeout_is_retried(cluster, gateway, sleeps) -> None:
    cluster.add_node("gpu-a", H100)
    cluster.fail("GET", r"^/api/v1/nodes$", 200, stall_s=2.0)  # longer than the client's 1 s timeout

    assert [n.name for n in gateway.observe().nodes] == ["gpu-a"]
    assert sleeps == [0.5]


def test_forbidden_names_the_rbac_fix(cluster, gateway) -> None:
    cluster.fail("GET", r"^/api/v1/nodes$", 403)

    with pytest.raises(GatewayError, match=r"deploy/rbac\.yaml") as caught:
        gateway.observe()
    assert not isinstance(caught.value, GatewayRetryable | GatewayConflict)


def test_a_create_retried_after_a_lost_answer_is_not_a_conflict(cluster, gateway) -> None:
    cluster.add_node("gpu-a", H100)
    gateway.namespace_ensure(namespace="team-nlp", team="nlp")
    # The first create of replica 0 reaches the server, but its answer is lost: simulated by creating the
    # pod first and letting the gateway's own create meet a 409 AlreadyExists.
    gateway.job_bind(request=_gang(replicas=1))
    (pod,) = cluster.pods("team-nlp")
    cluster.core.delete_namespaced_pod("mc-42-0", "team-nlp")
    body = {k: pod[k] for k in ("apiVersion", "kind", "metadata", "spec")}
    body["spec"] = {k: v for k, v in body["spec"].items() if k != "nodeName"}
    cluster.core.create_namespaced_pod("team-nlp", body)

    gateway.job_bind(request=_gang(replicas=1))

    assert [p["spec"].get("nodeName") for p in cluster.pods("team-nlp")] == ["gpu-a"]
