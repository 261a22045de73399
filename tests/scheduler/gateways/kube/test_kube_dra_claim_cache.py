"""The devices other ResourceClaims hold, read from the gateway's cache of every claim instead of a LIST per bind.

A bind on a DRA node refuses a device another claim holds, whoever allocated it (kube-scheduler allocates for pods
that are not Microcosm's). It reads every claim of the cluster: once per bind, a big first cycle of N binds read the
cluster's claims N times. The client now keeps them in a list-then-watch cache, as kube-scheduler keeps them
(kubernetes pkg/scheduler/framework/plugins/dynamicresources/dra_manager.go: an assume cache over the claim informer).
These tests run the gateway as production does (``consistent_reads`` off: the cache lags the cluster by the watch)."""

from __future__ import annotations

import pytest

from scheduler.errors import GatewayConflict
from scheduler.gateways.kube.client import RESOURCE_CLAIMS
from scheduler.gateways.kube.dra_claims import claim_name
from scheduler.gateways.kube.dra_devices import DraNode
from scheduler.gateways.kube.gateway import KubeGateway
from scheduler.gateways.protocol import Device, ReplicaPlacement
from tests.scheduler.gateways.kube.test_kube_dra_claims import (
    GPU_DRIVER,
    H100,
    NS,
    _claim,
    _foreign_claim,
    _gpus,
    _request,
    claim_lists,
)
from tests.scheduler.kube_emulator import cluster_fixture
from tests.scheduler.kube_harness.resource_claims import DraKubelet

cluster = pytest.fixture(cluster_fixture)


@pytest.fixture
def gateway(cluster) -> KubeGateway:
    """A gateway as production builds it (no consistent reads) over one 8-GPU DRA node, ``dra-a``."""
    cluster.add_device_classes()
    cluster.add_node("dra-a", H100)
    dra = {"dra-a": DraNode("dra-a", _gpus("dra-a"))}
    kubelet = DraKubelet(cluster.handler, nodes=dra)
    cluster.handler.bind_hooks.append(kubelet.on_bind)
    gateway = KubeGateway(
        cluster.new_api_client(),
        consistent_reads=False,
        namespace_create=True,
        clock=lambda: 1_800_000_000.0,
        sleep=lambda _s: None,
        request_timeout_s=2.0,
        dra_nodes=lambda: dra,
    )
    gateway.namespace_ensure(namespace=NS, team="nlp")
    return gateway


def _bind(gateway: KubeGateway, job: str, gpu: int) -> None:
    gateway.job_bind(request=_request(job, ReplicaPlacement(0, "dra-a", (Device(gpu),))))


def test_n_binds_list_the_claims_once_not_once_each(cluster, gateway) -> None:
    cluster.clear_log()
    _bind(gateway, "1", 0)
    after_one = len(claim_lists(cluster))

    for job in range(2, 9):  # seven more binds, one per GPU
        _bind(gateway, str(job), job - 1)

    # One LIST for one bind and still one for eight (it was one per bind: eight).
    assert after_one == 1 and len(claim_lists(cluster)) == 1
    assert {_claim(cluster, claim_name(str(j), 0))["status"]["allocation"]["devices"]["results"][0]["device"]
            for j in range(1, 9)} == {f"gpu-{i}" for i in range(8)}  # fmt: skip


def test_a_claim_another_owner_allocates_between_binds_is_respected(cluster, gateway) -> None:
    _bind(gateway, "1", 0)
    # kube-scheduler allocates GPU 1 to a pod of its own after Microcosm's first bind.
    theirs = _foreign_claim(
        cluster, "default", "theirs", {"request": "gpu", "driver": GPU_DRIVER, "pool": "dra-a", "device": "gpu-1"}
    )
    # The cache hears of it through its watch (within the watch's latency: production's consistent_reads is off).
    informer = gateway.client.informer(RESOURCE_CLAIMS)
    assert informer.wait_for(theirs["metadata"]["resourceVersion"], 5.0)
    cluster.clear_log()

    with pytest.raises(GatewayConflict, match="gpu-1 of pool dra-a is allocated to another ResourceClaim"):
        _bind(gateway, "2", 1)
    _bind(gateway, "3", 2)  # another GPU is free

    assert claim_lists(cluster) == []  # neither bind listed the claims again
    assert [c["metadata"]["name"] for c in cluster.resource_claims(NS)] == [claim_name("1", 0), claim_name("3", 0)]
