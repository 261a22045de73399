"""The gateway reads nodes and Microcosm's pods from list-then-watch caches, not a LIST per read
(scheduler/gateways/kube/informer.py), against the emulator's LIST and WATCH
(tests/scheduler/kube_harness/api_server.py)."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import pytest
from django.test import override_settings

from scheduler.gateways.kube.gateway import KubeGateway
from scheduler.gateways.protocol import BindRequest, Device, ReplicaPlacement
from tests.scheduler.kube_emulator import H100_ONE_LEAF, Cluster, cluster_fixture

cluster = pytest.fixture(cluster_fixture)
NODES = 5000


def _node(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {**H100_ONE_LEAF, "kubernetes.io/hostname": name}},
        "spec": {},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "allocatable": {"nvidia.com/gpu": "8", "cpu": "192", "memory": "2063937528Ki"},
        },
    }


def _lists(cluster: Cluster) -> list[tuple[str, str]]:
    """The LISTs of nodes or pods cluster-wide the emulator served since its log was cleared: (path, query)."""
    assert cluster.handler is not None
    return [
        (path, query)
        for method, path, query in cluster.handler.log
        if method == "GET" and path in ("/api/v1/nodes", "/api/v1/pods") and "watch=" not in query
    ]


def _gateway(cluster: Cluster, **kwargs: Any) -> KubeGateway:
    return KubeGateway(
        cluster.new_api_client(), namespace_create=True, request_timeout_s=5, sleep=lambda _s: None, **kwargs
    )


def _until(condition: Any, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the cache did not catch up"
        time.sleep(0.01)


def test_at_5000_nodes_the_first_list_is_paged_and_steady_cycles_list_nothing(cluster) -> None:
    cluster.seed("v1/nodes", [_node(f"gpu-{i:05d}") for i in range(NODES)])
    gateway = _gateway(cluster)  # as gateway_from_settings builds it: no consistent reads

    assert len(gateway.observe().nodes) == NODES
    first = [query for path, query in _lists(cluster) if path == "/api/v1/nodes"]
    assert len(first) == NODES // 500 and all("limit=500" in q for q in first)  # pages of 500, with continue
    assert sum("continue=" in q for q in first) == NODES // 500 - 1

    cluster.clear_log()
    cluster.patch_node("gpu-00042", {"spec": {"unschedulable": True}})
    _until(lambda: not {n.name: n for n in gateway.observe().nodes}["gpu-00042"].schedulable)
    for _cycle in range(3):
        assert len(gateway.observe().nodes) == NODES
        gateway.mig_watch()
    assert _lists(cluster) == []  # observe() and the MIG flow's watch read the caches


def test_a_bind_lists_no_pods_cluster_wide_and_a_mig_config_write_lists_no_nodes(cluster) -> None:
    cluster.add_node("gpu-a", {**H100_ONE_LEAF}, allocatable={"nvidia.com/gpu": "8"})
    gateway = _gateway(cluster, default_image="ghcr.io/acme/train:1")
    gateway.namespace_ensure(namespace="team-nlp", team="nlp")
    gateway.observe()
    cluster.clear_log()

    placements = (ReplicaPlacement(0, "gpu-a", (Device(0), Device(1))),)
    gateway.job_bind(request=BindRequest(job="42", namespace="team-nlp", name="j", placements=placements))
    gateway.client.mig_config_write("custom-1", ((("1g.10gb", 0), ("1g.10gb", 1)),), also_keep=set(), now=1.0)

    # The bind reads the node from the cache and the pods on it by a LIST the server filters by spec.nodeName.
    wide = [q for path, q in _lists(cluster) if "fieldSelector" not in q and "limit=1" not in q]
    assert wide == []
    assert [n.name for n in gateway.observe().nodes] == ["gpu-a"]
    assert gateway.observe().jobs["42"].replicas[0].node == "gpu-a"  # its own bind, read from the cache


def test_the_pods_cache_finds_a_jobs_pods_by_its_index_through_relabels_and_deletes(cluster) -> None:
    cluster.add_node("gpu-a", {**H100_ONE_LEAF}, allocatable={"nvidia.com/gpu": "8"})
    gateway = _gateway(cluster, default_image="ghcr.io/acme/train:1", consistent_reads=True)
    gateway.namespace_ensure(namespace="team-nlp", team="nlp")
    for job, first_gpu in (("42", 0), ("43", 2)):
        placements = tuple(ReplicaPlacement(r, "gpu-a", (Device(first_gpu + r),)) for r in range(2))
        gateway.job_bind(request=BindRequest(job=job, namespace="team-nlp", name="j", placements=placements))

    def names(job: str) -> list[str]:
        return sorted(p["metadata"]["name"] for p in gateway.client.pods_ours("team-nlp", job))

    assert (names("42"), names("43")) == (["mc-42-0", "mc-42-1"], ["mc-43-0", "mc-43-1"])
    cluster.core.patch_namespaced_pod(  # a pod relabelled (by hand) to another job moves in the index
        "mc-42-1",
        "team-nlp",
        {"metadata": {"labels": {"microcosm.io/job": "43"}}},
        _content_type="application/merge-patch+json",
    )
    cluster.core.delete_namespaced_pod("mc-43-0", "team-nlp")
    assert (names("42"), names("43")) == (["mc-42-0"], ["mc-42-1", "mc-43-1"])
    assert gateway.client.pods_ours("team-other", "42") == []  # the index is per namespace


def test_a_watch_too_old_for_the_history_relists(cluster) -> None:
    cluster.add_node("gpu-a", H100_ONE_LEAF)
    gateway = KubeGateway(cluster.new_api_client(), request_timeout_s=5)
    informer = gateway.client.informer("nodes")
    assert [n.name for n in gateway.observe().nodes] == ["gpu-a"]
    assert cluster.handler is not None
    api = cluster.handler.api_server
    held = {"watches": 0}

    async def hold_the_next_watch(_emulator: Any, raw: Any) -> None:
        if raw.path == "/api/v1/nodes" and "watch" in raw.query and held["watches"] == 0:
            held["watches"] += 1
            await asyncio.sleep(0.5)  # the client is away while the cluster changes and the history rolls over

    cluster.handler.interceptors.insert(0, hold_the_next_watch)
    api.end_watches()  # the informer watches again from its version, which is held up a while
    _until(lambda: held["watches"] == 1)
    cluster.add_node("gpu-b", H100_ONE_LEAF)
    api.forget_history()

    _until(lambda: informer.lists >= 2, timeout_s=15)  # ERROR 410 "too old resource version": list again
    assert "too old resource version" in informer.last_error
    _until(lambda: len(gateway.observe().nodes) == 2)


def test_a_broken_watch_relists_after_a_backoff(cluster) -> None:
    cluster.add_node("gpu-a", H100_ONE_LEAF)
    gateway = KubeGateway(cluster.new_api_client(), request_timeout_s=5)
    informer = gateway.client.informer("nodes")
    informer.backoff_s = 0.05
    assert len(gateway.observe().nodes) == 1
    assert cluster.handler is not None
    cluster.fail("GET", r"^/api/v1/nodes$", 500, times=1)  # the next watch is refused
    cluster.handler.api_server.end_watches()
    cluster.add_node("gpu-b", H100_ONE_LEAF)

    _until(lambda: informer.lists >= 2, timeout_s=15)
    _until(lambda: len(gateway.observe().nodes) == 2)


def test_a_continue_token_that_expires_mid_list_falls_back_to_one_full_list(cluster) -> None:
    cluster.seed("v1/nodes", [_node(f"gpu-{i:04d}") for i in range(1200)])
    assert cluster.handler is not None
    api = cluster.handler.api_server

    async def compact_before_the_second_page(_emulator: Any, raw: Any) -> None:
        if raw.path == "/api/v1/nodes" and "continue" in raw.query and api.compacted == 0:
            api.compact()  # etcd compacted between two pages

    cluster.handler.interceptors.insert(0, compact_before_the_second_page)
    gateway = _gateway(cluster)

    assert len(gateway.observe().nodes) == 1200
    queries = [q for path, q in _lists(cluster) if path == "/api/v1/nodes"]
    assert "limit=500" in queries[0] and "continue=" in queries[1]  # the second page: 410 Expired
    assert "limit" not in queries[2]  # then everything in one list (client-go's pager: FullListIfExpired)


def test_the_kubernetes_gateway_is_built_once_per_process(cluster, monkeypatch) -> None:
    from scheduler import gateways
    from scheduler.gateways.kube import gateway as module

    built: list[KubeGateway] = []

    def factory() -> KubeGateway:
        built.append(_gateway(cluster))
        return built[-1]

    monkeypatch.setattr(module, "gateway_from_settings", factory)
    monkeypatch.setattr(gateways, "_kube", None, raising=False)
    with override_settings(CLUSTER_BACKEND="kubernetes"):
        first, second = gateways.gateway_get(), gateways.gateway_get()
        assert first is second and len(built) == 1  # one ApiClient, one pair of caches
        monkeypatch.setattr(gateways, "_kube", (os.getpid() + 1, first))  # a forked child sees its parent's
        assert gateways.gateway_get() is not first and len(built) == 2
