"""Node requests whose autoscaler cannot name the nodes it brought, or says why it has none yet (the Cluster
Autoscaler: a ProvisioningRequest is ``Provisioned`` once the scale-up is asked, its nodes register minutes later
with only their node group's label; ``Provisioned=False, CapacityIsNotFound`` while the cloud has none). The loop's
side of scheduler/gateways/kube/provisioning.py, on the simulated fleet made to answer as the Cluster Autoscaler
does; the whole path on the emulated cluster is tests/scheduler/gateways/kube/test_kube_peak.py."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

import pytest

from jobs.models import Job
from scheduler.autoscaled import NodeRequest, NodeRequestStatus
from scheduler.core.model.provisioning import Provision
from scheduler.gateways.protocol import NodeRequestState, Observation
from scheduler.gateways.simulated import SimulatedFleet
from scheduler.loop.apply import Retry
from scheduler.loop.cycle import cycle_run
from scheduler.loop.provisioning import _nodes_link
from scheduler.models import Node
from scheduler.services.fleet import node_register
from teams.models import Team
from tests.scheduler.loop.provisioning_helpers import A100, full_fleet, once, plans, pool_seed, submit
from tests.scheduler.loop_helpers import Clock, fleet, team_seed

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("hand_decided")]

NO_WAIT = Retry(attempts=2, backoff_s=0.0, sleep=lambda _s: None)
STOCKOUT = "CapacityIsNotFound: Capacity is not found, CA will try to find it later."


class _AsTheClusterAutoscaler(SimulatedFleet):
    """Reports every request without the nodes it brought, and one still pending as provisioned (the scale-up
    asked) — or, with ``stockout``, as pending with the CA's words."""

    stockout = False

    def observe(self) -> Observation:
        observation = super().observe()
        if self.stockout:
            state, message = NodeRequestState.PENDING, STOCKOUT
        else:
            state, message = NodeRequestState.PROVISIONED, "CapacityIsProvisioned: Capacity is found in the cluster"
        requests = tuple(
            replace(r, state=state, message=message, nodes=(), since=observation.observed_at)
            for r in observation.node_requests
        )
        return replace(observation, node_requests=requests)


def _waiting(clock: Clock, gateway: SimulatedFleet) -> tuple[Team, Job]:
    team = team_seed(guaranteed=100, burst=100)
    full_fleet(team, clock)
    cycle_run(gateway=gateway, retry=NO_WAIT)
    (job,) = submit(team, clock, "peak")
    return team, job


def _ask(job: Job, clock: Clock) -> Provision:
    return Provision(
        job=str(job.pk),
        pool="a100-od",
        nodes=1,
        gpu_model=A100,
        gpus_per_node=8,
        placement_group=False,
        gpu_hours=8.0,
        arrives_at=clock.now.timestamp() + 10,
    )


def test_a_request_whose_autoscaler_names_no_nodes_is_capacity_coming_until_its_pools_node_joins(clock) -> None:
    gateway = _AsTheClusterAutoscaler(fleet(clock).settings, clock=clock)
    _team, job = _waiting(clock, gateway)
    pool_seed()
    with plans(once(provisions=(_ask(job, clock),))):
        cycle_run(gateway=gateway, retry=NO_WAIT)
        row = NodeRequest.objects.get()
        clock.advance(1)  # provisioned (the scale-up asked), no node yet: still in flight, nothing asked again
        report = cycle_run(gateway=gateway, retry=NO_WAIT)
    row.refresh_from_db()
    assert (row.state, row.node_names) == (NodeRequestStatus.PROVISIONED, [])
    assert report.repairs["requests_provisioned"] == [str(row.pk)] and not report.decisions.get("provisions")
    assert NodeRequest.objects.count() == 1

    clock.advance(10)  # the pool's node joins: it is the request's
    report = cycle_run(gateway=gateway, retry=NO_WAIT)
    row.refresh_from_db()
    node = Node.objects.get(pool="a100-od")
    assert (row.state, row.node_names) == (NodeRequestStatus.FULFILLED, [node.name])
    assert node.node_request_id == row.pk  # billed from the request
    assert str(row.pk) in report.repairs["requests_fulfilled"]


def test_a_pending_requests_words_reach_its_jobs_reason_and_its_timeout(clock, settings) -> None:
    settings.SCHEDULER = {**settings.SCHEDULER, "node_request_timeout_s": 60.0}
    gateway = _AsTheClusterAutoscaler(fleet(clock).settings, clock=clock)
    gateway.stockout = True
    _team, job = _waiting(clock, gateway)
    pool_seed(arrival_s=100_000.0)  # virtual: the fleet's own node does not come while the test runs
    with plans(once(provisions=(_ask(job, clock),))):
        cycle_run(gateway=gateway, retry=NO_WAIT)
        clock.advance(1)
        cycle_run(gateway=gateway, retry=NO_WAIT)
    row = NodeRequest.objects.get()
    job.refresh_from_db()
    assert (row.state, row.message) == (NodeRequestStatus.PENDING, STOCKOUT)
    assert "asked of pool a100-od for it" in job.state_reason and f"the autoscaler: {STOCKOUT}" in job.state_reason

    clock.advance(61)
    cycle_run(gateway=gateway, retry=NO_WAIT)
    row.refresh_from_db()
    job.refresh_from_db()
    assert (row.state, row.message) == (NodeRequestStatus.TIMED_OUT, f"not provisioned within 1 min ({STOCKOUT})")
    assert job.state_reason.startswith(f"on-demand request timed out: not provisioned within 1 min ({STOCKOUT})")


def test_a_linked_node_the_cluster_reported_no_price_for_takes_its_pools(clock) -> None:
    gateway = fleet(clock)
    _team, job = _waiting(clock, gateway)
    pool = pool_seed(price_per_gpu_hour=Decimal("4.1000"))
    row = NodeRequest.objects.create(
        job=job,
        pool=pool,
        nodes=2,
        gpus_per_node=8,
        gpu_hours=16,
        state=NodeRequestStatus.FULFILLED,
        requested_at=clock.now,
        state_since=clock.now,
        arrives_at=clock.now,
        provisioned_at=clock.now,
        node_names=["od-1", "od-2"],
    )
    for name, price in (("od-1", Decimal(0)), ("od-2", Decimal("3.0000"))):
        node_register(
            name=name,
            gpu_model=A100,
            gpu_count=8,
            interconnect="nvswitch",
            leaf_switch="leaf-2",
            spine="spine-1",
            tier="on-demand",
            price_per_gpu_hour=price,
            pool="a100-od",
        )
    _nodes_link(clock.now)
    assert dict(Node.objects.filter(pool="a100-od").values_list("name", "node_request_id")) == {
        "od-1": row.pk,
        "od-2": row.pk,
    }
    prices = dict(Node.objects.filter(pool="a100-od").values_list("name", "price_per_gpu_hour"))
    assert prices == {"od-1": Decimal("4.1000"), "od-2": Decimal("3.0000")}  # a price the cluster gave is kept
