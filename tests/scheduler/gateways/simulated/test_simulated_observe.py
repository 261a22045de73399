"""The simulated fleet's observation read as value tuples, with one walk of the fleet: the same view as the model
instances give, and a cost that does not grow with the spot nodes whose interruption draws come out empty."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduler.models import Node, SimulatedNodeState, gpu_layouts, node_facts, node_observation
from scheduler.services.fleet import node_register
from tests.scheduler.loop_helpers import Clock, fleet

pytestmark = pytest.mark.django_db


def _spot(count: int) -> None:
    for i in range(count):
        node_register(
            name=f"spot-{i}",
            gpu_model="A100-PCIE-40GB",
            gpu_count=4,
            interconnect="nvlink-pairs",
            leaf_switch="leaf-2",
            spine="spine-1",
            tier="spot",
            price_per_gpu_hour="0.6650",
        )


def test_a_node_read_as_values_is_observed_as_its_model_instance_is(team: Any, clock: Clock) -> None:
    """The MIG-partitioned node's layouts, the others' none, labels, price and fabric alike."""
    Node.objects.filter(name="a100-res-1").update(labels={"zone": "a"}, zone="eu-1a")
    layouts = gpu_layouts()
    by_values = {
        facts.name: node_observation(facts, layouts.get(facts.pk, {}), schedulable=True)
        for facts in node_facts(Node.objects.all())
    }
    instances = Node.objects.select_related("gpu_model").prefetch_related("gpus")
    assert by_values == {row.name: row.observation(schedulable=True) for row in instances}
    assert any(any(layout) for layout in by_values["mig-od-1"].mig)
    assert fleet(clock).observe().nodes == tuple(by_values[name] for name in sorted(by_values))


@pytest.mark.parametrize("rate", [1e-9, 1e9])  # per node and hour: no draw comes out, or every one does
def test_the_spot_draws_are_written_in_one_statement_whatever_the_spot_nodes(team: Any, clock: Clock, rate) -> None:
    """Every spot node's draw is timed; one that comes out empty changes only that time, written for all of them in one
    statement; one that brings a notice is a change of its own, saved whole."""
    counts = {}
    for extra in (0, 6):  # spot nodes besides the seed's one
        _spot(extra)
        gateway = fleet(clock, interruptions_per_node_hour=rate)
        gateway.observe()  # the first look at a node creates its state and starts its draws
        clock.advance(10)
        with CaptureQueriesContext(connection) as queries:
            gateway.observe()
        counts[extra] = len(queries)
        states = SimulatedNodeState.objects.filter(node__tier="spot")
        if rate < 1:
            assert {state.interruptions_checked_at for state in states} == {clock.now}
            assert not states.filter(notice_at__isnull=False).exists()
        else:
            assert {state.notice_at for state in states} == {clock.now}
        SimulatedNodeState.objects.all().delete()  # the next count starts from a first look again
    assert counts[6] == counts[0] + (6 if rate > 1 else 0)
