"""The speed-ups change nothing for gangs that span the GPU models of one class: whole plans with every cache
and shortcut off equal the plans with them on, on synthetic clusters where half of the 80 GB A100 servers
without MIG are 40 GB ones, so that some gangs fit only across the two models."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.core import Plan, Policy, Snapshot, plan_cycle
from scheduler.sim.bench.synthetic import NOW, ClusterShape, synthetic_snapshot

SHAPES = [
    ClusterShape(24, 700, seed=3, teams=3, gpus_per_node=4),
    ClusterShape(40, 900, seed=38, teams=4, nodes_per_leaf=8),
    ClusterShape(40, 900, seed=25, teams=4, nodes_per_leaf=8),
]


def _two_a100_sizes(snapshot: Snapshot) -> Snapshot:
    """Every other 80 GB A100 node without MIG becomes a 40 GB one (its running whole GPUs and shares stay
    valid: they do not depend on the memory size)."""
    nodes = tuple(
        replace(n, gpu_model="A100-SXM4-40GB") if n.gpu_model == "A100-SXM4-80GB" and not n.mig and i % 2 else n
        for i, n in enumerate(snapshot.nodes)
    )
    return replace(snapshot, nodes=nodes)


def _mixed_binds(snapshot: Snapshot, plan: Plan) -> list[str]:
    model = {node.name: node.gpu_model for node in snapshot.nodes}
    return [b.job for b in plan.binds if len({model[s.node] for replica in b.slots for s in replica}) > 1]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s.nodes}x{s.gpus_per_node}-{s.pending}-s{s.seed}")
def test_plans_with_gangs_across_models_are_the_same_with_and_without_the_speedups(
    shape: ClusterShape,
) -> None:
    snapshot = _two_a100_sizes(synthetic_snapshot(shape))
    fast = plan_cycle(snapshot, Policy(), NOW)
    mixed = _mixed_binds(snapshot, fast)
    assert mixed, "the shape must bind a gang across models, or the comparison proves little"
    assert {e.by for e in fast.evictions} & set(mixed), "and one of them through preemption"
    assert fast == plan_cycle(snapshot, Policy(), NOW, speedups=False)
