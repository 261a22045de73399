"""The simulated fleet's observation read as value tuples, with one walk of the fleet: the same view as the model
instances give, and a cost that does not grow with the spot nodes whose interruption draws come out empty."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduler.gateways.protocol import BindRequest, Device, ReplicaPhase, ReplicaPlacement
from scheduler.models import Node, SimulatedNodeState, SimulatedPod, gpu_layouts, node_facts, node_observation
from scheduler.services.fleet import node_register
from tests.factories import JobFactory
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


def test_a_replica_unchanged_since_the_last_observation_is_the_same_and_the_view_is_a_fresh_fleets(
    team: Any, clock: Clock
) -> None:
    """Pods unchanged, with the same phase, message and readiness, give the last observation's replica objects;
    a replica whose time-dependent state changed (ready after its start-up, succeeded, asked to stop, its node gone)
    or whose pod changed is made again, and every observation is what a fleet keeping nothing observes."""
    gateway = fleet(clock)  # 60x: a start-up of 60 virtual seconds takes 1 s, the ending job 5 s
    jobs = [JobFactory(team=team, gpus=1) for _ in range(4)]
    steady, ending, stopped, spot = jobs
    for job, node, gpu, duration in (
        (steady, "a100-res-1", 0, 100_000.0),
        (ending, "a100-res-1", 1, 300.0),
        (stopped, "a100-res-1", 2, 100_000.0),
        (spot, "pcie-spot-1", 0, 100_000.0),
    ):
        request = BindRequest(
            job=str(job.pk),
            namespace=job.team.namespace,
            name=job.name,
            placements=(ReplicaPlacement(replica=0, node=node, devices=(Device(gpu=gpu),)),),
            duration_s=duration,
        )
        gateway.job_bind(request=request)

    def replicas() -> dict[Any, Any]:
        observation = gateway.observe()
        assert observation == fleet(clock).observe()  # what a fleet that kept nothing sees
        return {job.pk: observation.jobs[str(job.pk)].replicas[0] for job in jobs if str(job.pk) in observation.jobs}

    first = replicas()
    assert not any(replica.ready for replica in first.values())
    clock.advance(1.5)  # start-up over: every replica ready, made again
    second = replicas()
    assert all(second[pk].ready and second[pk] is not first[pk] for pk in first)
    clock.advance(1)
    entries = dict(gateway._replicas)
    third = replicas()
    assert all(third[pk] is second[pk] for pk in first)  # nothing changed
    assert gateway._replicas == entries and all(gateway._replicas[k] is e for k, e in entries.items())  # nor kept anew
    SimulatedPod.objects.filter(job=stopped).update(stop_requested_at=clock.now)  # its row changed
    gateway.notice_give(node="pcie-spot-1", notice_s=0.0)  # the node goes now
    clock.advance(3)  # the ending job's 300 virtual seconds are done
    fourth = replicas()
    assert fourth[steady.pk] is third[steady.pk]
    assert fourth[ending.pk].phase == ReplicaPhase.SUCCEEDED and fourth[ending.pk] is not third[ending.pk]
    assert fourth[stopped.pk].phase == ReplicaPhase.STOPPING
    assert fourth[spot.pk].phase == ReplicaPhase.GONE
