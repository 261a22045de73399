"""A Dynamic Resource Allocation cluster driven by the scheduling loop, end to end: nodes whose GPUs the
NVIDIA DRA driver and whose EFA interfaces the EFA DRA driver publish (tests/scheduler/kube_harness/dra_driver.py,
efa_dra_driver.py), the drivers' DeviceClasses, the gateway with ``KUBE_DRA`` on reading them (no hand-made device
lookup), and real cycles of the loop: MIG inference, whole-GPU training and a two-node gang over EFA run through
ResourceClaims that the kubelet model accepts, completion deallocates them, a mixed cluster serves both kinds of
node, and dynamic MIG reconfigures a Hopper node from queued demand while an A100 still relabels."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest

from jobs.models import Job, JobEvent
from jobs.services import job_submit
from scheduler.gateways.kube.dra_claims import GPU_CLASS, MIG_CLASS
from scheduler.gateways.kube.dra_mig import LAYOUT_ANNOTATION
from scheduler.gateways.kube.dra_slices import EFA_DEVICE_CLASS
from scheduler.gateways.kube.gateway import KubeGateway
from scheduler.gateways.kube.labels import MIG_CONFIG
from scheduler.gateways.kube.mig import DESIRED, PHASE
from scheduler.loop.apply import Retry
from scheduler.loop.cycle import CycleReport, cycle_run
from scheduler.services.fleet import gpu_models_sync
from scheduler.services.sync import cluster_sync
from tests.scheduler.kube_emulator import H100_ONE_LEAF, Cluster, ManualClock, cluster_fixture
from tests.scheduler.kube_harness.dra_driver import A100
from tests.scheduler.kube_harness.resource_claims import ClaimController, DraKubelet
from tests.scheduler.loop_helpers import team_seed

pytestmark = pytest.mark.django_db
cluster = pytest.fixture(cluster_fixture)
NO_WAIT = Retry(attempts=2, backoff_s=0.0, sleep=lambda _s: None)
LEAF = {"topology.k8s.aws/network-node-layer-2": "nn-spine", "topology.k8s.aws/network-node-layer-3": "nn-leaf"}
STATIC_MIG = [("2g.20gb", 0), ("1g.10gb", 2), ("1g.10gb", 3), ("3g.40gb", 4)]


class Loop:
    """The worker on a DRA cluster (``KUBE_DRA=1``, the default fabric class): inventory sync, then one cycle."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.clock = ManualClock(float(int(time.time())))
        cluster.add_device_classes()
        self.kubelet = DraKubelet(cluster.handler)  # prepares what the nodes' slices publish
        cluster.handler.bind_hooks.append(self.kubelet.on_bind)
        self.gateway = KubeGateway(
            cluster.new_api_client(),
            consistent_reads=True,
            namespace_create=True,
            clock=self.clock,
            sleep=lambda _s: None,
            dra=True,
            dra_fabric_class=EFA_DEVICE_CLASS,
        )

    def cycle(self) -> CycleReport:
        cluster_sync(observation=self.gateway.observe())
        report = cycle_run(gateway=self.gateway, retry=NO_WAIT)
        # A refused bind's reason is in its job's events.
        assert not report.failed and not report.requeued_after_refusal, (report.failed, _events())
        return report

    def until(self, op: str, *, cycles: int = 10, step_s: float = 30.0) -> CycleReport:
        """Cycles, ``step_s`` apart, until one applies ``op`` (the engine acts on demand unmet for its hysteresis)."""
        for _ in range(cycles):
            report = self.cycle()
            if op in report.applied:
                return report
            self.clock.now += step_s
        raise AssertionError(f"no cycle applied {op}")

    def submit(self, team: Any, **spec: Any) -> Job:
        body = {"image": "ghcr.io/acme/run:1", "duration_s": 3600, **spec}
        return job_submit(team=team, spec=body, actor=None, now=datetime.fromtimestamp(self.clock.now, tz=UTC))

    def pods(self, namespace: str, job: Job) -> list[dict[str, Any]]:
        return sorted(
            (p for p in self.cluster.pods(namespace) if p["metadata"]["name"].startswith(f"mc-{job.pk}-")),
            key=lambda p: p["metadata"]["name"],
        )

    def claims(self, namespace: str, job: Job) -> list[dict[str, Any]]:
        return sorted(
            (c for c in self.cluster.resource_claims(namespace) if c["metadata"]["name"].startswith(f"mc-{job.pk}-")),
            key=lambda c: c["metadata"]["name"],
        )


@pytest.fixture
def loop(cluster: Cluster) -> Loop:
    return Loop(cluster)


def _events() -> list[dict[str, Any]]:
    return [e.details for e in JobEvent.objects.order_by("pk")]


def _requests(claim: dict[str, Any]) -> list[tuple[str, int]]:
    return [(r["exactly"]["deviceClassName"], r["exactly"]["count"]) for r in claim["spec"]["devices"]["requests"]]


def _results(claim: dict[str, Any]) -> list[str]:
    return [r["device"] for r in claim["status"]["allocation"]["devices"]["results"]]


def test_mig_inference_whole_gpu_training_and_an_efa_gang_run_through_claims_and_completion_frees_them(
    cluster: Cluster, loop: Loop
) -> None:
    cluster.add_dra_node("dra-mig", LEAF, gpus=1, mig=[STATIC_MIG])
    cluster.add_dra_node("dra-a", LEAF, efa=4)
    cluster.add_dra_node("dra-b", LEAF, efa=4)
    cluster.add_dra_node("dra-c", LEAF, gpus=4)  # too small for a gang replica: the gang must take dra-a and dra-b
    gpu_models_sync()
    team = team_seed(guaranteed=64, burst=64)
    ns = team.namespace

    gang = loop.submit(team, kind="training", gpus=8, replicas=2, gpu_model="H100-SXM5-80GB")
    assert loop.cycle().applied == [f"bind {gang.pk}"]
    training = loop.submit(team, kind="training", gpus=4, gpu_model="H100-SXM5-80GB")
    inference = loop.submit(team, kind="inference", mig_profile="3g.40gb", gpu_model="H100-SXM5-80GB")
    assert sorted(loop.cycle().applied) == sorted([f"bind {training.pk}", f"bind {inference.pk}"])

    # Every pod runs: the kubelet model prepared each claim (reserved for the pod, devices its node's slices publish).
    assert loop.kubelet.refused == []
    for job in (gang, training, inference):
        for pod in loop.pods(ns, job):
            assert pod["status"]["phase"] == "Running", pod["metadata"]["name"]
            assert pod["spec"]["resourceClaims"], pod["metadata"]["name"]
            limits = pod["spec"]["containers"][0]["resources"].get("limits") or {}
            assert not {"nvidia.com/gpu", "vpc.amazonaws.com/efa"} & set(limits)

    # The gang: one replica per EFA node, each claiming its node's 8 GPUs and all 4 EFA interfaces in EKS's class.
    assert {p["spec"]["nodeName"] for p in loop.pods(ns, gang)} == {"dra-a", "dra-b"}
    for claim in loop.claims(ns, gang):
        assert _requests(claim) == [(GPU_CLASS, 1)] * 8 + [(EFA_DEVICE_CLASS, 4)]
        fabric = [r for r in claim["status"]["allocation"]["devices"]["results"] if r["request"] == "fabric"]
        assert len(fabric) == 4 and {r["driver"] for r in fabric} == {"dra.net"}
    # Whole-GPU training: four GPUs of dra-c; MIG inference: the published 3g.40gb instance of dra-mig.
    (claim,) = loop.claims(ns, training)
    assert _requests(claim) == [(GPU_CLASS, 1)] * 4 and _results(claim) == [f"gpu-{i}" for i in range(4)]
    (claim,) = loop.claims(ns, inference)
    assert _requests(claim) == [(MIG_CLASS, 1)] and _results(claim) == ["gpu-0-mig-3g40gb-9-4"]
    assert loop.pods(ns, inference)[0]["spec"]["nodeName"] == "dra-mig"

    # Completion: every pod succeeds, the next cycle completes the jobs and deallocates and deletes their claims.
    for job in (gang, training, inference):
        for pod in loop.pods(ns, job):
            cluster.set_pod_phase(ns, pod["metadata"]["name"], "Succeeded")
    loop.cycle()
    for job in (gang, training, inference):
        job.refresh_from_db()
        assert job.state == "completed"
        assert loop.claims(ns, job) == []
    ClaimController(cluster.handler).sync()  # Kubernetes' own controller finds nothing left to free


def test_a_mixed_cluster_binds_a_device_plugin_node_by_extended_resources_and_a_dra_node_by_claims(
    cluster: Cluster, loop: Loop
) -> None:
    cluster.add_node("plugin-1", H100_ONE_LEAF, allocatable={"nvidia.com/gpu": "8"})
    cluster.add_dra_node("dra-1", LEAF)
    gpu_models_sync()
    team = team_seed(guaranteed=64, burst=64)
    jobs = [loop.submit(team, kind="training", gpus=8, gpu_model="H100-SXM5-80GB") for _ in range(2)]

    assert sorted(loop.cycle().applied) == sorted(f"bind {j.pk}" for j in jobs)

    pods = {p["spec"]["nodeName"]: p for j in jobs for p in loop.pods(team.namespace, j)}
    assert sorted(pods) == ["dra-1", "plugin-1"]
    assert pods["plugin-1"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert not pods["plugin-1"]["spec"].get("resourceClaims")
    assert pods["dra-1"]["spec"]["resourceClaims"] and pods["dra-1"]["status"]["phase"] == "Running"
    assert len(cluster.resource_claims(team.namespace)) == 1  # the DRA node's replica alone has a claim


def test_dynamic_mig_reconfigures_a_hopper_node_from_queued_demand_through_claims(cluster: Cluster, loop: Loop) -> None:
    cluster.add_dra_node("dra-h100", LEAF, gpus=1, dynamic_mig=True)
    gpu_models_sync()
    team = team_seed(guaranteed=8, burst=8)
    jobs = [loop.submit(team, kind="inference", mig_profile="1g.10gb", gpu_model="H100-SXM5-80GB") for _ in range(2)]
    slices_before = cluster.resource_slices()

    # The queued demand needs a layout the node has not got: past its hysteresis the engine reconfigures the idle GPU...
    assert loop.until("mig dra-h100").applied == ["mig dra-h100"]
    node = cluster.node("dra-h100")
    layout = node["metadata"]["annotations"][LAYOUT_ANNOTATION]
    assert "1g.10gb" in layout
    # ... with no relabel, no cordon, no MIG Manager: the layout is kept on the node and the node stays open.
    assert MIG_CONFIG not in (node["metadata"].get("labels") or {}) and not node["spec"].get("unschedulable")
    observed = next(n for n in loop.gateway.observe().nodes if n.name == "dra-h100")
    assert observed.schedulable and any(p == "1g.10gb" for p, _s in observed.mig[0])

    # The next cycles place the jobs in it: their claims allocate 1g.10gb partitions, whose instances the driver makes
    # at prepare; the slices stay as published.
    for _ in range(3):
        if all(loop.pods(team.namespace, j) for j in jobs):
            break
        loop.cycle()
    names = []
    for job in jobs:
        (claim,) = loop.claims(team.namespace, job)
        assert _requests(claim) == [(MIG_CLASS, 1)]
        (selector,) = claim["spec"]["devices"]["requests"][0]["exactly"]["selectors"]
        assert "parentUUID" in selector["cel"]["expression"] and '"1g.10gb"' in selector["cel"]["expression"]
        names += _results(claim)
        (pod,) = loop.pods(team.namespace, job)
        assert pod["status"]["phase"] == "Running"
    assert len(set(names)) == 2 and all(n.startswith("gpu-0-mig-1g10gb-19-") for n in names)
    assert sorted(device for _node, _pod, device in loop.kubelet.created) == sorted(names)
    assert loop.kubelet.refused == []
    strip = ("resourceVersion", "managedFields", "uid", "creationTimestamp", "generation")
    assert [{**s, "metadata": {k: v for k, v in s["metadata"].items() if k not in strip}} for s in slices_before] == [
        {**s, "metadata": {k: v for k, v in s["metadata"].items() if k not in strip}} for s in cluster.resource_slices()
    ]


def test_an_a100_dra_node_without_dynamic_partitions_still_relabels(cluster: Cluster, loop: Loop) -> None:
    # The relabel flow is the GPU Operator's (MIG Manager, GFD's labels: its device plugin is off on a DRA node).
    gfd = {
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
        "nvidia.com/gpu.count": "1",
        "nvidia.com/gpu.memory": "81920",
        "nvidia.com/mig.capable": "true",
        "nvidia.com/mig.strategy": "mixed",
        MIG_CONFIG: "all-disabled",
        "nvidia.com/mig.config.state": "success",
    }
    # The driver runs with DynamicMIG, but an A100 with MIG off is not DynamicMIG-capable: it is published whole.
    cluster.add_dra_node("dra-a100", {**LEAF, **gfd}, gpus=1, board=A100, dynamic_mig=True)
    gpu_models_sync()
    team = team_seed(guaranteed=8, burst=8)
    loop.submit(team, kind="inference", mig_profile="1g.10gb", gpu_model="A100-SXM4-80GB")

    assert loop.until("mig dra-a100").applied == ["mig dra-a100"]
    node = cluster.node("dra-a100")
    assert LAYOUT_ANNOTATION not in (node["metadata"].get("annotations") or {})
    # The relabel flow has begun: its state is on the node; MIG Manager's label follows (scheduler.gateways.kube.mig).
    assert PHASE in node["metadata"]["annotations"] and DESIRED in node["metadata"]["annotations"]
    observed = next(n for n in loop.gateway.observe().nodes if n.name == "dra-a100")
    assert not observed.schedulable and observed.mig_status.state == "pending"


def test_a_mig_enabled_a100_under_dynamic_mig_takes_mig_work_through_claims_the_first_time(
    cluster: Cluster, loop: Loop
) -> None:
    # The driver runs with DynamicMIG and the A100's MIG mode is on: it publishes its partitions and not itself (an
    # A100 cannot turn MIG off without a reset: nvlib.go GetPerGpuAllocatableDevices, isDynamicMIGCapable). Read as
    # MIG-enabled, one instance spanning each GPU, never whole; reconfigured at once, as a Hopper is.
    cluster.add_dra_node("dra-a100", LEAF, gpus=2, board=A100, dynamic_mig=True, mig=[[("7g.80gb", 0)]] * 2)
    gpu_models_sync()
    observed = next(n for n in loop.gateway.observe().nodes if n.name == "dra-a100")
    assert observed.mig == ((("7g.80gb", 0),),) * 2 and observed.reconfiguration == "dynamic-fixed-mode"
    team = team_seed(guaranteed=8, burst=8)
    big = loop.submit(team, kind="inference", mig_profile="7g.80gb", gpu_model="A100-SXM4-80GB")

    # What the GPU offers as read binds at once: the 7g.80gb partition, through its claim, accepted by the kubelet.
    assert loop.cycle().applied == [f"bind {big.pk}"]
    (claim,) = loop.claims(team.namespace, big)
    assert _requests(claim) == [(MIG_CLASS, 1)] and _results(claim)[0].startswith("gpu-")
    assert "-mig-7g80gb-" in _results(claim)[0]

    # Two 1g.10gb jobs: the idle GPU is re-cut (kept on the node, no relabel), and they bind the next cycle.
    small = [loop.submit(team, kind="inference", mig_profile="1g.10gb", gpu_model="A100-SXM4-80GB") for _ in range(2)]
    assert loop.until("mig dra-a100").applied == ["mig dra-a100"]
    node = cluster.node("dra-a100")
    assert MIG_CONFIG not in (node["metadata"].get("labels") or {}) and not node["spec"].get("unschedulable")
    assert "1g.10gb" in node["metadata"]["annotations"][LAYOUT_ANNOTATION]
    report = loop.cycle()
    assert sorted(report.applied) == sorted(f"bind {j.pk}" for j in small)
    for job in small:
        (claim,) = loop.claims(team.namespace, job)
        assert "-mig-1g10gb-" in _results(claim)[0]
        (pod,) = loop.pods(team.namespace, job)
        assert pod["status"]["phase"] == "Running"
    assert loop.kubelet.refused == []
