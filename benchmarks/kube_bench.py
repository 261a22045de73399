"""``manage.py bench kube``: what the Kubernetes gateway costs the API server and the worker at cluster scale.

It starts the test emulator (``tests/scheduler/kube_emulator.py`` with its LIST/WATCH harness) in a child
process, seeds ``--nodes`` GPU nodes shaped like real ones and some of Microcosm's pods, and runs ``--cycles``
steady cycles (``observe()`` and the MIG flow's watch, as the worker's 10 s cycle and 15 s MIG watch do) while
kubelets refresh their nodes' status. It prints, per steady cycle, the bytes and requests the API server served
to the gateway on today's read path (the caches: :mod:`scheduler.gateways.kube.informer`) and on the earlier one
(a full LIST of nodes for observe, another for the MIG watch, and one of Microcosm's pods), the caches' first-sync
time, and the worker's resident memory the caches hold (RSS after the first sync minus before, and the peak
during it, from ``/proc/self/status``; the emulator's own memory is in the other process).

A node is what the GPU Operator and the kubelet write (the fields of the API's Node fixture,
kubernetes/kubernetes staging/src/k8s.io/api/testdata/HEAD/core.v1.Node.json): gpu-feature-discovery's and
the operator's ``nvidia.com/*`` labels (NVIDIA/k8s-device-plugin, tests/e2e/gpu-feature-discovery_test.go),
node-feature-discovery's ``feature.node.kubernetes.io/*`` CPU and kernel labels, the kubelet's images list and
conditions, and the managedFields of every writer. ``--churn`` node status updates a second stand for the
kubelets (the kubelet posts its status at least every ``nodeStatusReportFrequency``, 5 min: 5,000 nodes send
about 17 a second).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import multiprocessing
import time
from typing import Any

from scheduler.sim.bench.registry import BenchUsageError, Claim, Outcome, whole_number

NAME = "kube"
HELP = "Kubernetes gateway at scale: API bytes and requests per steady cycle, cache memory and first-sync time."
# Three minutes at 5,000 nodes: ``bench all`` runs it only when named (``--only kube``), as the other slow runs.
ALL_RUNS: dict[str, tuple[str, ...]] = {}
SLOW_RUNS: dict[str, tuple[str, ...]] = {NAME: ()}
EMULATOR = "tests.scheduler.kube_emulator"
NO_EMULATOR = "bench kube needs the test harness in tests/scheduler/kube_emulator.py: run it from a source checkout"
TARGET_MIB = 300.0  # the caches at 5,000 nodes, within a 1 GiB worker
MIB = 1024 * 1024


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=whole_number(1), default=5000, help="GPU nodes in the cluster (5000)")
    parser.add_argument("--pods", type=whole_number(0), default=2000, help="Microcosm's pods in the cluster (2000)")
    parser.add_argument("--cycles", type=whole_number(1), default=3, help="steady cycles measured per path (3)")
    parser.add_argument("--cycle-s", type=float, default=10.0, help="seconds a cycle stands for (10)")
    parser.add_argument("--churn", type=float, default=5000 / 300, help="node status updates a second (17)")


def gpu_node(index: int, images: list[dict[str, Any]], managed: list[dict[str, Any]]) -> dict[str, Any]:
    """An 8-GPU H100 node as the GPU Operator, node-feature-discovery and the kubelet leave it (module doc)."""
    name = f"gpu-{index:05d}"
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": "p5.48xlarge",
        "topology.kubernetes.io/region": "us-east-1",
        "topology.kubernetes.io/zone": f"us-east-1{'abc'[index % 3]}",
        "topology.k8s.aws/network-node-layer-1": f"nn-{index // 1000:04d}",
        "topology.k8s.aws/network-node-layer-2": f"nn-{index // 100:04d}",
        "topology.k8s.aws/network-node-layer-3": f"nn-{index // 16:04d}",
        "nvidia.com/cuda.driver.major": "550",
        "nvidia.com/cuda.driver.minor": "90",
        "nvidia.com/cuda.driver.rev": "07",
        "nvidia.com/cuda.runtime.major": "12",
        "nvidia.com/cuda.runtime.minor": "4",
        "nvidia.com/gfd.timestamp": str(1_760_000_000 + index),
        "nvidia.com/gpu.compute.major": "9",
        "nvidia.com/gpu.compute.minor": "0",
        "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.family": "hopper",
        "nvidia.com/gpu.machine": "p5.48xlarge",
        "nvidia.com/gpu.memory": "81559",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/mig.capable": "true",
        "nvidia.com/mig.strategy": "mixed",
        "nvidia.com/mig.config": "all-disabled",
        "nvidia.com/mig.config.state": "success",
        "nvidia.com/gpu-driver-upgrade-state": "upgrade-done",
        **{
            f"nvidia.com/gpu.deploy.{c}": "true"
            for c in (
                "container-toolkit",
                "dcgm",
                "dcgm-exporter",
                "device-plugin",
                "driver",
                "gpu-feature-discovery",
                "mig-manager",
                "node-status-exporter",
                "operator-validator",
            )
        },
        **{f"feature.node.kubernetes.io/cpu-cpuid.{f}": "true" for f in _CPU_FLAGS},
        "feature.node.kubernetes.io/kernel-version.full": "6.1.109-118.189.amzn2023.x86_64",
        "feature.node.kubernetes.io/kernel-version.major": "6",
        "feature.node.kubernetes.io/pci-10de.present": "true",
        "feature.node.kubernetes.io/pci-1d0f.present": "true",
        "feature.node.kubernetes.io/system-os_release.ID": "amzn",
        "feature.node.kubernetes.io/system-os_release.VERSION_ID": "2023",
    }
    allocatable = {
        "cpu": "191450m",
        "memory": "2063937528Ki",
        "nvidia.com/gpu": "8",
        "pods": "737",
        "vpc.amazonaws.com/efa": "32",
        "ephemeral-storage": "27527798637",
        "hugepages-2Mi": "0",
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {
                "alpha.kubernetes.io/provided-node-ip": f"10.{index // 65536}.{index // 256 % 256}.{index % 256}",
                "csi.volume.kubernetes.io/nodeid": f'{{"ebs.csi.aws.com":"i-0{index:016x}"}}',
                "nfd.node.kubernetes.io/feature-labels": ",".join(f"cpu-cpuid.{f}" for f in _CPU_FLAGS),
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
            "creationTimestamp": "2026-11-01T00:00:00Z",
            "managedFields": managed,
        },
        "spec": {"providerID": f"aws:///us-east-1a/i-0{index:016x}", "podCIDR": f"10.{index % 256}.0.0/24"},
        "status": {
            "capacity": allocatable,
            "allocatable": allocatable,
            "conditions": _conditions("2026-12-05T00:00:00Z"),
            "addresses": [
                {"type": "InternalIP", "address": f"10.0.{index // 256}.{index % 256}"},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": f"{index:032x}",
                "systemUUID": f"ec2{index:029x}",
                "bootID": f"{index:032x}",
                "kernelVersion": "6.1.109-118.189.amzn2023.x86_64",
                "osImage": "Amazon Linux 2023",
                "containerRuntimeVersion": "containerd://1.7.22",
                "kubeletVersion": "v1.31.2-eks-7f9249a",
                "kubeProxyVersion": "v1.31.2-eks-7f9249a",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
            "images": images,
        },
    }


_CPU_FLAGS = (
    "ADX",
    "AESNI",
    "AMXBF16",
    "AMXINT8",
    "AMXTILE",
    "AVX",
    "AVX2",
    "AVX512BF16",
    "AVX512BITALG",
    "AVX512BW",
    "AVX512CD",
    "AVX512DQ",
    "AVX512F",
    "AVX512FP16",
    "AVX512IFMA",
    "AVX512VBMI",
    "AVX512VBMI2",
    "AVX512VL",
    "AVX512VNNI",
    "AVX512VPOPCNTDQ",
    "AVXVNNI",
    "CMPXCHG8",
    "FMA3",
    "FSRM",
    "FXSR",
    "FXSROPT",
    "GFNI",
    "HYPERVISOR",
    "IBPB",
    "LAHF",
    "MOVBE",
    "MOVDIR64B",
    "MOVDIRI",
    "OSXSAVE",
    "SERIALIZE",
    "SHA",
    "SPEC_CTRL_SSBD",
    "STIBP",
    "SYSCALL",
    "SYSEE",
    "TSXLDTRK",
    "VAES",
    "VMX",
    "VPCLMULQDQ",
    "WAITPKG",
    "WBNOINVD",
    "X87",
    "XGETBV1",
    "XSAVE",
    "XSAVEC",
    "XSAVEOPT",
    "XSAVES",
)


def _conditions(heartbeat: str) -> list[dict[str, str]]:
    kinds = (
        ("MemoryPressure", "False", "KubeletHasSufficientMemory"),
        ("DiskPressure", "False", "KubeletHasNoDiskPressure"),
        ("PIDPressure", "False", "KubeletHasSufficientPID"),
        ("Ready", "True", "KubeletReady"),
    )
    return [
        {
            "type": t,
            "status": s,
            "reason": r,
            "message": f"kubelet reports {r}",
            "lastHeartbeatTime": heartbeat,
            "lastTransitionTime": "2026-11-01T00:05:00Z",
        }
        for t, s, r in kinds
    ]


def _images() -> list[dict[str, Any]]:
    """The kubelet reports up to 50 images a node holds (``nodeStatusMaxImages``), each with its digests."""
    return [
        {
            "names": [
                f"nvcr.io/nvidia/image-{i:02d}@sha256:{i:064x}",
                f"nvcr.io/nvidia/image-{i:02d}:24.{i % 12 + 1:02d}-py3",
            ],
            "sizeBytes": 1_000_000_000 + i * 7_919_111,
        }
        for i in range(50)
    ]


def _managed_fields() -> list[dict[str, Any]]:
    """One entry per writer of a GPU node (kubelet, node-feature-discovery, gpu-feature-discovery, the operator)."""
    writers = ("kubelet", "nfd-master", "gpu-feature-discovery", "gpu-operator", "kube-controller-manager")
    return [
        {
            "manager": writer,
            "operation": "Update",
            "apiVersion": "v1",
            "time": "2026-12-01T00:00:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:metadata": {"f:labels": {f"f:label-{writer}-{k}": {} for k in range(40)}},
                "f:status": {
                    "f:conditions": {
                        f'k:{{"type":"{t}"}}': {".": {}, "f:lastHeartbeatTime": {}}
                        for t in ("Ready", "MemoryPressure", "DiskPressure")
                    }
                },
            },
        }
        for writer in writers
    ]


def _our_pod(index: int, nodes: int) -> dict[str, Any]:
    job = index // 2
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"mc-{job}-{index % 2}",
            "namespace": f"team-{job % 20}",
            "labels": {
                "app.kubernetes.io/managed-by": "microcosm",
                "microcosm.io/job": str(job),
                "microcosm.io/replica": str(index % 2),
                "microcosm.io/team": f"t{job % 20}",
            },
            "annotations": {"microcosm.io/devices": "0,1"},
        },
        "spec": {
            "nodeName": f"gpu-{index % nodes:05d}",
            "schedulerName": "microcosm",
            "containers": [
                {"name": "main", "image": "ghcr.io/acme/train:1", "resources": {"limits": {"nvidia.com/gpu": "2"}}}
            ],
        },
        "status": {"phase": "Running"},
    }


def emulator() -> Any:
    """The test emulator's module, or :class:`BenchUsageError` saying where it lives.

    An image holds no ``tests/`` (nor kmock, a test dependency), so the import is by name and made here, in the
    parent: a child that failed to import would leave the parent waiting on its pipe for ever.
    """
    try:
        return importlib.import_module(EMULATOR)
    except ImportError:
        raise BenchUsageError(NO_EMULATOR) from None


def _serve(module: Any, nodes: int, pods: int, conn: Any) -> None:
    """The child: the emulator with the cluster seeded; answers "stats" with what it served, until "stop"."""
    cluster: Any = module.Cluster()
    images, managed = _images(), _managed_fields()  # shared: the emulator's memory is not what is measured
    cluster.seed("v1/nodes", [gpu_node(i, images, managed) for i in range(nodes)])
    cluster.seed("v1/pods", [_our_pod(i, nodes) for i in range(pods)])
    api = cluster.handler.api_server
    conn.send(cluster.url)
    next_node = 0
    while (message := conn.recv()) != "stop":
        if message == "stats":
            conn.send((dict(api.served_bytes), dict(api.served_requests), api.revision))
        elif message[0] == "report":  # the kubelets post their nodes' status
            for _ in range(message[1]):
                beat = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                body = {"status": {"conditions": _conditions(beat)}}
                name = f"gpu-{next_node % nodes:05d}"
                cluster.core.patch_node_status(name, body, _content_type="application/merge-patch+json")
                next_node += 1
            conn.send("reported")
    cluster.close()


def _memory() -> dict[str, int]:
    with open("/proc/self/status") as status:
        fields = dict(line.split(":", 1) for line in status if ":" in line)
    return {key: int(fields[key].split()[0]) * 1024 for key in ("VmRSS", "VmHWM")}


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as refs:  # "5": reset the peak resident size (VmHWM)
        refs.write("5")


def run(options: dict[str, Any]) -> Outcome:
    from scheduler.gateways.kube.client import api_client_for
    from scheduler.gateways.kube.gateway import KubeGateway

    nodes, pods, cycles = options["nodes"], options["pods"], options["cycles"]
    cycle_s, churn = options["cycle_s"], options["churn"]
    command = f"python manage.py bench kube --nodes {nodes} --pods {pods} --cycles {cycles}"
    module = emulator()
    started = time.monotonic()
    parent, child = multiprocessing.get_context("fork").Pipe()
    server = multiprocessing.get_context("fork").Process(target=_serve, args=(module, nodes, pods, child), daemon=True)
    server.start()
    url = parent.recv()

    def stats() -> tuple[dict[str, int], dict[str, int], int]:
        parent.send("stats")
        answer: tuple[dict[str, int], dict[str, int], int] = parent.recv()
        return answer

    updates = max(round(churn * cycle_s), 0)

    def kubelets_report() -> None:
        parent.send(("report", updates))
        parent.recv()

    try:
        # The caches: first sync, then steady cycles.
        gc.collect()
        before = _memory()
        _reset_peak()
        t0 = time.monotonic()
        gateway = KubeGateway(
            api_client_for(url), consistent_reads=False, request_timeout_s=300, cache_sync_timeout_s=600
        )
        gateway.client.nodes()
        gateway.client.pods_ours()
        first_sync_s = time.monotonic() - t0
        peak = _memory()["VmHWM"] - before["VmRSS"]
        gc.collect()
        held = _memory()["VmRSS"] - before["VmRSS"]
        gateway.observe()
        cached: list[tuple[int, int]] = []
        for _ in range(cycles):
            served0, requests0, _rv = stats()
            kubelets_report()
            _s, _r, revision = stats()
            for resource in ("nodes", "pods"):
                gateway.client.informer(resource).wait_for(str(revision), 60)
            gateway.observe()
            gateway.mig_watch()
            served1, requests1, _rv = stats()
            cached.append(
                (
                    sum(served1.values()) - sum(served0.values()),
                    sum(requests1.values()) - sum(requests0.values()),
                )
            )
        gateway.close()
        # The earlier path: a full LIST of nodes (observe), of Microcosm's pods (observe) and of nodes (MIG watch).
        listing = gateway.client
        gc.collect()
        before_lists = _memory()
        _reset_peak()
        listed: list[tuple[int, int]] = []
        list_s: list[float] = []
        for _ in range(cycles):
            kubelets_report()
            served0, requests0, _rv = stats()
            t0 = time.monotonic()
            listing.items("list nodes", listing.core.list_node)
            listing.items(
                "list pods",
                listing.core.list_pod_for_all_namespaces,
                label_selector="app.kubernetes.io/managed-by=microcosm",
            )
            listing.items("list nodes", listing.core.list_node)
            list_s.append(time.monotonic() - t0)
            served1, requests1, _rv = stats()
            listed.append(
                (
                    sum(served1.values()) - sum(served0.values()),
                    sum(requests1.values()) - sum(requests0.values()),
                )
            )
        list_peak = _memory()["VmHWM"] - before_lists["VmRSS"]
        node_bytes = listed[0][0] / max(2 * nodes, 1)
    finally:
        parent.send("stop")
        server.join(30)
    wall = time.monotonic() - started

    def per_cycle(rows: list[tuple[int, int]]) -> tuple[float, float]:
        return sum(r[0] for r in rows) / len(rows) / MIB, sum(r[1] for r in rows) / len(rows)

    cached_mib, cached_requests = per_cycle(cached)
    listed_mib, listed_requests = per_cycle(listed)
    scale = f"{nodes:,} GPU nodes and {pods:,} Microcosm pods"
    head = f"Kubernetes gateway at {scale}, {cycles} steady cycles of {cycle_s:g} s"
    lines = [
        head,
        f"command: {command}",
        f"node as served: {node_bytes / 1024:.1f} KiB of JSON; kubelet status updates: {updates} a cycle ({churn:g}/s)",
        "",
        "read path                          MiB/cycle  requests/cycle",
        f"caches (list once, then watch)    {cached_mib:10.2f}  {cached_requests:14.1f}",
        f"full LISTs (the earlier path)     {listed_mib:10.2f}  {listed_requests:14.1f}",
        "",
        f"caches' first sync (paged LIST of nodes and pods): {first_sync_s:.1f} s",
        f"worker memory the caches hold: {held / MIB:.0f} MiB (peak during the first sync {peak / MIB:.0f} MiB); "
        f"{held / MIB / nodes * 1000:.0f} MiB per 1,000 nodes",
        f"earlier path: peak {list_peak / MIB:.0f} MiB above the worker's resident size during a cycle's LISTs, "
        f"{sum(list_s) / len(list_s):.1f} s of LISTs a cycle",
        f"wall: {wall:.0f} s",
    ]
    claims = (
        Claim(
            claim=f"the caches hold ≤ {TARGET_MIB:.0f} MiB at {nodes:,} nodes",
            measured=f"{held / MIB:.0f} MiB (peak {peak / MIB:.0f} MiB)",
            reproduced=held / MIB <= TARGET_MIB,
        ),
        Claim(
            claim="a steady cycle makes no LIST",
            measured=f"{cached_requests:.1f} requests a cycle",
            reproduced=cached_requests == 0,
        ),
    )
    payload = {
        "benchmark": NAME,
        "command": command,
        "nodes": nodes,
        "pods": pods,
        "node_kib": round(node_bytes / 1024, 1),
        "cached_mib_per_cycle": round(cached_mib, 3),
        "cached_requests_per_cycle": cached_requests,
        "listed_mib_per_cycle": round(listed_mib, 3),
        "listed_requests_per_cycle": listed_requests,
        "first_sync_s": round(first_sync_s, 2),
        "cache_mib": round(held / MIB, 1),
        "cache_peak_mib": round(peak / MIB, 1),
        "list_peak_mib": round(list_peak / MIB, 1),
    }
    return Outcome(payload=payload, table="\n".join(lines), title=head, claims=claims)
