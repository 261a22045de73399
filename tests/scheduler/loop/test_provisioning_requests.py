"""Node requests that do not go as asked: a stockout, a timeout, a request recorded but never asked, a withdrawal, a
refusal, a request given up that the autoscaler still holds; and why the job waits meanwhile."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from jobs.models import Job
from scheduler.autoscaled import NodeRequest, NodeRequestStatus
from scheduler.core import Plan, Snapshot
from scheduler.core.model.provisioning import Provision, Release, Withdraw
from scheduler.core.model.vocabulary import BlockerKind
from scheduler.errors import GatewayConflict, GatewayRetryable
from scheduler.gateways.protocol import NodeRequestSpec, NodeRequestState, Observation
from scheduler.gateways.simulated import SimulatedFleet
from scheduler.loop.apply import NodeReleaseOp, ProvisionOp, Retry, apply_ops
from scheduler.loop.cycle import cycle_run
from scheduler.models import Node, SimulatedNodeRequest
from teams.models import Team
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

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("hand_decided")]

NO_WAIT = Retry(attempts=2, backoff_s=0.0, sleep=lambda _s: None)


def _ask(job: Job, clock: Clock, *, nodes: int = 1) -> Provision:
    return Provision(
        job=str(job.pk),
        pool="a100-od",
        nodes=nodes,
        gpu_model=A100,
        gpus_per_node=8,
        placement_group=False,
        gpu_hours=8.0 * nodes,
        arrives_at=clock.now.timestamp() + 10,
    )


def _waiting(clock: Clock, gateway: SimulatedFleet) -> tuple[Team, Job]:
    team = team_seed(guaranteed=100, burst=100)
    full_fleet(team, clock)
    cycle_run(gateway=gateway, retry=NO_WAIT)
    (job,) = submit(team, clock, "peak")
    return team, job


def test_a_stockout_fails_the_request_withdraws_it_and_the_job_says_when_it_asks_again(clock: Clock) -> None:
    gateway = fleet(clock, stockout_probability=1.0)
    _team, job = _waiting(clock, gateway)
    pool_seed()
    with plans(once(provisions=(_ask(job, clock),))) as snapshots:
        cycle_run(gateway=gateway, retry=NO_WAIT)
        clock.advance(11)  # the pool's arrival time: the autoscaler found no capacity
        report = cycle_run(gateway=gateway, retry=NO_WAIT)
    row = NodeRequest.objects.get()
    assert row.state == NodeRequestStatus.FAILED and row.state_since == clock.now
    assert row.message.startswith("CapacityIsNotFound: no A100-SXM4-80GB capacity")
    assert report.repairs["requests_failed"] == [str(row.pk)]
    assert f"withdraw node request {row.pk}" in report.applied
    assert not SimulatedNodeRequest.objects.exists()  # withdrawn: the autoscaler holds it no more
    assert Node.objects.filter(pool="a100-od").count() == 0
    # The engine is told the job's request failed (it asks again only Policy.provision_retry_s later) ...
    assert snapshots[-1].provisioning.failed == ((str(job.pk), row.state_since.timestamp()),)
    assert snapshots[-1].provisioning.requests == ()
    # ... and the job's reason says why it still waits.
    job.refresh_from_db()
    assert job.state_reason.startswith("on-demand request failed: CapacityIsNotFound: no A100-SXM4-80GB capacity")
    assert job.state_reason.endswith("; asking again in 15 min")
    # The job's timeline tells both steps, the failure in the autoscaler's words.
    assert request_steps(job) == [
        f"On-demand nodes requested: 1 × 8 GPUs of pool a100-od (request {row.pk})",
        f"On-demand node request failed: {row.message} (request {row.pk})",
    ]


def test_a_pool_at_its_ceiling_fails_the_request_as_no_capacity(clock: Clock) -> None:
    gateway = fleet(clock)
    _team, job = _waiting(clock, gateway)
    pool_seed(max_nodes=1)
    with plans(once(provisions=(_ask(job, clock, nodes=2),))):
        cycle_run(gateway=gateway, retry=NO_WAIT)
        clock.advance(11)
        cycle_run(gateway=gateway, retry=NO_WAIT)
    row = NodeRequest.objects.get()
    assert (row.state, row.message) == (
        NodeRequestStatus.FAILED,
        "CapacityIsNotFound: pool a100-od is at its maximum size of 1 nodes",
    )


def test_a_request_not_provisioned_in_time_is_withdrawn_as_timed_out(clock: Clock, settings) -> None:
    settings.SCHEDULER = {**settings.SCHEDULER, "node_request_timeout_s": 60.0}
    gateway = fleet(clock)
    _team, job = _waiting(clock, gateway)
    pool_seed(arrival_s=100_000.0)  # virtual: some 28 minutes of the test fleet's clock
    with plans(once(provisions=(_ask(job, clock),))):
        cycle_run(gateway=gateway, retry=NO_WAIT)
        clock.advance(61)
        report = cycle_run(gateway=gateway, retry=NO_WAIT)
    row = NodeRequest.objects.get()
    assert (row.state, row.message) == (NodeRequestStatus.TIMED_OUT, "not provisioned within 1 min")
    assert report.repairs["requests_timed_out"] == [str(row.pk)]
    assert not SimulatedNodeRequest.objects.exists()
    job.refresh_from_db()
    assert job.state_reason.startswith("on-demand request timed out: not provisioned within 1 min; asking again in")
    assert (
        request_steps(job)[-1] == f"On-demand node request timed out: not provisioned within 1 min (request {row.pk})"
    )


def test_a_request_recorded_but_never_asked_is_asked_again(clock: Clock) -> None:
    """A worker that died between the record and the gateway call: the next cycle asks (idempotently)."""
    gateway = fleet(clock)
    _team, job = _waiting(clock, gateway)
    pool_seed()
    with plans(once(provisions=(_ask(job, clock),))):
        cycle_run(gateway=gateway, retry=NO_WAIT)
    row = NodeRequest.objects.get()
    SimulatedNodeRequest.objects.all().delete()  # as if the ask never reached the autoscaler
    clock.advance(1)
    report = cycle_run(gateway=gateway, retry=NO_WAIT)
    assert report.repairs["requests_asked_again"] == [str(row.pk)]
    assert SimulatedNodeRequest.objects.get().request_id == str(row.pk)
    clock.advance(1)
    report = cycle_run(gateway=gateway, retry=NO_WAIT)  # held now: nothing to repair
    assert "requests_asked_again" not in report.repairs


def test_a_withdrawal_gives_the_request_up_at_both_ends_and_again_if_the_autoscaler_kept_it(clock: Clock) -> None:
    gateway = fleet(clock)
    _team, job = _waiting(clock, gateway)
    pool_seed()
    with plans(once(provisions=(_ask(job, clock),))):
        cycle_run(gateway=gateway, retry=NO_WAIT)
    row = NodeRequest.objects.get()
    withdraw = Withdraw(request=str(row.pk), job=str(job.pk), reason="bound on reserved capacity")
    with plans(once(withdrawals=(withdraw,))):
        clock.advance(1)
        report = cycle_run(gateway=gateway, retry=NO_WAIT)
    row.refresh_from_db()
    assert (row.state, row.message) == (NodeRequestStatus.WITHDRAWN, "bound on reserved capacity")
    assert report.decisions["withdrawals"] == [
        {"request": str(row.pk), "job": str(job.pk), "reason": "bound on reserved capacity"}
    ]
    assert not SimulatedNodeRequest.objects.exists()
    assert request_steps(job)[-1] == f"On-demand node request withdrawn: bound on reserved capacity (request {row.pk})"
    # A withdrawal lost on the way: the autoscaler still reports the request, so the loop withdraws it again.
    gateway.nodes_request(request=_spec(row.pk, job))
    clock.advance(1)
    report = cycle_run(gateway=gateway, retry=NO_WAIT)
    assert report.repairs["requests_withdrawn_again"] == [str(row.pk)]
    assert not SimulatedNodeRequest.objects.exists()
    assert len(request_steps(job)) == 2  # withdrawn again at the gateway: no step of the request's own


def _spec(pk: int, job: Job) -> NodeRequestSpec:
    return NodeRequestSpec(
        id=str(pk),
        job=str(job.pk),
        namespace=job.team.namespace,
        pool="a100-od",
        nodes=1,
        gpu_model=A100,
        gpus_per_node=8,
        placement_group=False,
        autoscaler="simulated",
    )


class _Refusing(SimulatedFleet):
    def nodes_request(self, *, request: NodeRequestSpec) -> None:
        raise GatewayConflict("exceeded quota: nvidia.com/gpu")


def test_a_refused_request_is_failed_with_the_refusal_and_nothing_is_left_half_done(clock: Clock) -> None:
    gateway = _Refusing(fleet(clock).settings, clock=clock)
    _team, job = _waiting(clock, gateway)
    pool_seed()
    with plans(once(provisions=(_ask(job, clock),))):
        report = cycle_run(gateway=gateway, retry=NO_WAIT)
    row = NodeRequest.objects.get()
    assert report.requests_refused == [str(row.pk)]
    assert (row.state, row.message) == (NodeRequestStatus.FAILED, "refused: exceeded quota: nvidia.com/gpu")
    assert not SimulatedNodeRequest.objects.exists()
    assert request_steps(job)[-1] == (
        f"On-demand node request failed: refused: exceeded quota: nvidia.com/gpu (request {row.pk})"
    )


def test_a_provision_for_a_job_no_longer_waiting_or_already_asking_records_nothing(clock: Clock) -> None:
    gateway = fleet(clock)
    _team, job = _waiting(clock, gateway)
    pool_seed()
    twice = (_ask(job, clock), _ask(job, clock))  # the same job twice in one plan: asked once
    with plans(once(provisions=twice)):
        report = cycle_run(gateway=gateway, retry=NO_WAIT)
    assert len(report.decisions["provisions"]) == 1
    with plans(once(provisions=(_ask(job, clock),))):  # a request in flight already: not asked again
        clock.advance(1)
        report = cycle_run(gateway=gateway, retry=NO_WAIT)
    assert "provisions" not in report.decisions
    Job.objects.filter(pk=job.pk).update(state="cancelled", finished_at=clock.now)
    NodeRequest.objects.all().delete()
    with plans(once(provisions=(_ask(job, clock),))):
        clock.advance(1)
        report = cycle_run(gateway=gateway, retry=NO_WAIT)
    assert "provisions" not in report.decisions and not NodeRequest.objects.exists()


def test_a_disabled_or_unknown_pool_records_nothing(clock: Clock) -> None:
    gateway = fleet(clock)
    _team, job = _waiting(clock, gateway)
    pool_seed(enabled=False)
    with plans(once(provisions=(_ask(job, clock),))) as snapshots:
        report = cycle_run(gateway=gateway, retry=NO_WAIT)
    assert "provisions" not in report.decisions and not NodeRequest.objects.exists()
    assert snapshots[0].provisioning.offerings == ()


def test_a_job_waiting_for_its_nodes_shows_the_engines_reason(clock: Clock) -> None:
    gateway = fleet(clock)
    _team, job = _waiting(clock, gateway)
    reason = "waits for 1 on-demand node of a100-od, expected in about 10 min"

    def decide(_snapshot: Snapshot, plan: Plan) -> Plan:
        waiting = tuple(
            replace(w, reason=reason, blocker=BlockerKind.PROVISIONING, eta_s=600.0) if w.job == str(job.pk) else w
            for w in plan.waiting
        )
        return replace(plan, waiting=waiting)

    with plans(decide):
        clock.advance(1)
        cycle_run(gateway=gateway, retry=NO_WAIT)
    job.refresh_from_db()
    assert job.state_reason == reason
    assert job.eta_at == clock.now + timedelta(seconds=600)


class _ReleaseLost(SimulatedFleet):
    """The first release never reaches the cloud (every retry fails)."""

    lost = 0

    def node_release(self, *, node: str) -> None:
        if self.lost < NO_WAIT.attempts:
            self.lost += 1
            raise GatewayRetryable("connection reset")
        super().node_release(node=node)


def test_a_lost_release_is_applied_again_and_the_cost_stopped_at_the_recorded_release(clock: Clock) -> None:
    gateway = _ReleaseLost(fleet(clock).settings, clock=clock)
    pool_seed()
    team_seed()
    gateway.nodes_request(request=replace(_spec(999, Job(pk=0, team=Team(namespace="team-nlp"))), job="0"))
    clock.advance(11)
    cycle_run(gateway=gateway, retry=NO_WAIT)  # the node joins (a request no row knows: the loop leaves it be)
    (node,) = Node.objects.filter(pool="a100-od")
    release = Release(node=node.name, pool="a100-od", idle_since=clock.now.timestamp())
    with plans(once(releases=(release,))):
        clock.advance(1)
        report = cycle_run(gateway=gateway, retry=NO_WAIT)
    released_at = clock.now
    assert report.failed == [f"release node {node.name}: connection reset"]
    clock.advance(1)
    report = cycle_run(gateway=gateway, retry=NO_WAIT)
    assert report.repairs["nodes_released_again"] == [node.name]
    node.refresh_from_db()
    assert node.released_at == released_at
    assert node.name not in {n.name for n in gateway.observe().nodes}


def test_a_gateway_that_cannot_grow_refuses_node_operations() -> None:
    spec = NodeRequestSpec(
        id="1",
        job="1",
        namespace="team-nlp",
        pool="p",
        nodes=1,
        gpu_model=A100,
        gpus_per_node=8,
        placement_group=False,
        autoscaler="cluster-autoscaler",
    )
    result = apply_ops(_NoAutoscaler(), [ProvisionOp(spec=spec), NodeReleaseOp(node="n")], grace_s=0, retry=NO_WAIT)
    assert [message for _op, message in result.provisions_refused] == ["the plain cluster has no autoscaler to ask"]
    assert result.failed == ["release node n: the plain cluster has no autoscaler to ask"]


class _NoAutoscaler:
    name = "plain"


class _NodesNeverJoin(SimulatedFleet):
    """An autoscaler that says its request is provisioned and names nodes that never register."""

    def observe(self) -> Observation:
        observation = super().observe()
        requests = tuple(
            replace(r, state=NodeRequestState.PROVISIONED, nodes=("ghost-1",), since=observation.observed_at)
            for r in observation.node_requests
        )
        return replace(observation, node_requests=requests)


def test_a_provisioned_request_whose_nodes_never_join_times_out(clock: Clock, settings) -> None:
    settings.SCHEDULER = {**settings.SCHEDULER, "node_request_timeout_s": 60.0}
    gateway = _NodesNeverJoin(fleet(clock).settings, clock=clock)
    _team, job = _waiting(clock, gateway)
    pool_seed()
    with plans(once(provisions=(_ask(job, clock),))):
        cycle_run(gateway=gateway, retry=NO_WAIT)
        clock.advance(1)
        report = cycle_run(gateway=gateway, retry=NO_WAIT)
    row = NodeRequest.objects.get()
    assert report.repairs["requests_provisioned"] == [str(row.pk)]
    assert (row.state, row.node_names, row.provisioned_at) == (NodeRequestStatus.PROVISIONED, ["ghost-1"], clock.now)
    clock.advance(61)
    report = cycle_run(gateway=gateway, retry=NO_WAIT)
    row.refresh_from_db()
    assert (row.state, row.message) == (NodeRequestStatus.TIMED_OUT, "its nodes did not join within 1 min")
    assert f"withdraw node request {row.pk}" in report.applied
