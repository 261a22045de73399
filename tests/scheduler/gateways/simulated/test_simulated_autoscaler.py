"""The simulated fleet's autoscaler (scheduler.gateways.simulated.autoscaler): a request's nodes join all at once after
the pool's arrival time, or it fails (a seeded stockout, a pool at its ceiling); withdrawals and releases."""

from __future__ import annotations

from datetime import timedelta

import pytest

from scheduler.errors import GatewayConflict
from scheduler.gateways.protocol import NodeRequestSpec, NodeRequestState, ProvisioningGateway
from scheduler.models import Node
from tests.scheduler.loop.provisioning_helpers import A100, pool_seed
from tests.scheduler.loop_helpers import Clock, fleet, fleet_seed

pytestmark = pytest.mark.django_db


def _spec(request: str, *, nodes: int = 1, placement_group: bool = False, pool: str = "a100-od") -> NodeRequestSpec:
    return NodeRequestSpec(
        id=request,
        job="42",
        namespace="team-nlp",
        pool=pool,
        nodes=nodes,
        gpu_model=A100,
        gpus_per_node=8,
        placement_group=placement_group,
        autoscaler="simulated",
        node_selector={"microcosm.io/pool": pool},
        price_per_gpu_hour=3.43,
    )


def _states(clock: Clock, **settings: float) -> dict[str, NodeRequestState]:
    gateway = fleet(clock, **settings)
    return {r.id: r.state for r in gateway.observe().node_requests}


def test_the_fleet_is_a_provisioning_gateway_whose_nodes_join_all_at_once_after_the_arrival(clock: Clock) -> None:
    pool_seed(max_nodes=4, interconnect="nvswitch", fabric="efa", placement_group=True)
    gateway = fleet(clock)
    assert isinstance(gateway, ProvisioningGateway)
    asked = clock.now
    gateway.nodes_request(request=_spec("1", nodes=2, placement_group=True))
    gateway.nodes_request(request=_spec("1", nodes=2, placement_group=True))  # the same id: nothing more
    clock.advance(9.9)  # the pool's 600 virtual seconds are 10 s at 60×
    (request,) = gateway.observe().node_requests
    assert (request.state, request.nodes) == (NodeRequestState.PENDING, ())
    assert not Node.objects.filter(pool="a100-od").exists()
    clock.advance(0.1)
    observation = gateway.observe()
    (request,) = observation.node_requests
    assert request.state == NodeRequestState.PROVISIONED and request.message == "CapacityIsProvisioned"
    assert request.since == (asked + timedelta(seconds=10)).timestamp()
    assert request.nodes == ("a100-od-1-0", "a100-od-1-1")
    joined = {n.name: n for n in observation.nodes if n.pool == "a100-od"}
    assert set(joined) == set(request.nodes)
    for node in joined.values():  # one placement group and leaf for the request; the pool's labels and fabric
        assert (node.tier, node.leaf, node.placement_group, node.fabric) == (
            "on-demand",
            "a100-od-1",
            "a100-od-1",
            "efa",
        )
        assert node.labels == {"microcosm.io/pool": "a100-od"} and node.price_per_gpu_hour == 3.43


def test_an_unknown_pool_is_refused(clock: Clock) -> None:
    with pytest.raises(GatewayConflict, match="no autoscaled pool 'gone'"):
        fleet(clock).nodes_request(request=_spec("1", pool="gone"))


def test_stockouts_are_drawn_from_the_seed(clock: Clock) -> None:
    pool_seed(max_nodes=100)
    gateway = fleet(clock, stockout_probability=0.5, seed=7)
    for i in range(1, 11):
        gateway.nodes_request(request=_spec(str(i)))
    clock.advance(10)
    outcomes = {r.id: r.state for r in gateway.observe().node_requests}
    failed = sorted((i for i, state in outcomes.items() if state == NodeRequestState.FAILED), key=int)
    assert 0 < len(failed) < 10  # a draw per request, at the chance asked
    # The same seed, the same outcomes (tests and demos are exact): a second fleet over the same requests agrees.
    assert _states(clock, stockout_probability=0.5, seed=7) == outcomes
    request = next(r for r in gateway.observe().node_requests if r.state == NodeRequestState.FAILED)
    assert request.message == "CapacityIsNotFound: no A100-SXM4-80GB capacity in the simulated cloud (a stockout)"


def test_a_pool_is_never_grown_past_its_ceiling(clock: Clock) -> None:
    pool_seed(max_nodes=2)
    gateway = fleet(clock)
    gateway.nodes_request(request=_spec("1", nodes=2))
    gateway.nodes_request(request=_spec("2", nodes=1))
    clock.advance(10)
    states = {r.id: (r.state, r.message) for r in gateway.observe().node_requests}
    assert states["1"][0] == NodeRequestState.PROVISIONED
    assert states["2"] == (
        NodeRequestState.FAILED,
        "CapacityIsNotFound: pool a100-od is at its maximum size of 2 nodes",
    )


def test_withdrawing_forgets_the_request_but_not_its_nodes_and_a_release_removes_a_node_for_good(clock: Clock) -> None:
    pool_seed()
    gateway = fleet(clock)
    gateway.nodes_request(request=_spec("1"))
    clock.advance(10)
    gateway.observe()
    gateway.nodes_request_withdraw(request="1", namespace="team-nlp")
    gateway.nodes_request_withdraw(request="unknown", namespace="team-nlp")  # nothing
    observation = gateway.observe()
    assert observation.node_requests == ()
    assert "a100-od-1-0" in {n.name for n in observation.nodes}
    gateway.node_release(node="a100-od-1-0")
    gateway.node_release(node="a100-od-1-0")  # again: nothing
    gateway.node_release(node="no-such-node")  # nothing
    clock.advance(3600)  # a released node never comes back
    assert "a100-od-1-0" not in {n.name for n in gateway.observe().nodes}


def test_a_node_of_no_pool_is_never_released(clock: Clock) -> None:
    fleet_seed()
    gateway = fleet(clock)
    gateway.node_release(node="a100-res-1")
    assert "a100-res-1" in {n.name for n in gateway.observe().nodes}
