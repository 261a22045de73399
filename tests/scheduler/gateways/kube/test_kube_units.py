"""The pure parts of the Kubernetes backend (labels, pods, MIG decisions) and its Prometheus reader."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
import yaml

from scheduler.errors import GatewayRetryable
from scheduler.gateways.kube.gateway import KubeGateway
from scheduler.gateways.kube.labels import (
    Taint,
    capacity_tier,
    current_mig,
    gpu_model_of,
    interruption_of,
    mig_counts,
    topology,
)
from scheduler.gateways.kube.mig import Flow, Phase, Step, config_document, config_name, next_step, operator_configs
from scheduler.gateways.kube.mig_flow import MigFlow
from scheduler.gateways.kube.nodes import node_observation
from scheduler.gateways.kube.pods import gpu_requests, mig_resource, pod_manifest, replica_of
from scheduler.gateways.kube.prometheus import PrometheusClient, samples_from
from scheduler.gateways.kube.volumes import secret_token
from scheduler.gateways.protocol import BindRequest, Device, Interruption, ReplicaPhase, ReplicaPlacement
from tests.scheduler.kube_emulator import cluster_fixture

cluster = pytest.fixture(cluster_fixture)


@pytest.mark.parametrize(
    ("product", "memory", "model"),
    [
        ("NVIDIA-H100-80GB-HBM3", "81559", "H100-SXM5-80GB"),
        ("NVIDIA-H100-80GB-HBM3-MIG-1g.10gb", None, "H100-SXM5-80GB"),
        ("NVIDIA-H100-PCIe", "81559", "H100-PCIE-80GB"),
        ("NVIDIA-H100-NVL", "95830", "H100-NVL-94GB"),
        ("NVIDIA-A100-SXM4-40GB", None, "A100-SXM4-40GB"),
        ("NVIDIA-A100-SXM4-80GB-SHARED", None, "A100-SXM4-80GB"),
        ("NVIDIA-A100-80GB-PCIe", None, "A100-PCIE-80GB"),
        ("NVIDIA-H200", "143771", "H200-SXM-141GB"),
        ("Tesla-T4", "15360", None),
        ("NVIDIA-A100-SXM4", None, None),  # two SXM4 sizes and no memory to tell them apart
    ],
)
def test_gpu_products_map_to_catalog_models(product, memory, model) -> None:
    assert gpu_model_of(product, int(memory) if memory else None) == model


@pytest.mark.parametrize(
    ("labels", "tier"),
    [
        ({"karpenter.sh/capacity-type": "spot"}, "spot"),
        ({"karpenter.sh/capacity-type": "reserved"}, "reserved"),
        ({"eks.amazonaws.com/capacityType": "SPOT"}, "spot"),
        ({"eks.amazonaws.com/capacityType": "ON_DEMAND"}, "on-demand"),
        ({"cloud.google.com/gke-spot": "true"}, "spot"),
        ({"cloud.google.com/gke-preemptible": "true"}, "spot"),
        ({"kubernetes.azure.com/scalesetpriority": "spot"}, "spot"),
        ({"kubernetes.azure.com/scalesetpriority": "regular"}, "on-demand"),
        ({}, "on-demand"),
    ],
)
def test_capacity_tiers(labels, tier) -> None:
    assert capacity_tier(labels) == tier


def test_topology_takes_the_lowest_two_levels_present() -> None:
    four = {f"topology.k8s.aws/network-node-layer-{i}": f"nn-{i}" for i in range(1, 5)}
    assert topology(four) == ("", "nn-3", "nn-3/nn-4")
    assert topology({"topology.k8s.aws/network-node-layer-1": "nn-1"}) == ("", "", "nn-1")
    assert topology({"rack": "r1", "row": "w"}, keys=("row", "rack")) == ("", "w", "w/r1")


def test_interruption_picks_the_earliest_notice() -> None:
    taints = [
        Taint("karpenter.sh/disrupted", "", "NoSchedule", 200.0),
        Taint("aws-node-termination-handler/spot-itn", "", "NoSchedule", 100.0),
        Taint("nvidia.com/gpu", "present", "NoSchedule"),
    ]
    notice = interruption_of(taints, now=300.0)
    assert (notice.source, notice.deadline_at) == ("spot-itn", 220.0)
    assert interruption_of(taints[2:], now=300.0) is None


H100_SPOT = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"}


def _node_with(conditions: list[dict[str, str]], labels: dict[str, str]) -> dict[str, object]:
    return {
        "metadata": {"name": "n", "labels": {**H100_SPOT, **labels}},
        "spec": {},
        "status": {"conditions": conditions, "allocatable": {"nvidia.com/gpu": "8"}},
    }


def test_a_gke_spot_node_shutting_down_is_a_notice_whose_deadline_is_the_kubelet_s_budget() -> None:
    """The kubelet's graceful node shutdown, as it writes the node: Ready False, reason KubeletNotReady, the shutdown
    manager's "node is shutting down" as the message (kubernetes pkg/kubelet/nodestatus/setters.go,
    pkg/kubelet/nodeshutdown). GKE gives ordinary pods 15 s of a spot VM's 30 (GKE docs, Spot VMs)."""
    shutting = {
        "type": "Ready",
        "status": "False",
        "reason": "KubeletNotReady",
        "message": "node is shutting down",
        "lastTransitionTime": "2026-12-05T05:00:00Z",
    }
    raw = _node_with([shutting], {"cloud.google.com/gke-spot": "true"})
    observed = node_observation(raw, now=1e10, topology_labels=(), mig_config_timeout_s=900.0)
    assert observed is not None and observed.interruption is not None
    since = 1796446800.0  # 2026-12-05T05:00:00Z
    assert (observed.interruption.source, observed.interruption.noticed_at) == ("node-shutdown", since)
    assert observed.interruption.deadline_at == since + 15.0
    longer = node_observation(raw, now=1e10, topology_labels=(), mig_config_timeout_s=900.0, shutdown_grace_s=110.0)
    assert longer is not None and longer.interruption is not None and longer.interruption.deadline_at == since + 110.0
    # A node NotReady for another reason is no notice: it may come back.
    other = _node_with([{**shutting, "message": "container runtime is down"}], {"cloud.google.com/gke-spot": "true"})
    assert node_observation(other, now=1e10, topology_labels=(), mig_config_timeout_s=900.0).interruption is None


def _preempt(message: str, since: str = "2026-12-05T05:00:00Z") -> dict[str, str]:
    """The condition AKS's Node Problem Detector sets for an Azure Preempt event, as Azure's Karpenter provider
    reads it (Azure/karpenter-provider-azure pkg/controllers/node/interruption and its tests)."""
    return {
        "type": "PreemptionScheduled",
        "status": "True",
        "reason": "SpotEvictionIncoming",
        "message": message,
        "lastTransitionTime": since,
    }


READY = {"type": "Ready", "status": "True", "reason": "KubeletReady"}
AKS_SPOT = {"kubernetes.azure.com/scalesetpriority": "spot"}
SINCE = 1796446800.0  # 2026-12-05T05:00:00Z


@pytest.mark.parametrize(
    ("message", "deadline"),
    [
        # NotBefore, as the NPD forwards it (RFC 1123, GMT; a one-digit day is allowed).
        (
            "Preempt Scheduled: Sat, 05 Dec 2026 05:00:38 GMT. For more information, see "
            "https://aka.ms/aks-spot-eviction. EventId: A1B2C3D4-E5F6-4A7B-8C9D-0E1F2A3B4C5D",
            SINCE + 38,
        ),
        ("Preempt Scheduled: Sat, 5 Dec 2026 05:00:13 GMT. EventId: X", SINCE + 13),
        ("Preempt Started. EventId: X", SINCE),  # already under way: now
        ("Preempt Scheduled: soon. EventId: not-a-guid", SINCE + 30),  # unreadable: Azure's minimum for Preempt
        ("", SINCE + 30),
    ],
)
def test_an_aks_spot_preemption_is_a_notice_with_azure_s_not_before(message: str, deadline: float) -> None:
    raw = _node_with([READY, _preempt(message)], AKS_SPOT)
    observed = node_observation(raw, now=1e10, topology_labels=(), mig_config_timeout_s=900.0)
    assert observed is not None and not observed.schedulable
    assert observed.interruption == Interruption(SINCE, deadline, "azure-preempt")


def test_aks_conditions_that_reclaim_nothing_are_no_notice() -> None:
    """The advisory rebalance recommendation, a condition not True, and VMEventScheduled, which also covers a
    Freeze of a few seconds, a Reboot or a Redeploy (Azure/karpenter-provider-azure ignores it likewise)."""
    advisory = _preempt("SpotRebalanceRecommendation Advisory. EventId: X")
    withdrawn = {**_preempt("Preempt Scheduled: Sat, 05 Dec 2026 05:00:38 GMT."), "status": "False"}
    freeze = {"type": "VMEventScheduled", "status": "True", "reason": "VMEventScheduled", "message": "Freeze Scheduled"}
    for condition in (advisory, withdrawn, freeze):
        raw = _node_with([READY, condition], AKS_SPOT)
        assert node_observation(raw, now=1e10, topology_labels=(), mig_config_timeout_s=900.0).interruption is None


def test_mig_counts_read_me_profiles_and_ignore_junk() -> None:
    labels = {
        "nvidia.com/mig-1g.10gb.me.count": "1",
        "nvidia.com/mig-2g.20gb.count": "x",
        "nvidia.com/mig-3g.40gb.count": "0",
    }
    assert mig_counts(labels) == {"1g.10gb+me": 1}


def test_a_damaged_annotation_falls_back_to_the_labels() -> None:
    labels = {"nvidia.com/mig.config": "all-7g.80gb", "nvidia.com/mig-7g.80gb.count": "1"}
    annotations = {"microcosm.io/mig-layouts": '[[["3g.40gb", 1]]]'}  # an illegal start
    assert current_mig("H100-SXM5-80GB", 1, labels, annotations) == ((("7g.80gb", 0),),)


def test_the_config_name_depends_on_counts_not_starts() -> None:
    assert config_name(((("1g.10gb", 0),),)) == config_name(((("1g.10gb", 6),),))
    assert config_name(((("1g.10gb", 0),),)) != config_name(((("2g.20gb", 0),),))


def test_the_config_document_keeps_what_nodes_use_and_hand_made_entries() -> None:
    old = config_name(((("7g.80gb", 0),),))
    stale = config_name(((("2g.20gb", 0),),))
    existing = yaml.safe_dump(
        {"version": "v1", "mig-configs": {old: [], stale: [], "custom": [{"devices": "all", "mig-enabled": False}]}}
    )
    new = config_name(((("3g.40gb", 4),),))
    configs = yaml.safe_load(config_document(existing, new, ((("3g.40gb", 4),),), keep={old}))["mig-configs"]
    assert set(configs) == {old, new, "custom"} | set(operator_configs())


def test_next_step_rules() -> None:
    flow = Flow(Phase.APPLYING, ((("7g.80gb", 0),),), "microcosm-x", since=0.0)
    done = {
        "nvidia.com/mig.config": "microcosm-x",
        "nvidia.com/mig.config.state": "success",
        "nvidia.com/mig-7g.80gb.count": "1",
    }
    assert next_step(flow, done, gpu_pods_left=0, now=10, timeout_s=100, propagation_s=0) == Step.SUCCEED
    paused = {**done, "nvidia.com/gpu.deploy.dcgm": "paused-for-mig-change"}
    assert next_step(flow, paused, gpu_pods_left=0, now=10, timeout_s=100, propagation_s=0) == Step.WAIT
    pending = {**done, "nvidia.com/mig.config.state": "pending"}
    assert next_step(flow, pending, gpu_pods_left=0, now=101, timeout_s=100, propagation_s=0) == Step.RECOVER
    spent = Flow(Phase.APPLYING, flow.desired, flow.config, 0.0, recoveries=2)
    assert next_step(spent, pending, gpu_pods_left=0, now=101, timeout_s=100, propagation_s=0) == Step.FAIL
    draining = Flow(Phase.DRAINING, flow.desired, flow.config, 0.0)
    assert next_step(draining, {}, gpu_pods_left=1, now=50, timeout_s=100, propagation_s=0) == Step.WAIT
    assert next_step(draining, {}, gpu_pods_left=0, now=50, timeout_s=100, propagation_s=0) == Step.RELABEL


def test_pods_request_mixed_strategy_names_and_count_init_containers() -> None:
    assert mig_resource("1g.10gb+me") == "nvidia.com/mig-1g.10gb.me"
    request = BindRequest(job="3", namespace="ns", name="n", placements=(), image="i")
    placement = ReplicaPlacement(0, "n1", (Device(0, "1g.10gb+me", 0), Device(1)))
    pod = pod_manifest(request, placement, team="", image="i", grace_s=5)
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {
        "nvidia.com/gpu": "1",
        "nvidia.com/mig-1g.10gb.me": "1",
    }
    assert "microcosm.io/team" not in pod["metadata"]["labels"]
    pod["spec"]["initContainers"] = [{"resources": {"limits": {"nvidia.com/gpu": "3"}}}]
    assert gpu_requests(pod) == {"nvidia.com/gpu": 3, "nvidia.com/mig-1g.10gb.me": 1}


def _pod(node: str | None, phase: str, *, deleting: bool) -> dict:
    meta = {
        "labels": {"microcosm.io/replica": "0"},
        **({"deletionTimestamp": "2027-01-15T08:00:00Z"} if deleting else {}),
    }
    return {"metadata": meta, "spec": {"nodeName": node} if node else {}, "status": {"phase": phase}}


@pytest.mark.parametrize(
    ("node", "phase", "seen"),
    [
        ("gpu-a", "Running", ReplicaPhase.STOPPING),  # SIGTERM sent, inside its grace: it may be checkpointing
        ("gpu-a", "Pending", ReplicaPhase.STOPPING),  # bound, its container still starting: the kubelet stops it
        ("gpu-a", "Unknown", ReplicaPhase.STOPPING),
        ("gpu-a", "Succeeded", ReplicaPhase.GONE),  # stopped: exit 0 after SIGTERM is not the work done
        ("gpu-a", "Failed", ReplicaPhase.GONE),  # nor is a non-zero exit a failure of the work
        (None, "Pending", ReplicaPhase.GONE),  # never bound: nothing runs that could save anything
        ("gone-node", "Running", ReplicaPhase.GONE),  # its node is gone: so is the process
    ],
)
def test_a_pod_being_deleted_is_stopping_while_its_process_may_still_save(node, phase, seen) -> None:
    assert replica_of(_pod(node, phase, deleting=True), {"gpu-a"}).phase == seen


def test_a_damaged_report_secret_holds_no_token() -> None:
    assert secret_token({"data": {"token": "bWNqLjEuYWJj"}}) == "mcj.1.abc"
    assert secret_token({"data": {"token": "not base64!"}}) is None
    assert secret_token({"data": {"token": "//79"}}) is None  # bytes that are not text
    assert secret_token({"data": {}}) is None and secret_token({}) is None


# -- Prometheus ------------------------------------------------------------------------------------------------


def _series(metric: str, value: str, **labels: str) -> dict:
    return {"metric": {"__name__": metric, **labels}, "value": [1.0, value]}


def test_mig_series_are_keyed_by_uuid_and_instance_and_replace_the_parent() -> None:
    active = [
        _series("a", "0.5", Hostname="n1", UUID="GPU-1", GPU_I_ID="1", GPU_I_PROFILE="3g.40gb"),
        _series("a", "0.25", Hostname="n1", UUID="GPU-1", GPU_I_ID="2", GPU_I_PROFILE="3g.40gb"),
        _series("a", "0.9", Hostname="n1", UUID="GPU-1"),  # the parent GPU: would count twice
        _series("a", "0.8", hostname="n1", UUID="GPU-2"),
        _series("a", "NaN", hostname="n1", UUID="GPU-3"),
        _series("a", "0.1", UUID="GPU-4"),  # no node: cannot be attributed
    ]
    memory = [_series("m", "1024", Hostname="n1", UUID="GPU-1", GPU_I_ID="2")]
    samples = samples_from(active, memory)
    assert [(s.uuid, s.instance, s.engine_active, s.memory_used_mib) for s in samples] == [
        ("GPU-1", "1", 0.5, None),
        ("GPU-1", "2", 0.25, 1024.0),
        ("GPU-2", None, 0.8, None),
    ]


class _Prometheus(BaseHTTPRequestHandler):
    answers: dict[str, list] = {}
    status = "success"

    def do_GET(self) -> None:
        query = self.path.split("query=", 1)[1]
        metric = "DCGM_FI_PROF_GR_ENGINE_ACTIVE" if "GR_ENGINE" in query else "DCGM_FI_DEV_FB_USED"
        body = {"status": self.status, "data": {"resultType": "vector", "result": self.answers.get(metric, [])}}
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def prometheus():
    server = HTTPServer(("127.0.0.1", 0), _Prometheus)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    _Prometheus.answers = {}
    _Prometheus.status = "success"


def test_utilization_weighs_mig_instances_by_compute_share(cluster, prometheus) -> None:
    cluster.add_node(
        "h100-1",
        {
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
            "nvidia.com/gpu.count": "2",
            "nvidia.com/mig.capable": "true",
            "nvidia.com/mig.config": "all-3g.40gb",
            "nvidia.com/mig.config.state": "success",
            "nvidia.com/mig-3g.40gb.count": "4",
        },
    )
    _Prometheus.answers = {
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": [
            _series("a", "1.0", Hostname="h100-1", UUID="GPU-1", GPU_I_ID="1", GPU_I_PROFILE="3g.40gb"),
            _series("a", "0.5", Hostname="h100-1", UUID="GPU-2", GPU_I_ID="1", GPU_I_PROFILE="3g.40gb"),
        ]
    }
    gateway = KubeGateway(
        cluster.new_api_client(), namespace_create=True, prometheus_url=prometheus, default_image="img"
    )
    gateway.namespace_ensure(namespace="ns", team="t")
    gateway.job_bind(
        request=BindRequest(
            job="1", namespace="ns", name="n", placements=(ReplicaPlacement(0, "h100-1", (Device(0, "3g.40gb", 0),)),)
        )
    )

    (reading,) = gateway.utilization()

    assert (reading.node, reading.gpu_class, reading.gpus) == ("h100-1", "H100", 2.0)
    assert reading.allocated_gpus == round(3 / 7, 6)  # one bound 3g instance
    assert reading.busy_ratio == round((1.0 * 3 / 7 + 0.5 * 3 / 7) / 2, 6)


def test_no_prometheus_means_no_readings_and_a_broken_one_is_retryable(cluster, prometheus) -> None:
    assert KubeGateway(cluster.new_api_client(), namespace_create=True).utilization() == ()
    _Prometheus.status = "error"
    with pytest.raises(GatewayRetryable, match="refused"):
        PrometheusClient(prometheus).gpu_samples(60)
    with pytest.raises(GatewayRetryable, match="did not answer"):
        PrometheusClient("http://127.0.0.1:9", timeout_s=1).query("up")


class _NodeApiStub:
    """The MIG flow's whole view of the cluster: the NodeApi methods, recording every write."""

    def __init__(self, nodes: list[dict]) -> None:
        self._nodes = nodes
        self.writes: list[tuple[str, object]] = []

    def nodes(self) -> list[dict]:
        return self._nodes

    def node_read(self, node: str) -> dict:
        return next(raw for raw in self._nodes if raw["metadata"]["name"] == node)

    def node_patch(self, node: str, body) -> None:
        self.writes.append(("patch", node))

    def pods_on(self, node: str) -> list[dict]:
        return []

    def mig_managers(self, node: str) -> list[dict]:
        return []

    def pod_delete(self, pod, *, grace_s: float) -> None:
        self.writes.append(("delete", pod))

    def pod_evict(self, pod, *, grace_s: int) -> None:
        self.writes.append(("evict", pod))

    def mig_config_write(self, name: str, layouts, *, also_keep: set[str], now: float) -> float:
        self.writes.append(("config", name))
        return 0.0  # a name there long ago: no propagation to wait for


def test_the_mig_flow_needs_only_its_small_api() -> None:
    """A MIG reconfiguration on an idle node runs through a stub of NodeApi, no API server: config, cordon, relabel."""
    labels = {
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
        "nvidia.com/gpu.memory": "81920",
        "nvidia.com/gpu.count": "1",
        "nvidia.com/mig.capable": "true",
        "nvidia.com/mig.config.state": "success",
    }
    api = _NodeApiStub([{"metadata": {"name": "n1", "labels": labels, "annotations": {}}, "spec": {}}])
    flow = MigFlow(api, clock=lambda: 1000.0, timeout_s=900.0, eviction_grace_s=30)
    flow.apply(node="n1", layouts=((("3g.40gb", 0), ("3g.40gb", 4)),))
    assert [kind for kind, _ in api.writes] == ["config", "patch", "patch"]  # config; cordon; relabel (drained)
    assert flow.watch() == ()  # the stub's node never changes, so there is nothing to move on
