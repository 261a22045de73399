"""A peak served on an autoscaled pool of the simulated fleet, end to end through the loop: the engine's Provision
recorded as a node request and asked of the fleet's autoscaler, the nodes arriving after the pool's arrival time, the
job bound on them, the node empty and released, its cost stopping (docs/billing.md)."""

from __future__ import annotations

import importlib.util
from datetime import timedelta
from decimal import Decimal

import pytest

from billing.capacity import node_lives
from jobs.models import Allocation
from scheduler.autoscaled import NodeRequest, NodeRequestStatus
from scheduler.core.model.provisioning import Provision, Release
from scheduler.core.model.vocabulary import JobState
from scheduler.loop.apply import Retry
from scheduler.loop.cycle import cycle_run
from scheduler.models import CycleStats, Node, SimulatedNodeRequest
from tests.scheduler.loop.provisioning_helpers import (
    A100,
    full_fleet,
    once,
    plans,
    pool_seed,
    request_steps,
    submit,
)
from tests.scheduler.loop_helpers import Clock, fleet, team_seed

pytestmark = pytest.mark.django_db

NO_WAIT = Retry(attempts=2, backoff_s=0.0, sleep=lambda _s: None)


@pytest.mark.usefixtures("hand_decided")
def test_a_peak_grows_an_autoscaled_pool_is_served_and_the_node_is_released(clock: Clock) -> None:
    team = team_seed(guaranteed=100, burst=100)
    gateway = fleet(clock)
    full_fleet(team, clock)
    pool_seed()
    cycle_run(gateway=gateway, retry=NO_WAIT)  # the reserved node fills
    (peak,) = submit(team, clock, "peak", gpus=8, duration_s=600)

    ask = Provision(
        job=str(peak.pk),
        pool="a100-od",
        nodes=1,
        gpu_model=A100,
        gpus_per_node=8,
        placement_group=False,
        gpu_hours=80.0,
        arrives_at=clock.now.timestamp() + 10,
    )
    with plans(once(provisions=(ask,))) as snapshots:
        clock.advance(1)
        report = cycle_run(gateway=gateway, retry=NO_WAIT)
        row = NodeRequest.objects.get()
        assert report.decisions["provisions"] == [
            {"job": str(peak.pk), "pool": "a100-od", "nodes": 1, "request": str(row.pk)}
        ]
        assert f"node request {row.pk} (1 × a100-od for job {peak.pk})" in report.applied
        assert (row.state, row.requested_at, row.gpu_hours) == (NodeRequestStatus.PENDING, clock.now, 80)
        assert CycleStats.objects.get().decisions["provision"] == 1  # /metrics: microcosm_cycle_decisions_total
        assert SimulatedNodeRequest.objects.get().request_id == str(row.pk)
        # The pool is offered to the engine: its price, its own arrival at the fleet's speed (600 virtual s, 60×).
        (offering,) = snapshots[0].provisioning.offerings
        assert (offering.pool, offering.price_per_gpu_hour, offering.arrival_s, offering.max_nodes) == (
            "a100-od",
            3.43,
            10.0,
            4,
        )

        clock.advance(5)  # not arrived yet: the request is capacity coming
        cycle_run(gateway=gateway, retry=NO_WAIT)
        row.refresh_from_db()
        assert row.state == NodeRequestStatus.PENDING
        (coming,) = snapshots[-1].provisioning.requests
        assert (coming.id, coming.job, coming.nodes) == (str(row.pk), str(peak.pk), 1)

        clock.advance(5)  # arrived: provisioned, fulfilled and bound on in one cycle
        report = cycle_run(gateway=gateway, retry=NO_WAIT)
    row.refresh_from_db()
    node = Node.objects.get(pool="a100-od")
    assert row.state == NodeRequestStatus.FULFILLED
    assert row.provisioned_at == row.requested_at + timedelta(seconds=10)
    assert row.node_names == [node.name] and node.node_request_id == row.pk
    assert (node.tier, node.gpu_count, node.price_per_gpu_hour) == ("on-demand", 8, Decimal("3.4300"))
    assert str(row.pk) in report.repairs["requests_fulfilled"]
    # Fulfilled, the request is withdrawn at the autoscaler (a clean-up): the nodes it brought stay.
    assert f"withdraw node request {row.pk}" in report.applied and not SimulatedNodeRequest.objects.exists()
    # A node the inventory registered after its request was settled is linked to it by name all the same.
    Node.objects.filter(pk=node.pk).update(node_request=None)
    clock.advance(1)
    cycle_run(gateway=gateway, retry=NO_WAIT)
    node.refresh_from_db()
    assert node.node_request_id == row.pk
    peak.refresh_from_db()
    assert peak.state == JobState.RUNNING
    assert set(Allocation.objects.filter(job=peak).values_list("node__name", flat=True)) == {node.name}

    # The peak ends (600 virtual s: 10 s); the node stands empty from then, and the engine gives it back.
    clock.advance(10)
    cycle_run(gateway=gateway, retry=NO_WAIT)
    peak.refresh_from_db()
    node.refresh_from_db()
    assert peak.state == JobState.COMPLETED
    (ended,) = set(Allocation.objects.filter(job=peak).values_list("ended_at", flat=True))
    assert ended is not None and node.idle_since == ended  # empty since its only work ended
    emptied = clock.now
    clock.advance(30)
    release = Release(node=node.name, pool="a100-od", idle_since=emptied.timestamp())
    with plans(once(releases=(release,))):
        report = cycle_run(gateway=gateway, retry=NO_WAIT)
    node.refresh_from_db()
    assert node.released_at == clock.now
    assert report.decisions["releases"] == [{"node": node.name, "pool": "a100-od"}]
    assert f"release node {node.name}" in report.applied
    clock.advance(1)
    report = cycle_run(gateway=gateway, retry=NO_WAIT)
    assert node.name not in {n.name for n in gateway.observe().nodes}  # the autoscaler removed it

    # The peak's timeline tells where its capacity came from and when its cost stopped.
    assert request_steps(peak) == [
        f"On-demand nodes requested: 1 × 8 GPUs of pool a100-od (request {row.pk})",
        f"On-demand nodes provisioned: {node.name} (request {row.pk})",
        f"On-demand nodes joined the cluster: {node.name} (request {row.pk})",
        f"On-demand node {node.name} released, its cost stops (request {row.pk})",
    ]
    # Billed from the request to the release, whatever the inventory does with the row afterwards.
    (life,) = [life for life in node_lives() if life.tier == "on-demand"]
    assert (life.registered_at, life.gone_at) == (row.requested_at, node.released_at)


ENGINE_RULE = importlib.util.find_spec("scheduler.core.decisions.provisioning") is not None


@pytest.mark.skipif(not ENGINE_RULE, reason="the engine's provisioning rule (docs/scheduling-rules.md §9) is not here")
def test_the_engine_asks_for_a_peak_the_loop_serves_it_and_the_engine_gives_the_node_back(
    clock: Clock, settings
) -> None:
    settings.SCHEDULER = {**settings.SCHEDULER, "release_idle_s": 30.0}
    team = team_seed(guaranteed=100, burst=100)
    gateway = fleet(clock)
    full_fleet(team, clock)
    pool_seed()
    cycle_run(gateway=gateway, retry=NO_WAIT)  # the reserved node fills
    (peak,) = submit(team, clock, "peak", gpus=8, duration_s=600)

    clock.advance(1)
    report = cycle_run(gateway=gateway, retry=NO_WAIT)  # the engine asks; the loop records and asks the fleet
    row = NodeRequest.objects.get()
    assert (row.job_id, row.pool.name, row.nodes, row.state) == (peak.pk, "a100-od", 1, NodeRequestStatus.PENDING)
    assert report.decisions["provisions"][0]["request"] == str(row.pk)
    peak.refresh_from_db()
    assert peak.state == JobState.PENDING and "a100-od" in peak.state_reason

    clock.advance(10)
    cycle_run(gateway=gateway, retry=NO_WAIT)  # arrived: fulfilled and bound on
    row.refresh_from_db()
    peak.refresh_from_db()
    assert row.state == NodeRequestStatus.FULFILLED and peak.state == JobState.RUNNING
    (node,) = Node.objects.filter(pool="a100-od")

    clock.advance(11)
    cycle_run(gateway=gateway, retry=NO_WAIT)  # the peak ends: the node stands empty
    clock.advance(31)
    report = cycle_run(gateway=gateway, retry=NO_WAIT)  # empty past release_idle_s: given back
    node.refresh_from_db()
    assert report.decisions["releases"] == [{"node": node.name, "pool": "a100-od"}]
    assert node.released_at == clock.now
    clock.advance(1)
    cycle_run(gateway=gateway, retry=NO_WAIT)
    assert node.name not in {n.name for n in gateway.observe().nodes}
    assert NodeRequest.objects.count() == 1  # nothing more was asked
