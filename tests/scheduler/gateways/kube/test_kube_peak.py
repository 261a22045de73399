"""A peak in the test cluster grows and shrinks on-demand capacity through each autoscaler, end to end through the
scheduling loop: the reserved node is full → a peak of jobs is submitted → the engine asks an
autoscaled pool for nodes (scheduler.loop.provisioning records and applies each node request) → the emulated
Cluster Autoscaler (a ProvisioningRequest) or Karpenter (placeholder pods) brings the nodes → the jobs bind there →
they finish → the nodes stand empty for ``Policy.release_idle_s`` → the loop releases them → the autoscaler removes
them, and the ledger bills each from its request to its release. And a stockout: the request waits with the Cluster
Autoscaler's words until the loop's timeout withdraws it.

The autoscalers are tests/scheduler/kube_harness/cluster_autoscaler.py and karpenter.py (each behaviour citing the
upstream file it follows); each test steps them on the gateway's manual clock between the loop's cycles, and syncs
the inventory before each cycle as the worker's housekeeping does (scheduler/management/commands/scheduler.py)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from billing.capacity import capacity_lines, node_lives
from billing.intervals import money
from billing.periods import Period
from billing.services.ledger import price_book_load
from jobs.models import Job
from jobs.services import job_submit
from scheduler.autoscaled import BEST_EFFORT_ATOMIC, AutoscaledPool, Autoscaler, NodeRequest, NodeRequestStatus
from scheduler.core.model.policy import Policy
from scheduler.gateways.kube.gateway import KubeGateway
from scheduler.gateways.kube.provisioning import CONSUME_ANNOTATION, DO_NOT_DISRUPT
from scheduler.loop.apply import Retry
from scheduler.loop.cycle import CycleReport, cycle_run
from scheduler.models import GpuModel, Node
from scheduler.services.fleet import gpu_models_sync
from scheduler.services.sync import cluster_sync
from tests.scheduler.kube_emulator import H100_ONE_LEAF, Cluster, ManualClock, cluster_fixture
from tests.scheduler.kube_harness.cluster_autoscaler import ClusterAutoscaler, NodeGroup
from tests.scheduler.kube_harness.karpenter import Karpenter, NodePool
from tests.scheduler.loop_helpers import team_seed

pytestmark = pytest.mark.django_db
cluster = pytest.fixture(cluster_fixture)
NO_WAIT = Retry(attempts=2, backoff_s=0.0, sleep=lambda _s: None)
POOL = "h100-od"
PRICE = Decimal("4.0000")
GPUS = 8
TIMEOUT_S = 1800.0  # SCHEDULER["node_request_timeout_s"]'s default
MICRO = Decimal("0.000001")
LONG_S = 10_000_000  # the reserved node's job never ends while a test runs


@dataclass
class Autoscaled:
    """One emulated autoscaler and what the loop must see of it."""

    kind: str  # Autoscaler value
    label: str  # the label its nodes carry, naming the pool
    step: Any  # the autoscaler's loop, at an instant

    @property
    def selector(self) -> dict[str, str]:
        return {self.label: POOL}


def _cluster_autoscaler(cluster: Cluster, **group: Any) -> tuple[Autoscaled, ClusterAutoscaler]:
    label = "cloud.google.com/gke-nodepool"
    ca = ClusterAutoscaler(cluster, [NodeGroup(POOL, {**H100_ONE_LEAF, label: POOL}, boot_s=300.0, **group)])
    return Autoscaled(Autoscaler.CLUSTER_AUTOSCALER, label, ca.step), ca


def _karpenter(cluster: Cluster) -> tuple[Autoscaled, Karpenter]:
    # consolidateAfter: Never, so the loop's idle time governs and its release (the NodeClaim deleted) removes the
    # nodes; a shorter one lets Karpenter remove them first (docs/deploy.md, Karpenter).
    karpenter = Karpenter(cluster, [NodePool(POOL, dict(H100_ONE_LEAF), consolidate_after_s=None)])
    return Autoscaled(Autoscaler.KARPENTER, "karpenter.sh/nodepool", karpenter.step), karpenter


class Loop:
    """The worker: the inventory synced, then one cycle, at the gateway's clock."""

    def __init__(self, cluster: Cluster, clock: ManualClock, *, node_requests: bool) -> None:
        self.cluster = cluster
        self.clock = clock
        self.gateway = KubeGateway(
            cluster.new_api_client(),
            consistent_reads=True,
            namespace_create=True,
            clock=clock,
            sleep=lambda _s: None,
            node_requests=node_requests,
        )

    def cycle(self) -> CycleReport:
        cluster_sync(observation=self.gateway.observe())
        return cycle_run(gateway=self.gateway, retry=NO_WAIT)

    @property
    def at(self) -> datetime:
        return datetime.fromtimestamp(self.clock.now, tz=UTC)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(float(int(time.time())))


@pytest.fixture
def loop(cluster: Cluster, clock: ManualClock, settings: Any) -> Loop:
    settings.KUBERNETES = {**settings.KUBERNETES, "node_requests": True}  # KUBE_NODE_REQUESTS=1
    return Loop(cluster, clock, node_requests=settings.KUBERNETES["node_requests"])


def _seed(loop: Loop, autoscaled: Autoscaled, *, max_nodes: int = 4) -> Any:
    """A reserved node full with a long job of the team, and the autoscaled pool the engine may ask."""
    loop.cluster.add_node(
        "h100-res-1",
        {**H100_ONE_LEAF, "karpenter.sh/capacity-type": "reserved"},
        allocatable={"nvidia.com/gpu": str(GPUS)},
    )
    gpu_models_sync()
    cluster_sync(observation=loop.gateway.observe())
    team = team_seed(guaranteed=100, burst=100)
    base = _submit(loop, team, "base", gpus=8, duration_s=LONG_S)
    assert loop.cycle().applied == [f"bind {base.pk}"]
    (pod,) = loop.cluster.pods(team.namespace)
    loop.cluster.set_pod_phase(team.namespace, pod["metadata"]["name"], "Running")
    pool = AutoscaledPool(
        name=POOL,
        autoscaler=autoscaled.kind,
        provisioning_class=BEST_EFFORT_ATOMIC if autoscaled.kind == Autoscaler.CLUSTER_AUTOSCALER else "",
        node_selector=autoscaled.selector,
        gpu_model=GpuModel.objects.get(pk=Node.objects.get(name="h100-res-1").gpu_model_id),
        gpus_per_node=GPUS,
        placement_group=True,
        price_per_gpu_hour=PRICE,
        max_nodes=max_nodes,
        arrival_s=300.0,
    )
    pool.full_clean()
    pool.save()
    return team


def _submit(loop: Loop, team: Any, name: str, *, gpus: int, replicas: int = 1, duration_s: int = 600) -> Job:
    spec = {
        "kind": "training",
        "name": name,
        "gpus": gpus,
        "replicas": replicas,
        "image": "ghcr.io/acme/train:1",
        "duration_s": duration_s,
    }
    return job_submit(team=team, spec=spec, actor=None, now=loop.at)


def _step(loop: Loop, autoscaled: Autoscaled, seconds: float, *, every: float = 10.0) -> None:
    """Time passes: the autoscaler runs its loop every ``every`` seconds (the CA's --scan-interval; Karpenter's
    controllers), the scheduler's cycles are the test's to run."""
    end = loop.clock.now + seconds
    while loop.clock.now < end:
        loop.clock.now = min(end, loop.clock.now + every)
        autoscaled.step(loop.clock.now)


def _our_pods(loop: Loop, namespace: str) -> list[dict[str, Any]]:
    return [
        p
        for p in loop.cluster.pods(namespace)
        if p["metadata"]["name"].startswith("mc-") and "-nr-" not in p["metadata"]["name"]
    ]


@pytest.mark.parametrize("which", ["cluster-autoscaler", "karpenter"])
def test_a_peak_grows_on_demand_capacity_is_served_there_and_the_nodes_are_released_and_billed_exactly(
    cluster, clock, loop, which
) -> None:
    autoscaled, emulated = (_cluster_autoscaler if which == "cluster-autoscaler" else _karpenter)(cluster)
    team = _seed(loop, autoscaled)

    # The peak: a gang of two whole nodes and three 1-GPU jobs; the reserved node is full for good.
    gang = _submit(loop, team, "gang", gpus=8, replicas=2)
    singles = [_submit(loop, team, f"single-{i}", gpus=1) for i in range(3)]
    peak = [gang, *singles]
    report = loop.cycle()

    rows = list(NodeRequest.objects.order_by("pk"))
    # The gang asks two nodes of one placement group; the first 1-GPU job one node, whose spare GPUs the other two
    # wait for (docs/scheduling-rules.md §9, rule 2).
    assert [(r.job_id, r.nodes, r.placement_group) for r in rows] == [(gang.pk, 2, True), (singles[0].pk, 1, False)]
    assert {r.state for r in rows} == {NodeRequestStatus.PENDING}
    assert {f"node request {r.pk}" for r in rows} <= {a.split(" (")[0] for a in report.applied}, report.failed
    requested_at = {r.pk: r.requested_at for r in rows}
    if which == "cluster-autoscaler":  # one ProvisioningRequest a request, its pod set a node each
        counts = {pr["metadata"]["name"]: pr["spec"]["podSets"][0]["count"] for pr in _prs(cluster, team.namespace)}
        assert counts == {f"mc-nr-{rows[0].pk}": 2, f"mc-nr-{rows[1].pk}": 1}
    else:  # a placeholder pod a node, for kube-scheduler to find unschedulable and Karpenter to provision for
        held = [p for p in cluster.pods(team.namespace) if "-nr-" in p["metadata"]["name"]]
        assert sorted(p["metadata"]["name"] for p in held) == sorted(
            [f"mc-nr-{rows[0].pk}-0", f"mc-nr-{rows[0].pk}-1", f"mc-nr-{rows[1].pk}-0"]
        )
    assert set(requested_at.values()) == {loop.at}
    for job in peak:
        job.refresh_from_db()
        assert job.state == "pending" and POOL in job.state_reason, (job.pk, job.state_reason)

    # The autoscaler brings the nodes; the loop's cycles meanwhile ask nothing more.
    for _ in range(40):
        _step(loop, autoscaled, 30.0)
        report = loop.cycle()
        assert not report.decisions.get("provisions"), report.decisions
        if any(f"bind {gang.pk}" == a for a in report.applied):
            break
    else:
        pytest.fail(f"the gang never bound: {[(r.state, r.message) for r in NodeRequest.objects.all()]}")
    bound_at = loop.at
    report = loop.cycle()  # the singles bind on the spare GPUs, if not in the same cycle already
    new_nodes = sorted(Node.objects.filter(pool=POOL).values_list("name", flat=True))
    assert len(new_nodes) == 3
    for job in peak:
        job.refresh_from_db()
        assert job.state == "running", (job.pk, job.state, job.state_reason)
    pods = _our_pods(loop, team.namespace)
    on_new = [p for p in pods if p["spec"].get("nodeName") in new_nodes]
    assert len(on_new) == 5  # the gang's two replicas and the three singles
    if which == "cluster-autoscaler":
        gang_pods = [p for p in on_new if p["metadata"]["name"].startswith(f"mc-{gang.pk}-")]
        assert {p["metadata"]["annotations"].get(CONSUME_ANNOTATION) for p in gang_pods} == {f"mc-nr-{rows[0].pk}"}
    else:
        assert {p["metadata"]["annotations"].get(DO_NOT_DISRUPT) for p in on_new} == {"true"}
    for row in NodeRequest.objects.all():
        assert row.state == NodeRequestStatus.FULFILLED, (row.pk, row.state, row.message)
        assert len(row.node_names) == row.nodes
    linked = dict(Node.objects.filter(pool=POOL).values_list("name", "node_request_id"))
    assert sorted(linked) == new_nodes and set(linked.values()) == set(requested_at)

    # The peak ends: every pod of it succeeds.
    for pod in on_new:
        loop.cluster.set_pod_phase(team.namespace, pod["metadata"]["name"], "Succeeded")
    loop.cycle()
    for job in peak:
        job.refresh_from_db()
        assert job.state == "completed"
    ended = loop.at

    # Empty for release_idle_s: the loop releases the nodes, the autoscaler removes them.
    idle_s = Policy().release_idle_s
    released: datetime | None = None
    for _ in range(60):
        _step(loop, autoscaled, 30.0)
        report = loop.cycle()
        if report.decisions.get("releases"):
            released = loop.at
            assert sorted(r["node"] for r in report.decisions["releases"]) == new_nodes
            break
    assert released is not None and released - ended >= timedelta(seconds=idle_s)
    for name in new_nodes:
        assert cluster.node(name)["spec"]["unschedulable"] is True
    _step(loop, autoscaled, 660.0)  # the CA's --scale-down-unneeded-time; Karpenter's finalizer at once
    loop.cycle()
    assert sorted(emulated.removed) == new_nodes
    assert not {n.name for n in loop.gateway.observe().nodes} & set(new_nodes)
    assert set(Node.objects.filter(name__in=new_nodes).values_list("state", flat=True)) == {"gone"}
    assert loop.gateway.observe().node_requests == ()  # every request object withdrawn
    assert _prs(cluster, team.namespace) == [] and not [p for p in cluster.pods() if "-nr-" in p["metadata"]["name"]]
    if which == "karpenter":  # the release deleted the NodeClaims; their finalizer drained and removed the nodes
        assert cluster.custom.list_cluster_custom_object("karpenter.sh", "v1", "nodeclaims")["items"] == []
    assert {r.state for r in NodeRequest.objects.all()} == {NodeRequestStatus.FULFILLED}

    # Billed from each node's request to its release, at the pool's price: nothing before, nothing after.
    lives = [life for life in node_lives() if life.tier == "on-demand"]
    by_request = {r.pk: r for r in NodeRequest.objects.all()}
    assert sorted((life.registered_at, life.gone_at) for life in lives) == sorted(
        (by_request[linked[name]].requested_at, released) for name in new_nodes
    )
    start, as_of = min(requested_at.values()) - timedelta(hours=1), released + timedelta(hours=2)
    period = Period(month=start.date(), start=start, end=as_of, as_of=as_of)
    (line,) = [
        line
        for (model, tier), line in capacity_lines(period=period, lives=lives, prices=price_book_load()).items()
        if tier == "on-demand"
    ]
    # Each node's hours are rounded to the micro-GPU-hour on their own (billing.capacity).
    gpu_hours = [
        (Decimal((released - by_request[linked[name]].requested_at).total_seconds()) / 3600 * GPUS).quantize(MICRO)
        for name in new_nodes
    ]
    assert line.capacity_gpu_hours == sum(gpu_hours)
    assert line.paid_cost == sum(money(hours, PRICE) for hours in gpu_hours)  # at the pool's price
    assert bound_at > min(requested_at.values())


def test_a_stockout_says_so_and_the_loops_timeout_withdraws_the_provisioning_request(cluster, clock, loop) -> None:
    autoscaled, _ca = _cluster_autoscaler(cluster, stockout=True)
    team = _seed(loop, autoscaled)
    job = _submit(loop, team, "peak", gpus=8)
    loop.cycle()
    (row,) = NodeRequest.objects.all()
    name = f"mc-nr-{row.pk}"
    assert [pr["metadata"]["name"] for pr in _prs(cluster, team.namespace)] == [name]

    _step(loop, autoscaled, 10.0)
    loop.cycle()
    job.refresh_from_db()
    row.refresh_from_db()
    said = "CapacityIsNotFound: Capacity is not found, CA will try to find it later."
    assert (row.state, row.message) == (NodeRequestStatus.PENDING, said)
    assert job.state == "pending" and f"asked of pool {POOL}" in job.state_reason, job.state_reason
    assert f"the autoscaler: {said}" in job.state_reason

    # The CA retries after its backoff and finds nothing; past the loop's timeout the request is withdrawn.
    while (loop.at - row.requested_at).total_seconds() <= TIMEOUT_S:
        _step(loop, autoscaled, 300.0, every=60.0)
        report = loop.cycle()
    row.refresh_from_db()
    assert row.state == NodeRequestStatus.TIMED_OUT and str(row.pk) in report.repairs["requests_timed_out"]
    assert f"withdraw node request {row.pk}" in report.applied
    assert _prs(cluster, team.namespace) == []
    assert cluster.core.list_namespaced_pod_template(team.namespace).items == []
    job.refresh_from_db()
    assert job.state == "pending" and "timed out" in job.state_reason, job.state_reason
    assert "CapacityIsNotFound" in job.state_reason  # the autoscaler's last words, and when it asks again
    assert not Node.objects.filter(pool=POOL).exists()


def test_a_karpenter_stockout_reaches_the_job_in_karpenters_words(cluster, clock, loop) -> None:
    """Karpenter deletes a NodeClaim that found no capacity and publishes an InsufficientCapacityError Event
    (kube_harness/karpenter.py); the gateway reads it, so the request and the job's reason say what the Cluster
    Autoscaler's CapacityIsNotFound says on the other path, and the job's timeline keeps it when the loop gives up."""
    karpenter = Karpenter(cluster, [NodePool(POOL, dict(H100_ONE_LEAF), consolidate_after_s=None, ice=1000)])
    autoscaled = Autoscaled(Autoscaler.KARPENTER, "karpenter.sh/nodepool", karpenter.step)
    team = _seed(loop, autoscaled)
    job = _submit(loop, team, "peak", gpus=8)
    loop.cycle()
    (row,) = NodeRequest.objects.all()

    _step(loop, autoscaled, 60.0)  # kube-scheduler's verdict, the batch, the NodeClaim, its launch 30 s later
    loop.cycle()
    row.refresh_from_db()
    job.refresh_from_db()
    said = "insufficient capacity, all requested instance types were unavailable during launch"
    assert row.state == NodeRequestStatus.PENDING
    assert row.message.startswith(f"InsufficientCapacityError: NodeClaim {POOL}-") and row.message.endswith(said)
    assert (
        job.state == "pending" and f"the autoscaler: InsufficientCapacityError: NodeClaim {POOL}-" in job.state_reason
    )

    while (loop.at - row.requested_at).total_seconds() <= TIMEOUT_S:  # Karpenter retries each batch, in vain
        _step(loop, autoscaled, 300.0, every=60.0)
        loop.cycle()
    row.refresh_from_db()
    job.refresh_from_db()
    assert row.state == NodeRequestStatus.TIMED_OUT and said in row.message
    assert "timed out" in job.state_reason and "InsufficientCapacityError" in job.state_reason
    assert not Node.objects.filter(pool=POOL).exists()
    steps = [e.details for e in job.events.filter(type="node_request").order_by("at", "pk")]
    assert [d["state"] for d in steps] == ["pending", "timed-out"] and said in steps[-1]["message"]


def _prs(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    return cluster.custom.list_namespaced_custom_object(
        "autoscaling.x-k8s.io", "v1", namespace, "provisioningrequests"
    )["items"]
