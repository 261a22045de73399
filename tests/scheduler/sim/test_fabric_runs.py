"""Multi-node training runs without a fabric: counted, weighted by GPU-time, and B3's clusters' fabrics."""

from __future__ import annotations

import pytest

from scheduler.core.model.snapshot import Job, Node, Request, Slot
from scheduler.core.model.vocabulary import Fabric, Interconnect, JobKind
from scheduler.sim.fabric_runs import without_fabric
from scheduler.sim.records import RunLog
from scheduler.sim.workload.clusters import mixed_64, topology_cluster


def _node(name: str, fabric: Fabric) -> Node:
    return Node(name, "H100-SXM5-80GB", 8, Interconnect.NVSWITCH, fabric=fabric)


def _run(kind: JobKind, placement: dict[str, int], rate: float, start: float = 0.0, end: float = 100.0) -> RunLog:
    slots = tuple((Slot(node, gpu),) for node, count in placement.items() for gpu in range(count))
    job = Job("j", "t", Request(gpus=1), kind=kind, replicas=len(slots))
    return RunLog(job=job, slots=slots, start=start, end=end, rate=rate, outcome="completed")


NODES = {
    n.name: n
    for n in (_node("t1", Fabric.TCP), _node("t2", Fabric.TCP), _node("e1", Fabric.EFA), _node("e2", Fabric.EFA))
}


def test_counts_multi_node_training_on_nodes_without_a_common_fabric() -> None:
    runs = [
        _run(JobKind.TRAINING, {"t1": 8, "t2": 8}, 0.5),  # TCP: 16 GPUs × 100 s at 0.5
        _run(JobKind.TRAINING, {"e1": 4, "t1": 4}, 0.25),  # mixed: TCP, 8 GPUs × 100 s at 0.25
        _run(JobKind.TRAINING, {"e1": 8, "e2": 8}, 0.9),  # one fabric: not counted
        _run(JobKind.TRAINING, {"t1": 8}, 1.0),  # one node: not counted
        _run(JobKind.INFERENCE, {"t1": 1, "t2": 1}, 1.0),  # not training
        _run(JobKind.TRAINING, {"t1": 8, "t2": 8}, 0.5, start=200.0, end=300.0),  # outside the window
    ]
    figures = without_fabric(runs, NODES, (0.0, 150.0))
    assert figures["runs"] == 2
    assert figures["gpu_hours"] == pytest.approx((16 + 8) * 100 / 3600, abs=1e-4)
    assert figures["speed"] == pytest.approx((16 * 0.5 + 8 * 0.25) / 24, abs=1e-4)
    assert without_fabric([], NODES, (0.0, 150.0)) == {"runs": 0, "gpu_hours": 0.0, "speed": None}


def test_the_benchmark_clusters_are_on_infiniband_unless_leaves_are_taken_off_it() -> None:
    assert {n.fabric for n in mixed_64().nodes} == {Fabric.INFINIBAND}
    assert {n.fabric for n in topology_cluster(64).nodes} == {Fabric.INFINIBAND}
    cluster = topology_cluster(64, tcp_leaves=1)  # 8 servers, 2 leaves: the last leaf's 4 on TCP
    assert [n.fabric for n in cluster.nodes] == [Fabric.INFINIBAND] * 4 + [Fabric.TCP] * 4
    assert "1 leaves without a fabric" in cluster.description
    with pytest.raises(ValueError, match="tcp_leaves must be from 0 to the cluster's 2 leaves, not 3"):
        topology_cluster(64, tcp_leaves=3)
