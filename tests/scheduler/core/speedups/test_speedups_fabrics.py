"""The speed-ups change nothing where fabrics differ: whole plans with every cache and shortcut off equal the
plans with them on, on synthetic clusters whose nodes are split between EFA (in two placement groups),
InfiniBand and no fabric, so that the fabric rule decides where multi-node gangs go."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.core import Plan, Policy, Snapshot, plan_cycle
from scheduler.core.model.vocabulary import Fabric
from scheduler.sim.bench.synthetic import NOW, ClusterShape, synthetic_snapshot

SHAPES = [
    ClusterShape(24, 700, seed=3, teams=3, gpus_per_node=4),
    ClusterShape(40, 900, seed=26, teams=4, nodes_per_leaf=8),
]
_KINDS = ((Fabric.EFA, "pg-a"), (Fabric.EFA, "pg-b"), (Fabric.INFINIBAND, ""), (Fabric.TCP, ""))


def _fabrics(snapshot: Snapshot) -> Snapshot:
    nodes = tuple(
        replace(n, fabric=_KINDS[i % 4][0], placement_group=_KINDS[i % 4][1]) for i, n in enumerate(snapshot.nodes)
    )
    return replace(snapshot, nodes=nodes)


def _multi_node_binds(plan: Plan) -> list[str]:
    return [b.job for b in plan.binds if len({s.node for replica in b.slots for s in replica}) > 1]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s.nodes}x{s.gpus_per_node}-{s.pending}-s{s.seed}")
def test_plans_with_mixed_fabrics_are_the_same_with_and_without_the_speedups(shape: ClusterShape) -> None:
    snapshot = _fabrics(synthetic_snapshot(shape))
    fast = plan_cycle(snapshot, Policy(), NOW)
    assert _multi_node_binds(fast), "the shape must bind a multi-node gang, or the comparison proves little"
    fabric = {node.name: node.fabric for node in snapshot.nodes}
    for bind in fast.binds:
        assert len({fabric[s.node] for replica in bind.slots for s in replica}) == 1, bind.job  # never mixed
    assert fast == plan_cycle(snapshot, Policy(), NOW, speedups=False)
