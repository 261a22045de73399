"""B4 run D (scheduler/sim/bench/cost.py, protocol step 7): the tiered pool with its on-demand servers turned into
autoscaled pools, driven here by the test planner that stands in for the engine's provisioning rule
(tests/scheduler/sim/fake_provisioning.py), so the benchmark's side is tested on its own."""

from __future__ import annotations

import pytest

from scheduler.core.gpus.arrival import default_arrival_s
from scheduler.core.model.vocabulary import CapacityTier
from scheduler.sim.bench.cost import RUN_AUTOSCALED, RUN_TIERED, CostConfig, autoscaled_pools, run_cost, tiered_nodes
from scheduler.sim.bench.cost import pool as elastic_pool
from scheduler.sim.bench.mixed_cli import load_runtimes
from scheduler.sim.planners import PLANNERS, microcosm
from scheduler.sim.prices import price_per_gpu_hour
from scheduler.sim.workload.clusters import cluster_named
from scheduler.sim.workload.mixed import MIXES, WorkloadConfig, generate
from tests.scheduler.sim.fake_provisioning import provisioning
from tests.untraced import untraced


def test_run_d_starts_without_on_demand_servers_and_offers_one_pool_per_model() -> None:
    nodes = tiered_nodes(elastic_pool(cluster_named("mixed-64"), 2), {"H100-SXM5-80GB": 2, "A100-SXM4-80GB": 4})
    kept, scaler = autoscaled_pools(nodes, seed=42)
    assert all(node.tier != CapacityTier.ON_DEMAND for node in kept)
    on_demand = [node for node in nodes if node.tier == CapacityTier.ON_DEMAND]
    assert len(kept) + len(on_demand) == len(nodes)
    offers = {pool.offering.gpu_model: pool.offering for pool in scaler.pools}
    for model, offer in offers.items():
        assert offer.max_nodes == sum(node.gpu_model == model for node in on_demand)
        assert offer.price_per_gpu_hour == price_per_gpu_hour(model, CapacityTier.ON_DEMAND)
        assert offer.arrival_s == pytest.approx(default_arrival_s(model))
        assert offer.pool == f"od-{model}"


@untraced
def test_run_d_bills_its_node_requests_from_request_to_release(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(PLANNERS, "provisioning", provisioning(microcosm))
    _, runtimes = load_runtimes(None)
    # A half hour in which some job waits long enough for a node request: on `serving` production no longer waits
    # there since it starts oversized with its way back (docs/scheduling-rules.md §4a), on `balanced` a job does.
    config = WorkloadConfig(seed=42, load=1.2, hours=0.5, warmup_s=0.0, inference_share=MIXES["balanced"])
    workload = generate(cluster_named("mixed-64"), config, runtimes)
    result = run_cost(workload, CostConfig(pool_factor=1, planner="provisioning"))
    run = result.run(RUN_AUTOSCALED)
    assert run.requests_made and run.requests_made > 0
    assert run.autoscaled_node_hours and run.autoscaled_node_hours > 0
    assert run.autoscaled_cost and 0 < run.autoscaled_cost <= run.metered_cost
    assert run.total_cost == pytest.approx(run.reserved_cost + run.metered_cost)
    assert run.stocked_out_node_hours is not None and run.requests_failed is not None
    assert result.run(RUN_TIERED).requests_made is None  # the fixed pools ask for nothing
    again = run_cost(workload, CostConfig(pool_factor=1, planner="provisioning")).run(RUN_AUTOSCALED)
    assert (again.total_cost, again.requests_made) == (run.total_cost, run.requests_made)  # same seed, same bill
