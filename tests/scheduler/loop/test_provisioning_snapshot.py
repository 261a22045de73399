"""What the engine is told of on-demand capacity (scheduler.bridge.provisioning): offerings with their arrival and
price, requests in flight, recent failures, empty autoscaled nodes, and the budget left today."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from billing.models import GpuPrice
from jobs.models import Job
from scheduler.autoscaled import AutoscaledPool, NodeRequest, NodeRequestStatus, OnDemandBudget
from scheduler.bridge.provisioning import pools_read, provisioning_read
from scheduler.bridge.snapshot import build, inventory_nodes
from scheduler.core import Policy, default_arrival_s
from scheduler.gateways.protocol import Observation
from scheduler.models import GpuModel, Node
from scheduler.services.fleet import node_register
from teams.models import Team
from tests.scheduler.loop.provisioning_helpers import A100, pool_seed
from tests.scheduler.loop_helpers import team_seed

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def _job(team: Team) -> Job:
    return Job.objects.create(team=team, name="peak", kind="training", gpus=8, submitted_at=NOW - timedelta(hours=1))


def _request(job: Job, pool: AutoscaledPool, *, state: str, at: datetime, **values: Any) -> NodeRequest:
    return NodeRequest.objects.create(
        job=job,
        pool=pool,
        nodes=values.pop("nodes", 1),
        gpus_per_node=8,
        gpu_hours=values.pop("gpu_hours", Decimal(8)),
        state=state,
        requested_at=at,
        state_since=values.pop("state_since", at),
        arrives_at=at + timedelta(minutes=10),
        **values,
    )


def test_without_an_enabled_pool_nothing_is_read_beyond_the_pools() -> None:
    pool_seed(enabled=False)
    with CaptureQueriesContext(connection) as queries:
        read = provisioning_read(pools=pools_read(), now=NOW.timestamp())
    assert len(queries) == 1
    assert read.provisioning.offerings == () and read.failure_notes == {}
    with CaptureQueriesContext(connection) as queries:
        assert provisioning_read(pools=[], now=NOW.timestamp()).provisioning.offerings == ()
    assert len(queries) == 0


def test_arrival_is_the_median_of_the_pools_history_else_its_default_else_the_documented_one() -> None:
    team = team_seed()
    job = _job(team)
    observed = pool_seed("observed", arrival_s=60.0)
    own = pool_seed("own", arrival_s=120.0)
    pool_seed("documented", arrival_s=None)
    for minutes in (4, 6, 20):  # request → provisioned: the median is 6 minutes
        at = NOW - timedelta(hours=minutes)
        _request(
            job, observed, state=NodeRequestStatus.FULFILLED, at=at, provisioned_at=at + timedelta(minutes=minutes)
        )
    _request(job, own, state=NodeRequestStatus.FAILED, at=NOW - timedelta(days=1))  # never provisioned: no history
    offerings = {o.pool: o for o in provisioning_read(pools=pools_read(), now=NOW.timestamp()).provisioning.offerings}
    assert offerings["observed"].arrival_s == 360.0
    assert offerings["own"].arrival_s == 120.0
    assert offerings["documented"].arrival_s == default_arrival_s(A100)  # the documented provisioning model
    # The defaults are the cluster's job time: on the simulated fleet at 60×, a sixtieth in real seconds.
    fast = {
        o.pool: o for o in provisioning_read(pools=pools_read(), now=NOW.timestamp(), speed=60).provisioning.offerings
    }
    assert (fast["own"].arrival_s, fast["observed"].arrival_s) == (2.0, 360.0)
    assert (fast["own"].gpu_model, fast["own"].gpu_count, fast["own"].max_nodes) == (A100, 8, 4)


def test_a_pool_without_a_price_takes_the_catalogs_on_demand_price_else_the_default_catalogs() -> None:
    pool_seed("catalogued", price_per_gpu_hour=None)
    pool_seed("h100", price_per_gpu_hour=None, gpu_model=GpuModel.objects.get(name="H100-SXM5-80GB"))
    GpuPrice.objects.create(
        gpu_model=GpuModel.objects.get(name=A100),
        tier="on-demand",
        price_per_gpu_hour="4.1000",
        effective_from=date(2026, 1, 1),
    )
    offerings = {o.pool: o for o in provisioning_read(pools=pools_read(), now=NOW.timestamp()).provisioning.offerings}
    assert offerings["catalogued"].price_per_gpu_hour == 4.1
    assert offerings["h100"].price_per_gpu_hour == 6.88  # docs/gpu-facts.md: p5.48xlarge on-demand now, per GPU


def test_requests_in_flight_recent_failures_and_empty_nodes_are_told() -> None:
    team = team_seed()
    job, other = _job(team), _job(team)
    pool = pool_seed()
    pending = _request(job, pool, state=NodeRequestStatus.PENDING, at=NOW - timedelta(minutes=2))
    _request(other, pool, state=NodeRequestStatus.FAILED, at=NOW - timedelta(minutes=5), message="CapacityIsNotFound")
    _request(other, pool, state=NodeRequestStatus.TIMED_OUT, at=NOW - timedelta(hours=2))  # long ago: forgotten
    node_register(
        name="od-1",
        gpu_model=A100,
        gpu_count=8,
        interconnect="nvswitch",
        leaf_switch="",
        spine="",
        tier="on-demand",
        price_per_gpu_hour="3.43",
        pool="a100-od",
    )
    Node.objects.filter(name="od-1").update(idle_since=NOW - timedelta(minutes=7))
    read = provisioning_read(pools=pools_read(), now=NOW.timestamp())
    (request,) = read.provisioning.requests
    assert (request.id, request.job, request.pool, request.nodes) == (str(pending.pk), str(job.pk), "a100-od", 1)
    assert request.arrives_at == (pending.requested_at + timedelta(minutes=10)).timestamp()
    assert read.provisioning.failed == ((str(other.pk), (NOW - timedelta(minutes=5)).timestamp()),)
    assert read.failure_notes == {str(other.pk): "on-demand request failed: CapacityIsNotFound; asking again in 10 min"}
    # Asking again, the job is told why it waits by the engine, not by its old failure.
    _request(other, pool, state=NodeRequestStatus.PENDING, at=NOW - timedelta(minutes=1))
    assert provisioning_read(pools=pools_read(), now=NOW.timestamp()).failure_notes == {}
    assert read.provisioning.idle_since == (("od-1", (NOW - timedelta(minutes=7)).timestamp()),)


def test_budget_left_today_counts_the_autoscaled_nodes_hours_and_the_requests_in_flight() -> None:
    nlp, cv = team_seed("nlp"), team_seed("cv")
    Team.objects.filter(pk=nlp.pk).update(on_demand_gpu_hours_per_day=Decimal(200))
    OnDemandBudget.objects.create(gpu_hours_per_day=Decimal(500))
    pool = pool_seed()
    # nlp's node, asked at 09:00 yesterday and standing since: 12 hours today × 8 GPUs.
    fulfilled = _request(_job(nlp), pool, state=NodeRequestStatus.FULFILLED, at=NOW - timedelta(hours=27))
    node_register(
        name="od-1",
        gpu_model=A100,
        gpu_count=8,
        interconnect="nvswitch",
        leaf_switch="",
        spine="",
        tier="on-demand",
        price_per_gpu_hour="3.43",
        pool="a100-od",
    )
    Node.objects.filter(name="od-1").update(node_request=fulfilled)
    # cv's node, released at 06:00: 6 hours today × 8 GPUs, charged to cv (no budget of its own) and the cluster.
    cv_request = _request(_job(cv), pool, state=NodeRequestStatus.FULFILLED, at=NOW - timedelta(hours=20))
    node_register(
        name="od-2",
        gpu_model=A100,
        gpu_count=8,
        interconnect="nvswitch",
        leaf_switch="",
        spine="",
        tier="on-demand",
        price_per_gpu_hour="3.43",
        pool="a100-od",
    )
    Node.objects.filter(name="od-2").update(node_request=cv_request, released_at=NOW - timedelta(hours=6))
    # nlp's request in flight: its 16 GPU-hours charge until its nodes bill.
    _request(_job(nlp), pool, state=NodeRequestStatus.PENDING, at=NOW - timedelta(minutes=1), gpu_hours=Decimal(16))
    budgets = dict(provisioning_read(pools=pools_read(), now=NOW.timestamp()).provisioning.budget_gpu_hours)
    assert budgets == {"": 500 - 96 - 48 - 16, "nlp": 200 - 96 - 16}


def test_no_budget_set_tells_none() -> None:
    pool_seed()
    assert provisioning_read(pools=pools_read(), now=NOW.timestamp()).provisioning.budget_gpu_hours == ()


def test_a_released_node_is_no_capacity_whether_the_cluster_still_reports_it_or_not() -> None:
    pool_seed()
    for name in ("od-1", "od-2", "od-3"):
        node_register(
            name=name,
            gpu_model=A100,
            gpu_count=8,
            interconnect="nvswitch",
            leaf_switch="",
            spine="",
            tier="on-demand",
            price_per_gpu_hour="3.43",
            pool="a100-od",
        )
    Node.objects.filter(name__in=["od-1", "od-2"]).update(released_at=NOW - timedelta(minutes=1))
    # od-1 is still reported (the autoscaler removes it later), od-2 is gone, od-3 stands.
    observed = tuple(
        node.observation(schedulable=True) for node in Node.objects.filter(name__in=["od-1", "od-3"]).order_by("name")
    )
    built = build(Observation(observed_at=NOW.timestamp(), nodes=observed, jobs={}), Policy(), NOW.timestamp())
    assert [(node.name, node.pool) for node in built.snapshot.nodes] == [("od-3", "a100-od")]
    assert [node.name for node in inventory_nodes()] == ["od-3"]
