"""The proof that a gang's pods can rendezvous: the Kubernetes gateway binds a gang on the API emulator (official
client over HTTP), and one real process per replica runs docs/examples/distributed_allreduce.py with exactly the
environment the gateway wrote into that replica's pod manifest (CPU, the ``gloo`` backend, ``env://``). Every rank
must see the all-reduce sum 1 + … + n: for 2 and 4 replicas, and again after the gang is requeued and bound on
other nodes; and the documented ``torchrun`` command, one agent per pod, forms one group of every GPU's process.

Cluster DNS is the only part of Kubernetes played here: the names the headless Service publishes
(``<hostname>.<subdomain>.<namespace>.svc`` of every pod) resolve to loopback through nss_wrapper
(``LD_PRELOAD=libnss_wrapper.so``, Debian package ``libnss-wrapper``, which .ci/run installs), with an IPv4 and an
IPv6 loopback address as a dual-stack cluster's DNS answers both. ``MASTER_ADDR`` stays the DNS name the gateway
wrote, so a wrong name, port, rank or world size fails here.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from scheduler.gateways.kube.gateway import KubeGateway
from scheduler.gateways.protocol import BindRequest, Device, ReplicaPlacement
from tests.scheduler.kube_emulator import H100_ONE_LEAF, cluster_fixture
from tests.scheduler.rendezvous_helpers import EXAMPLE, ROOT, assert_group_formed, free_port, published_names, run_gang

NAMESPACE = "team-nlp"

cluster = pytest.fixture(cluster_fixture)


@pytest.fixture
def gateway(cluster) -> KubeGateway:
    for name in ("gpu-a", "gpu-b"):
        cluster.add_node(name, H100_ONE_LEAF, allocatable={"nvidia.com/gpu": "8"})
    gateway = KubeGateway(
        cluster.new_api_client(),
        consistent_reads=True,
        namespace_create=True,
        sleep=lambda _s: None,
        request_timeout_s=2.0,
        default_image="ghcr.io/acme/train:1",
        rendezvous_port=free_port(),  # a test choice of KUBE_RENDEZVOUS_PORT: two runs may share the machine
    )
    gateway.namespace_ensure(namespace=NAMESPACE, team="nlp")
    return gateway


def _gang(replicas: int, nodes: tuple[str, ...]) -> BindRequest:
    """``replicas`` × 2 GPUs, replica r on ``nodes[r % len(nodes)]``."""
    placements = tuple(
        ReplicaPlacement(r, nodes[r % len(nodes)], (Device(2 * (r // len(nodes))), Device(2 * (r // len(nodes)) + 1)))
        for r in range(replicas)
    )
    return BindRequest(job="42", namespace=NAMESPACE, name="allreduce", placements=placements)


@pytest.mark.parametrize("replicas", [4])  # 2 replicas: the requeue test below, twice
def test_the_env_the_gateway_writes_forms_a_torch_distributed_group(cluster, gateway, tmp_path, replicas) -> None:
    gateway.job_bind(request=_gang(replicas, ("gpu-a", "gpu-b")))
    pods = cluster.pods(NAMESPACE)
    assert len(pods) == replicas
    # Every replica dials replica 0 by a name the Service publishes, not by an address.
    addresses = {e["value"] for pod in pods for e in pod["spec"]["containers"][0]["env"] if e["name"] == "MASTER_ADDR"}
    assert addresses == {published_names(pods)[0]} and not addresses & {"127.0.0.1", "::1", "localhost"}

    assert_group_formed(run_gang(pods, tmp_path), replicas)


def test_a_requeued_gang_bound_again_forms_a_new_group_with_the_same_rendezvous(cluster, gateway, tmp_path) -> None:
    gateway.job_bind(request=_gang(2, ("gpu-a",)))
    first = cluster.pods(NAMESPACE)
    assert_group_formed(run_gang(first, tmp_path), 2)

    gateway.job_evict(job="42", namespace=NAMESPACE, grace_s=0, reason="spot-reclaim")
    assert cluster.pods(NAMESPACE) == []
    gateway.job_bind(request=_gang(2, ("gpu-b",)))
    again = cluster.pods(NAMESPACE)

    assert {p["spec"]["nodeName"] for p in again} == {"gpu-b"}

    def rendezvous(pods: list[dict[str, Any]]) -> dict[str, Any]:
        return {p["metadata"]["name"]: (p["spec"]["hostname"], p["spec"]["containers"][0]["env"]) for p in pods}

    assert rendezvous(again) == rendezvous(first)
    assert_group_formed(run_gang(again, tmp_path), 2)


def test_the_documentation_shows_the_program_the_tests_run() -> None:
    document = (ROOT / "docs" / "distributed-training.md").read_text(encoding="utf-8")
    assert f"```python\n{EXAMPLE.read_text(encoding='utf-8')}```\n" in document, (
        "copy docs/examples/distributed_allreduce.py into docs/distributed-training.md"
    )


def test_the_documented_torchrun_command_forms_one_group_of_every_gpu_process(cluster, gateway, tmp_path) -> None:
    """The ``torchrun`` command of docs/distributed-training.md, as a job's command, on a 2-replica × 2-GPU gang:
    one agent per pod, NPROC_PER_NODE processes each, 4 ranks in all."""
    document = (ROOT / "docs" / "distributed-training.md").read_text(encoding="utf-8")
    (block,) = re.findall(r"```json\n(\[\"sh\", \"-c\", \"exec torchrun .*\])\n```", document)
    command = [part.replace("/app/distributed_allreduce.py", str(EXAMPLE)) for part in json.loads(block)]
    gateway.job_bind(request=_gang(2, ("gpu-a", "gpu-b")))
    pods = cluster.pods(NAMESPACE)

    assert_group_formed(run_gang(pods, tmp_path, command), 2, per_pod=2)
