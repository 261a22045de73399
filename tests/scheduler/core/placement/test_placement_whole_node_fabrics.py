"""GPUDirect-TCPX/TCPXO nodes serve one workload each: a gang spanning nodes takes them only with whole-node replicas.

Google's GKE manifests for A3 High and Mega (GoogleCloudPlatform/container-engine-accelerators,
``gpudirect-tcpx/nccl-test-latest.yaml``, ``gpudirect-tcpxo/nccl-test-latest.yaml``) give one pod all 8 GPUs and
every NIC of its node beside one receive-datapath daemon that sees all 8 GPUs; two half-node replicas would each
start a daemon claiming the same GPUs and NICs. The engine never plans that (``scheduler/core/placement/fabric.py``,
rule 4), and screening rejects a gang no such place could ever hold.
"""

from __future__ import annotations

import dataclasses

import pytest

from scheduler.core import rejection_reason
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Node
from scheduler.core.model.vocabulary import Fabric
from scheduler.core.placement import find_slots
from tests.scheduler.properties.builders import job, node, state_of

POLICY = Policy()


def _on(name: str, fabric: Fabric, **kwargs: object) -> Node:
    return dataclasses.replace(node(name, **kwargs), fabric=fabric)  # type: ignore[arg-type]


def _nodes(slots: tuple[tuple[object, ...], ...] | None) -> list[str]:
    assert slots is not None
    return sorted({s.node for replica in slots for s in replica})  # type: ignore[attr-defined]


@pytest.mark.parametrize("fabric", [Fabric.TCPX, Fabric.TCPXO])
def test_half_node_replicas_never_span_gpudirect_nodes(fabric: Fabric) -> None:
    nodes = [_on("a3-1", fabric), _on("a3-2", fabric)]
    assert find_slots(state_of(nodes), job("g", gpus=4, replicas=3), POLICY) is None


@pytest.mark.parametrize("fabric", [Fabric.TCPX, Fabric.TCPXO])
def test_whole_node_replicas_span_gpudirect_nodes(fabric: Fabric) -> None:
    nodes = [_on("a3-1", fabric), _on("a3-2", fabric)]
    assert _nodes(find_slots(state_of(nodes), job("g", gpus=8, replicas=2), POLICY)) == ["a3-1", "a3-2"]


def test_half_node_replicas_fit_on_one_gpudirect_node() -> None:
    """On one node the replicas talk over NVLink: no fabric, no daemon, nothing to share."""
    nodes = [_on("a3-1", Fabric.TCPX), _on("a3-2", Fabric.TCPX)]
    assert _nodes(find_slots(state_of(nodes), job("g", gpus=4, replicas=2), POLICY)) == ["a3-1"]


def test_half_node_replicas_go_to_other_nodes_than_gpudirect_ones() -> None:
    nodes = [_on("a3-1", Fabric.TCPXO), _on("a3-2", Fabric.TCPXO), _on("tcp-1", Fabric.TCP), _on("tcp-2", Fabric.TCP)]
    assert _nodes(find_slots(state_of(nodes), job("g", gpus=4, replicas=3), POLICY)) == ["tcp-1", "tcp-2"]


def test_a_gang_of_half_nodes_no_place_could_hold_is_refused_with_the_reason() -> None:
    nodes = [_on("a3-1", Fabric.TCPX), _on("a3-2", Fabric.TCPX)]
    reason = rejection_reason(job("g", gpus=4, replicas=3), nodes, POLICY)
    assert reason is not None
    assert "GPUDirect-TCPX/TCPXO" in reason and "all 8 GPUs of its node" in reason
    assert rejection_reason(job("g", gpus=8, replicas=2), nodes, POLICY) is None
    assert rejection_reason(job("g", gpus=4, replicas=2), nodes, POLICY) is None  # one node holds it


def test_other_fabrics_still_count_every_node() -> None:
    nodes = [_on("efa-1", Fabric.EFA), _on("efa-2", Fabric.EFA)]
    assert rejection_reason(job("g", gpus=4, replicas=3), nodes, POLICY) is None
