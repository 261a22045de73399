"""A planned move in the live loop, on the simulated fleet: recorded as the next generation beside the old, started
make-before-break, completed once every new replica is ready (the old released), or given up — refused by the
cluster, a new replica lost, or not ready in time — with the job serving on from its old placement.

The engine does not plan moves here by itself: each test adds a :class:`~scheduler.core.model.plan.Move` to one
cycle's plan by hand (:func:`_with_move`)."""

from __future__ import annotations

from typing import Any

import pytest

from jobs.models import Allocation, Job, JobEvent
from jobs.services import job_submit
from scheduler.bridge.policy import policy_current
from scheduler.bridge.snapshot import build
from scheduler.core import Slot
from scheduler.core.model.plan import Move, Plan
from scheduler.errors import GatewayConflict
from scheduler.loop.cycle import cycle_run
from scheduler.loop.record import record_plan
from scheduler.models import CycleStats, Node, SimulatedNodeState, SimulatedPod
from tests.scheduler.loop_helpers import Clock, fleet, fleet_seed, plan_with_move, team_seed

pytestmark = pytest.mark.django_db

# The right-sized slice the tests move to: the 3g.40gb instance of mig-od-1's GPU 0 (loop_helpers.BALANCED_80GB).
SLICE = ((Slot(node="mig-od-1", gpu=0, mig_profile="3g.40gb", mig_start=4),),)


@pytest.fixture
def team(db: Any) -> Any:
    fleet_seed()
    return team_seed()


def _running_inference(team: Any, clock: Clock, **spec: Any) -> tuple[Job, Any]:
    gateway = fleet(clock, **spec.pop("fleet", {}))
    job = job_submit(
        team=team,
        spec={"kind": "inference", "gpus": 1, "gpu_model": "A100-SXM4-80GB", "tier": "reserved-only", **spec},
        actor=None,
    )
    cycle_run(gateway=gateway)
    job.refresh_from_db()
    assert job.state == "running"
    return job, gateway


def _open(job: Job, generation: int) -> list[Allocation]:
    return list(Allocation.objects.filter(job=job, ended_at__isnull=True, generation=generation))


def _moved(job: Job) -> list[dict[str, Any]]:
    return [e.details for e in JobEvent.objects.filter(job=job, type="moved").order_by("at", "id")]


def test_a_move_starts_beside_the_old_replicas_and_completes_once_the_new_are_ready(team, clock):
    job, gateway = _running_inference(team, clock)
    old = _open(job, 0)
    assert [a.node.name for a in old] == ["a100-res-1"]

    with plan_with_move(job, SLICE):
        report = cycle_run(gateway=gateway)
    assert report.decisions["moves"][0]["generation"] == 1
    assert f"move {job.pk} (generation 1)" in report.applied
    # Make before break: both placements held, both pods running.
    assert len(_open(job, 0)) == 1 and [(a.node.name, a.mig_profile) for a in _open(job, 1)] == [
        ("mig-od-1", "3g.40gb")
    ]
    pods = sorted(SimulatedPod.objects.filter(job=job).values_list("generation", "node__name"))
    assert pods == [(0, "a100-res-1"), (1, "mig-od-1")]
    started = _moved(job)
    assert started[0]["outcome"] == "started" and started[0]["to"][0][0]["mig_profile"] == "3g.40gb"
    assert started[0]["from"][0][0]["node"] == "a100-res-1"
    running = {r.job.id: r for r in build(gateway.observe(), policy_current(), clock.now.timestamp()).snapshot.running}
    assert running[str(job.pk)].slots == SLICE and running[str(job.pk)].moving_from[0][0].node == "a100-res-1"
    # The consolidation's per-job budget reads when the job's moves started.
    started_at = JobEvent.objects.get(job=job, type="moved", details__outcome="started").at.timestamp()
    assert running[str(job.pk)].moved_at == (started_at,)

    # Not ready yet (the fleet's start-up is 60 virtual seconds, one real second at 60x): the move waits.
    clock.advance(0.5)
    report = cycle_run(gateway=gateway)
    assert report.repairs["moving"] == [str(job.pk)] and len(_open(job, 0)) == 1

    clock.advance(1)
    report = cycle_run(gateway=gateway)
    assert report.repairs["moved"] == [str(job.pk)]
    assert f"release {job.pk} (older than generation 1)" in report.applied
    ended = Allocation.objects.get(pk=old[0].pk)
    assert ended.end_reason == "moved" and ended.ended_at == clock.now  # the overlap is billed as held
    assert list(SimulatedPod.objects.filter(job=job).values_list("generation", flat=True)) == [1]
    assert _moved(job)[-1]["outcome"] == "completed"
    job.refresh_from_db()
    assert job.state == "running"
    running = {r.job.id: r for r in build(gateway.observe(), policy_current(), clock.now.timestamp()).snapshot.running}
    assert running[str(job.pk)].slots == SLICE and running[str(job.pk)].moving_from == ()

    # Settled: the next cycle repairs nothing and starts nothing.
    clock.advance(1)
    report = cycle_run(gateway=gateway)
    assert not report.applied and not any(report.repairs.values())


def test_a_moved_job_that_loses_a_pod_gets_it_back_as_its_own_generation(team, clock):
    job, gateway = _running_inference(team, clock)
    with plan_with_move(job, SLICE):
        cycle_run(gateway=gateway)
    clock.advance(2)
    cycle_run(gateway=gateway)
    SimulatedPod.objects.filter(job=job).delete()  # deleted behind the scheduler's back, its node still there

    report = cycle_run(gateway=gateway)

    assert report.repairs["rebound"] == [str(job.pk)] and f"move {job.pk} (generation 1)" in report.applied
    assert list(SimulatedPod.objects.filter(job=job).values_list("generation", "node__name")) == [(1, "mig-od-1")]


def test_a_move_not_ready_in_time_is_given_up_and_the_job_keeps_serving(team, clock, settings):
    settings.SCHEDULER = {**settings.SCHEDULER, "move_ready_s": 30.0}
    job, gateway = _running_inference(team, clock, fleet={"startup_s": 1e6})
    with plan_with_move(job, SLICE):
        cycle_run(gateway=gateway)
    clock.advance(10)
    assert cycle_run(gateway=gateway).repairs["moving"] == [str(job.pk)]

    clock.advance(25)
    report = cycle_run(gateway=gateway)

    assert report.repairs["move_abandoned"] == [str(job.pk)]
    assert f"abandon move {job.pk} (generation 1)" in report.applied
    assert [a.end_reason for a in Allocation.objects.filter(job=job, generation=1)] == ["move-abandoned"]
    assert [a.node.name for a in _open(job, 0)] == ["a100-res-1"]
    assert list(SimulatedPod.objects.filter(job=job).values_list("generation", flat=True)) == [0]
    abandoned = _moved(job)[-1]
    assert abandoned["outcome"] == "abandoned" and "not all ready within 30 s" in abandoned["reason"]
    job.refresh_from_db()
    assert job.state == "running"


def test_a_move_whose_new_replica_is_lost_is_given_up(team, clock):
    job, gateway = _running_inference(team, clock)
    with plan_with_move(job, SLICE):
        cycle_run(gateway=gateway)
    SimulatedPod.objects.filter(job=job, generation=1).update(stop_requested_at=clock.now)  # stopped from outside

    report = cycle_run(gateway=gateway)

    assert report.repairs["move_abandoned"] == [str(job.pk)] and not report.repairs["lost"]
    assert "new replica 0 stopping" in _moved(job)[-1]["reason"]
    assert [a.node.name for a in _open(job, 0)] == ["a100-res-1"]


def test_a_move_the_cluster_refuses_is_given_up_at_once(team, clock):
    job, gateway = _running_inference(team, clock)
    nowhere = ((Slot(node="mig-od-1", gpu=1, mig_profile="3g.40gb", mig_start=4),),)  # GPU 1 has MIG off

    with plan_with_move(job, nowhere):
        report = cycle_run(gateway=gateway)

    assert report.moves_refused == [str(job.pk)] and not report.requeued_after_refusal
    reason = _moved(job)[-1]["reason"]
    assert reason.startswith("refused by the cluster:") and "no MIG instance 3g.40gb@4" in reason
    assert not _open(job, 1) and len(_open(job, 0)) == 1
    assert list(SimulatedPod.objects.filter(job=job).values_list("generation", flat=True)) == [0]
    job.refresh_from_db()
    assert job.state == "running"


def test_the_old_placement_lost_mid_move_requeues_the_job_and_stops_the_new_replicas_too(team, clock):
    job, gateway = _running_inference(team, clock)
    with plan_with_move(job, SLICE):
        cycle_run(gateway=gateway)
    node = Node.objects.get(name="a100-res-1")
    SimulatedNodeState.objects.update_or_create(node=node, defaults={"notice_at": clock.now, "gone_at": clock.now})

    report = cycle_run(gateway=gateway)

    assert report.repairs["lost"] == [str(job.pk)] and not report.repairs["moving"]
    assert not any(op.startswith("move ") for op in report.applied)
    assert not Allocation.objects.filter(job=job, ended_at__isnull=True, generation=1).exists()
    assert not SimulatedPod.objects.filter(job=job, generation=1).exists()


def test_a_job_that_opted_out_is_not_moved(team, clock):
    job, gateway = _running_inference(team, clock, consolidate=False)

    with plan_with_move(job, SLICE):
        report = cycle_run(gateway=gateway)

    assert report.decisions["moves"] == [] and not _open(job, 1) and not _moved(job)


def test_a_move_recorded_but_not_applied_is_applied_by_the_next_cycle(team, clock, monkeypatch):
    job, gateway = _running_inference(team, clock)
    monkeypatch.setattr(gateway, "job_move", lambda **_kw: None)  # the worker died before it started them
    with plan_with_move(job, SLICE):
        cycle_run(gateway=gateway)
    assert len(_open(job, 1)) == 1 and not SimulatedPod.objects.filter(job=job, generation=1).exists()
    monkeypatch.undo()

    report = cycle_run(gateway=gateway)

    assert report.repairs["moving"] == [str(job.pk)] and f"move {job.pk} (generation 1)" in report.applied
    assert SimulatedPod.objects.filter(job=job, generation=1).exists()


def test_a_move_onto_a_device_held_meanwhile_is_not_recorded_and_the_cycle_records_the_rest(team, clock):
    job, gateway = _running_inference(team, clock)
    other = job_submit(team=team, spec={"mig_profile": "3g.40gb", "gpu_model": "A100-SXM4-80GB"}, actor=None)
    cycle_run(gateway=gateway)  # the other job takes mig-od-1's 3g.40gb instance: the move's target
    assert Allocation.objects.filter(job=other, ended_at__isnull=True, node__name="mig-od-1").exists()
    late = job_submit(team=team, spec={"gpus": 1, "gpu_model": "A100-SXM4-80GB"}, actor=None)

    with plan_with_move(job, SLICE):
        report = cycle_run(gateway=gateway)

    assert report.decisions["moves"] == [] and not _open(job, 1) and not _moved(job)
    assert f"bind {late.pk}" in report.applied  # the rest of the plan is recorded and applied


def test_a_move_whose_new_node_goes_is_given_up(team, clock):
    job, gateway = _running_inference(team, clock)
    with plan_with_move(job, SLICE):
        cycle_run(gateway=gateway)
    SimulatedPod.objects.filter(job=job, generation=1).delete()
    SimulatedNodeState.objects.update_or_create(
        node=Node.objects.get(name="mig-od-1"), defaults={"notice_at": clock.now, "gone_at": clock.now}
    )

    report = cycle_run(gateway=gateway)

    assert report.repairs["move_abandoned"] == [str(job.pk)] and not report.repairs["lost"]
    assert _moved(job)[-1]["reason"] == "node mig-od-1 of the new placement is gone"
    assert [a.node.name for a in _open(job, 0)] == ["a100-res-1"]


def test_a_move_planned_from_a_placement_the_job_no_longer_holds_is_not_recorded(team, clock):
    job, gateway = _running_inference(team, clock)
    elsewhere = ((Slot(node="a100-res-1", gpu=7),),)
    plan = Plan(moves=(Move(job=str(job.pk), slots=SLICE, released=elsewhere),))

    recorded = record_plan(plan, gateway.observe(), at=clock.now, fence_token=None)

    assert recorded.decisions["moves"] == [] and not recorded.ops and not _moved(job)


def test_a_moved_job_whose_restart_the_cluster_refuses_goes_back_to_the_queue(team, clock, monkeypatch):
    job, gateway = _running_inference(team, clock)
    with plan_with_move(job, SLICE):
        cycle_run(gateway=gateway)
    clock.advance(2)
    cycle_run(gateway=gateway)  # the move completes: the job runs as generation 1
    SimulatedPod.objects.filter(job=job).delete()

    def refuse(**_kwargs: Any) -> None:
        raise GatewayConflict("node mig-od-1 takes no new work")

    monkeypatch.setattr(gateway, "job_move", refuse)
    report = cycle_run(gateway=gateway)

    assert report.requeued_after_refusal == [str(job.pk)] and report.moves_refused == []
    job.refresh_from_db()
    assert job.state == "pending" and "takes no new work" in job.state_reason


def test_a_recorded_move_is_logged_and_counted(team, clock, caplog):
    job, gateway = _running_inference(team, clock)

    with caplog.at_level("INFO", logger="scheduler.loop.cycle"), plan_with_move(job, SLICE):
        cycle_run(gateway=gateway)

    assert "0 rejections, 1 move, 0 waiting" in caplog.text
    assert f"1 move: job {job.pk} (nlp) on mig-od-1: to 1 × 3g.40gb, from 1 GPU (generation 1)" in caplog.text
    assert CycleStats.objects.get().decisions["move"] == 1
