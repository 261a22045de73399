"""Running a gang's pods as real processes: one process per pod with exactly the environment of its manifest,
the names the job's headless Service publishes resolved to loopback through nss_wrapper
(``LD_PRELOAD=libnss_wrapper.so``, Debian package ``libnss-wrapper``, which .ci/run installs), with an IPv4 and an
IPv6 loopback address as a dual-stack cluster's DNS answers both
(tests/scheduler/gateways/kube/test_rendezvous_torch.py says why this is the proof)."""

from __future__ import annotations

import ctypes
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "distributed_allreduce.py"
TIMEOUT_S = 60
NSS_WRAPPER = "libnss_wrapper.so"
REPORT = re.compile(r"rank (\d+) of (\d+): all-reduce sum (\d+)")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def published_names(pods: list[dict[str, Any]]) -> list[str]:
    """The DNS names the job's headless Service gives its pods, as cluster DNS builds them from each pod."""
    return [f"{pod['spec']['hostname']}.{pod['spec']['subdomain']}.{pod['metadata']['namespace']}.svc" for pod in pods]


def run_gang(pods: list[dict[str, Any]], directory: Path, command: list[str] | None = None) -> dict[int, str]:
    """One process per pod (``command``, default: the example program) with exactly its manifest's environment;
    what each printed, by replica."""
    try:
        ctypes.CDLL(NSS_WRAPPER)
    except OSError:
        pytest.fail(f"{NSS_WRAPPER} is missing: apt-get install libnss-wrapper (.ci/run installs it)")
    hosts = directory / "hosts"
    hosts.write_text("".join(f"127.0.0.1 {name}\n::1 {name}\n" for name in published_names(pods)), encoding="utf-8")
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


def assert_group_formed(outputs: dict[int, str], replicas: int, per_pod: int = 1) -> None:
    """Every process of every pod saw the sum 1 + … + world size; ranks run pod by pod (torchrun's static order)."""
    world = replicas * per_pod
    total = world * (world + 1) // 2
    assert sorted(outputs) == list(range(replicas))
    for replica, output in outputs.items():
        # A pod's processes share its output: their lines may interleave, so each report is found on its own.
        seen = {(int(rank), int(size), int(found)) for rank, size, found in REPORT.findall(output)}
        expected = {(rank, world, total) for rank in range(replica * per_pod, (replica + 1) * per_pod)}
        assert seen == expected, output
