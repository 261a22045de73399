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

import ctypes
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from scheduler.gateways.kube.gateway import KubeGateway
from scheduler.gateways.protocol import BindRequest, Device, ReplicaPlacement
from tests.scheduler.kube_emulator import H100_ONE_LEAF, cluster_fixture

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "distributed_allreduce.py"
NAMESPACE = "team-nlp"
TIMEOUT_S = 60
NSS_WRAPPER = "libnss_wrapper.so"
REPORT = re.compile(r"rank (\d+) of (\d+): all-reduce sum (\d+)")

cluster = pytest.fixture(cluster_fixture)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def gateway(cluster) -> KubeGateway:
    for name in ("gpu-a", "gpu-b"):
        cluster.add_node(name, H100_ONE_LEAF, allocatable={"nvidia.com/gpu": "8"})
    gateway = KubeGateway(
        cluster.new_api_client(),
        sleep=lambda _s: None,
        request_timeout_s=2.0,
        default_image="ghcr.io/acme/train:1",
        rendezvous_port=_free_port(),  # a test choice of KUBE_RENDEZVOUS_PORT: two runs may share the machine
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


def _published_names(pods: list[dict[str, Any]]) -> list[str]:
    """The DNS names the job's headless Service gives its pods, as cluster DNS builds them from each pod."""
    return [f"{pod['spec']['hostname']}.{pod['spec']['subdomain']}.{pod['metadata']['namespace']}.svc" for pod in pods]


def _run_gang(pods: list[dict[str, Any]], directory: Path, command: list[str] | None = None) -> dict[int, str]:
    """One process per pod (``command``, default: the example program) with exactly its manifest's environment;
    what each printed, by replica."""
    try:
        ctypes.CDLL(NSS_WRAPPER)
    except OSError:
        pytest.fail(f"{NSS_WRAPPER} is missing: apt-get install libnss-wrapper (.ci/run installs it)")
    hosts = directory / "hosts"
    hosts.write_text("".join(f"127.0.0.1 {name}\n::1 {name}\n" for name in _published_names(pods)), encoding="utf-8")
    machine = {k: os.environ[k] for k in ("HOME", "LANG") if k in os.environ}
    # This interpreter's scripts (torchrun) first, as an image's PATH would have them.
    machine["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    processes = {}
    for pod in pods:
        (container,) = pod["spec"]["containers"]
        env = {e["name"]: e.get("value", "") for e in container.get("env", [])}
        processes[int(pod["metadata"]["labels"]["microcosm.io/replica"])] = subprocess.Popen(
            command or [sys.executable, str(EXAMPLE)],
            env={
                **machine,
                **env,
                "LD_PRELOAD": NSS_WRAPPER,
                "NSS_WRAPPER_HOSTS": str(hosts),
                "OMP_NUM_THREADS": "1",
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
    outputs = {}
    deadline = time.monotonic() + TIMEOUT_S
    try:
        for replica, process in processes.items():
            output, _ = process.communicate(timeout=max(deadline - time.monotonic(), 1))
            assert process.returncode == 0, f"replica {replica} exited {process.returncode}:\n{output}"
            outputs[replica] = output
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()
                process.wait()
    return outputs


def _assert_group_formed(outputs: dict[int, str], replicas: int, per_pod: int = 1) -> None:
    """Every process of every pod saw the sum 1 + … + world size; ranks run pod by pod (torchrun's static order)."""
    world = replicas * per_pod
    total = world * (world + 1) // 2
    assert sorted(outputs) == list(range(replicas))
    for replica, output in outputs.items():
        # A pod's processes share its output: their lines may interleave, so each report is found on its own.
        seen = {(int(rank), int(size), int(found)) for rank, size, found in REPORT.findall(output)}
        expected = {(rank, world, total) for rank in range(replica * per_pod, (replica + 1) * per_pod)}
        assert seen == expected, output


@pytest.mark.parametrize("replicas", [4])  # 2 replicas: the requeue test below, twice
def test_the_env_the_gateway_writes_forms_a_torch_distributed_group(cluster, gateway, tmp_path, replicas) -> None:
    gateway.job_bind(request=_gang(replicas, ("gpu-a", "gpu-b")))
    pods = cluster.pods(NAMESPACE)
    assert len(pods) == replicas
    # Every replica dials replica 0 by a name the Service publishes, not by an address.
    addresses = {e["value"] for pod in pods for e in pod["spec"]["containers"][0]["env"] if e["name"] == "MASTER_ADDR"}
    assert addresses == {_published_names(pods)[0]} and not addresses & {"127.0.0.1", "::1", "localhost"}

    _assert_group_formed(_run_gang(pods, tmp_path), replicas)


def test_a_requeued_gang_bound_again_forms_a_new_group_with_the_same_rendezvous(cluster, gateway, tmp_path) -> None:
    gateway.job_bind(request=_gang(2, ("gpu-a",)))
    first = cluster.pods(NAMESPACE)
    _assert_group_formed(_run_gang(first, tmp_path), 2)

    gateway.job_evict(job="42", namespace=NAMESPACE, grace_s=0, reason="spot-reclaim")
    assert cluster.pods(NAMESPACE) == []
    gateway.job_bind(request=_gang(2, ("gpu-b",)))
    again = cluster.pods(NAMESPACE)

    assert {p["spec"]["nodeName"] for p in again} == {"gpu-b"}

    def rendezvous(pods: list[dict[str, Any]]) -> dict[str, Any]:
        return {p["metadata"]["name"]: (p["spec"]["hostname"], p["spec"]["containers"][0]["env"]) for p in pods}

    assert rendezvous(again) == rendezvous(first)
    _assert_group_formed(_run_gang(again, tmp_path), 2)


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

    _assert_group_formed(_run_gang(pods, tmp_path, command), 2, per_pod=2)
