"""How many API requests one apply batch costs (scheduler.loop.apply through the Kubernetes gateway), pinned so it
cannot grow back: reads are made once a cycle or come from the caches; what stays per pod is what the API has no
collective form for (docs/deploy.md, Memory and API traffic).

Per bind: one LIST of the pods on each of its nodes (every owner's, which no cache of Microcosm's holds), the job's
report Secret, for a gang its headless Service, and per pod its create, its binding (Kubernetes has no batch
create and no batch binding: one object per POST) and its "Scheduled" Event; one read of the last pod bound (a
binding's answer carries no resourceVersion for the caches to wait for). Per cycle: the team namespace and its
checkpoint claim, once. Per eviction: one DELETE per pod (each pod's own grace and its own Event) and nothing read.
"""

from __future__ import annotations

import re
from collections import Counter

import pytest

from scheduler.gateways.kube.cycle_reads import CycleReads
from scheduler.gateways.kube.gateway import KubeGateway
from scheduler.gateways.protocol import BindRequest, Device, ReplicaPlacement
from scheduler.loop.apply import BindOp, EvictOp, Retry, apply_ops
from tests.scheduler.kube_emulator import H100_ONE_LEAF, Cluster, ManualClock, cluster_fixture

cluster = pytest.fixture(cluster_fixture)
NO_WAIT = Retry(attempts=1, backoff_s=0.0, sleep=lambda _s: None)

# (method, path) → what the request is; the first that matches names it.
KINDS = (
    ("GET", r"^/api/v1/namespaces/[^/]+$", "read namespace"),
    ("GET", r"/persistentvolumeclaims/", "read claim"),
    ("GET", r"^/api/v1/nodes", "read node"),
    ("GET", r"^/api/v1/pods$", "list pods on a node"),
    ("GET", r"/namespaces/[^/]+/pods$", "list the job's pods"),
    ("GET", r"/pods/[^/]+$", "read pod"),
    ("POST", r"/pods$", "create pod"),
    ("POST", r"/binding$", "bind pod"),
    ("POST", r"/events$", "write Event"),
    ("POST", r"/secrets$", "create Secret"),
    ("POST", r"/services$", "create Service"),
    ("DELETE", r"/pods/", "delete pod"),
)


def _requests(cluster: Cluster) -> Counter[str]:
    """The requests the emulator served since its log was cleared, by kind (the caches' watches left out)."""
    assert cluster.handler is not None
    counts: Counter[str] = Counter()
    for method, path, query in cluster.handler.log:
        if "watch=" in query:
            continue
        kind = next((k for m, p, k in KINDS if m == method and re.search(p, path)), f"{method} {path}")
        counts[kind] += 1
    return counts


def _batch(jobs: int, replicas: int) -> list[BindOp]:
    """``jobs`` checkpointed jobs of ``replicas`` one-GPU replicas, packed onto 8-GPU nodes gpu-0, gpu-1, …"""
    ops = []
    for j in range(jobs):
        placements = tuple(
            ReplicaPlacement(r, f"gpu-{(j * replicas + r) // 8}", (Device((j * replicas + r) % 8),))
            for r in range(replicas)
        )
        request = BindRequest(
            job=str(100 + j),
            namespace="team-nlp",
            name=f"run-{j}",
            placements=placements,
            image="ghcr.io/acme/train:1",
            checkpoint_interval_s=600,
            checkpoint_dir=f"/checkpoints/job-{100 + j}",
            credential="token",
        )
        ops.append(BindOp(request=request, team="nlp"))
    return ops


@pytest.fixture
def gateway(cluster: Cluster) -> KubeGateway:
    """The gateway as a worker holds it (no consistent reads), its caches synced by the cycle's observe()."""
    for n in range(4):
        cluster.add_node(f"gpu-{n}", H100_ONE_LEAF, allocatable={"nvidia.com/gpu": "8"})
    gateway = KubeGateway(cluster.new_api_client(), namespace_create=True, sleep=lambda _s: None)
    gateway.namespace_ensure(namespace="team-nlp", team="nlp")
    gateway.observe()
    cluster.clear_log()
    return gateway


@pytest.mark.parametrize("jobs", [1, 8])
def test_a_batch_of_binds_reads_the_namespace_once_and_each_node_once_per_bind(cluster, gateway, jobs) -> None:
    result = apply_ops(gateway, _batch(jobs, replicas=1), grace_s=30, retry=NO_WAIT)

    assert (result.failed, result.refused) == ([], [])
    per_bind = ("list pods on a node", "create Secret", "create pod", "bind pod", "read pod", "write Event")
    assert _requests(cluster) == Counter({"read namespace": 1, "read claim": 1} | dict.fromkeys(per_bind, jobs))


def test_a_gangs_pods_are_one_create_one_binding_and_one_event_each_and_one_read_for_all(cluster, gateway) -> None:
    jobs, replicas = 3, 4  # the gangs of jobs 0 and 1 share node gpu-0, job 2's is on gpu-1

    result = apply_ops(gateway, _batch(jobs, replicas), grace_s=30, retry=NO_WAIT)

    assert (result.failed, result.refused) == ([], [])
    assert _requests(cluster) == Counter(
        {
            "read namespace": 1,
            "read claim": 1,
            "list pods on a node": jobs,  # each gang's one node
            "create Secret": jobs,
            "create Service": jobs,
            "create pod": jobs * replicas,
            "bind pod": jobs * replicas,
            "read pod": jobs,  # the last pod of each gang, for the caches
            "write Event": jobs * replicas,
        }
    )


def test_a_batch_of_evictions_reads_nothing(cluster, gateway) -> None:
    apply_ops(gateway, _batch(3, replicas=2), grace_s=30, retry=NO_WAIT)
    gateway.observe()
    cluster.clear_log()

    evictions = [EvictOp(job=str(100 + j), namespace="team-nlp", reason="priority") for j in range(3)]
    result = apply_ops(gateway, evictions, grace_s=30, retry=NO_WAIT)

    assert result.failed == []
    assert _requests(cluster) == Counter({"delete pod": 6, "write Event": 6})
    assert cluster.pods("team-nlp") == []


def test_the_next_cycle_reads_the_namespace_again(cluster, gateway) -> None:
    apply_ops(gateway, _batch(1, replicas=1), grace_s=30, retry=NO_WAIT)
    gateway.observe()
    cluster.clear_log()

    ops = _batch(2, replicas=1)[1:]
    apply_ops(gateway, ops, grace_s=30, retry=NO_WAIT)

    assert _requests(cluster)["read namespace"] == 1
    assert _requests(cluster)["read claim"] == 1


def test_a_namespace_relabelled_for_another_team_refuses_the_next_cycles_binds(cluster, gateway) -> None:
    assert cluster.handler is not None
    cluster.handler.namespaces["team-nlp"]["metadata"]["labels"]["microcosm.io/team"] = "vision"
    gateway.observe()

    result = apply_ops(gateway, _batch(1, replicas=1), grace_s=30, retry=NO_WAIT)

    ((_op, why),) = result.refused
    assert "labelled microcosm.io/team=vision, not microcosm.io/team=nlp" in why
    assert cluster.pods("team-nlp") == []


def test_cycle_reads_last_until_cleared_or_too_old_and_a_refusal_forgets_its_namespace() -> None:
    clock = ManualClock(0.0)
    reads = CycleReads(clock, max_age_s=60.0)
    reads.team_found("team-nlp", "nlp")
    reads.claim_found("team-nlp", "microcosm-checkpoints")
    reads.claim_found("team-cv", "microcosm-checkpoints")

    reads.forget("team-nlp")
    assert (reads.team("team-nlp"), reads.claim("team-nlp", "microcosm-checkpoints")) == (None, False)
    assert reads.claim("team-cv", "microcosm-checkpoints")

    clock.now = 61.0
    assert not reads.claim("team-cv", "microcosm-checkpoints")  # older than max_age_s: read again
    reads.team_found("team-cv", "cv")
    reads.clear()
    assert reads.team("team-cv") is None
