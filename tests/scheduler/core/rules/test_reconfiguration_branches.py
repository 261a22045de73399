"""Reconfiguration: aged whole-GPU demand keeps an idle MIG-off GPU whole only where its tier may use it."""

from __future__ import annotations

import pytest

from scheduler.core.model.cluster_state import ClusterState
from scheduler.core.model.demand import Demand
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Node, Request, Snapshot
from scheduler.core.model.vocabulary import CapacityTier, JobKind, JobTier, Priority
from scheduler.core.rules.reconfiguration import plan_reconfiguration

NOW = 1000.0
AGED = NOW - 30  # three 10 s cycles: past the hysteresis of Policy()
MIG_JOB = Job("m", "t", Request(mig_profile="1g.10gb"), kind=JobKind.INFERENCE, submitted_at=AGED)


@pytest.mark.parametrize(
    ("node_tier", "whole_tier", "priority", "converted"),
    [
        # The whole-GPU job could use the idle GPU: it stays whole.
        (CapacityTier.ON_DEMAND, JobTier.ANY, Priority.NORMAL, False),
        (CapacityTier.ON_DEMAND, JobTier.SPOT_OK, Priority.NORMAL, False),
        (CapacityTier.SPOT, JobTier.ANY, Priority.NORMAL, False),
        # It may not use this node: the MIG demand gets the GPU.
        (CapacityTier.ON_DEMAND, JobTier.RESERVED_ONLY, Priority.NORMAL, True),
        (CapacityTier.SPOT, JobTier.ANY, Priority.PRODUCTION, True),  # production never runs on spot
    ],
)
def test_whole_demand_keeps_a_gpu_whole_only_on_nodes_of_its_tiers(
    node_tier: CapacityTier, whole_tier: JobTier, priority: Priority, converted: bool
) -> None:
    state = ClusterState(Snapshot(nodes=(Node("a", "A100-SXM4-80GB", 1, tier=node_tier),), teams=()))
    whole_job = Job("w", "t", Request(gpus=1), tier=whole_tier, priority=priority, submitted_at=AGED)
    changes = plan_reconfiguration(
        state, [(MIG_JOB, Demand.mig("1g.10gb"))], Policy(), NOW, pending_whole=[(whole_job, Demand.whole(1))]
    )
    if converted:
        (change,) = changes
        assert (change.node, change.gpu, change.old) == ("a", 0, ())
        assert ("1g.10gb", 6) in change.new
    else:
        assert changes == []
