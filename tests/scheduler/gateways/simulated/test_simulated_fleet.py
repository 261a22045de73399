"""The simulated fleet as a ClusterGateway: observe, bind (gangs all-or-nothing, idempotent), evict with
checkpoint progress, virtual-time completion, spot interruptions, MIG reconfiguration delay, utilization, and the
checkpoint protocol (periodic saves with a step, a save on SIGTERM under a notice)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from jobs.models import JobEvent
from scheduler.errors import GatewayConflict
from scheduler.gateways.protocol import (
    BindRequest,
    ClusterGateway,
    Device,
    MigConfigState,
    ReplicaPhase,
    ReplicaPlacement,
)
from scheduler.models import Gpu, SimulatedPod, SimulatedProgress
from tests.factories import JobFactory
from tests.scheduler.loop_helpers import BALANCED_80GB, fleet

pytestmark = pytest.mark.django_db


def _request(job, placements, duration_s=600.0, checkpoint_s=None):
    return BindRequest(
        job=str(job.pk),
        namespace=job.team.namespace,
        name=job.name,
        placements=tuple(placements),
        duration_s=duration_s,
        checkpoint_interval_s=checkpoint_s,
    )


def _whole(replica, node, *gpus):
    return ReplicaPlacement(replica=replica, node=node, devices=tuple(Device(gpu=g) for g in gpus))


def test_it_is_a_cluster_gateway_and_reports_the_inventory(team, clock):
    gateway = fleet(clock)
    assert isinstance(gateway, ClusterGateway)
    observation = gateway.observe()
    nodes = {node.name: node for node in observation.nodes}
    assert sorted(nodes) == ["a100-res-1", "mig-od-1", "pcie-spot-1"]
    assert nodes["mig-od-1"].mig[0] == tuple((p, s) for p, s in BALANCED_80GB)
    assert nodes["mig-od-1"].mig[1] == ()
    assert nodes["pcie-spot-1"].tier == "spot" and nodes["pcie-spot-1"].schedulable
    assert observation.clock_speed == 60.0 and observation.jobs == {}


def test_it_reports_the_inventorys_fabric_so_a_sync_keeps_it(team, clock):
    from scheduler.models import Node
    from scheduler.services.sync import cluster_sync

    Node.objects.filter(name="a100-res-1").update(fabric="efa", fabric_devices=4, placement_group="pg-1")
    gateway = fleet(clock)
    observed = {node.name: node for node in gateway.observe().nodes}["a100-res-1"]
    assert (observed.fabric, observed.fabric_devices, observed.placement_group) == ("efa", 4, "pg-1")
    cluster_sync(observation=gateway.observe())
    row = Node.objects.get(name="a100-res-1")
    assert (row.fabric, row.fabric_devices, row.placement_group) == ("efa", 4, "pg-1")


def test_a_job_runs_for_its_duration_in_virtual_time(team, clock):
    gateway = fleet(clock)
    job = JobFactory(team=team, gpus=2)
    gateway.job_bind(request=_request(job, [_whole(0, "a100-res-1", 0, 1)], duration_s=600.0))
    observed = gateway.observe().jobs[str(job.pk)]
    assert observed.phases() == {ReplicaPhase.RUNNING}
    assert observed.replicas[0].devices == (Device(gpu=0), Device(gpu=1))
    clock.advance(9.9)  # 594 virtual seconds
    assert gateway.observe().jobs[str(job.pk)].phases() == {ReplicaPhase.RUNNING}
    clock.advance(0.1)  # 600
    assert gateway.observe().jobs[str(job.pk)].phases() == {ReplicaPhase.SUCCEEDED}


def test_bind_is_idempotent(team, clock):
    gateway = fleet(clock)
    job = JobFactory(team=team, gpus=1)
    request = _request(job, [_whole(0, "a100-res-1", 3)])
    gateway.job_bind(request=request)
    first = list(SimulatedPod.objects.values_list("pk", "bound_at"))
    clock.advance(5)
    gateway.job_bind(request=request)
    assert list(SimulatedPod.objects.values_list("pk", "bound_at")) == first


def test_a_gang_binds_whole_or_not_at_all(team, clock):
    gateway = fleet(clock)
    holder = JobFactory(team=team, gpus=1)
    gateway.job_bind(request=_request(holder, [_whole(0, "pcie-spot-1", 2)]))
    gang = JobFactory(team=team, gpus=2, replicas=2)
    request = _request(gang, [_whole(0, "a100-res-1", 0, 1), _whole(1, "pcie-spot-1", 2, 3)])
    with pytest.raises(GatewayConflict, match="held by another job"):
        gateway.job_bind(request=request)
    assert not SimulatedPod.objects.filter(job=gang).exists()


@pytest.mark.parametrize(
    ("node", "device", "message"),
    [
        ("nowhere-1", Device(gpu=0), "not in the fleet"),
        ("a100-res-1", Device(gpu=8), "does not exist"),
        ("mig-od-1", Device(gpu=0), "partitioned with MIG"),
        ("mig-od-1", Device(gpu=0, mig_profile="3g.40gb", mig_start=0), "no MIG instance"),
    ],
)
def test_bind_refuses_what_the_cluster_cannot_give(team, clock, node, device, message):
    job = JobFactory(team=team, gpus=1)
    with pytest.raises(GatewayConflict, match=message):
        fleet(clock).job_bind(request=_request(job, [ReplicaPlacement(0, node, (device,))]))
    assert not SimulatedPod.objects.exists()


def test_replicas_already_bound_elsewhere_are_a_conflict(team, clock):
    gateway = fleet(clock)
    job = JobFactory(team=team, gpus=1)
    gateway.job_bind(request=_request(job, [_whole(0, "a100-res-1", 0)]))
    with pytest.raises(GatewayConflict, match="already on a100-res-1"):
        gateway.job_bind(request=_request(job, [_whole(0, "a100-res-1", 1)]))


def test_mig_instances_are_exclusive(team, clock):
    gateway = fleet(clock)
    slice_ = ReplicaPlacement(0, "mig-od-1", (Device(gpu=0, mig_profile="3g.40gb", mig_start=4),))
    gateway.job_bind(request=_request(JobFactory(team=team, gpus=None, mig_profile="3g.40gb"), [slice_]))
    other = JobFactory(team=team, gpus=None, mig_profile="3g.40gb")
    with pytest.raises(GatewayConflict, match="held by another job"):
        gateway.job_bind(request=_request(other, [slice_]))
    neighbour = ReplicaPlacement(0, "mig-od-1", (Device(gpu=0, mig_profile="2g.20gb", mig_start=2),))
    gateway.job_bind(request=_request(other, [neighbour]))  # another instance of the same GPU is free
    assert SimulatedPod.objects.count() == 2


def test_evict_keeps_the_work_up_to_the_last_checkpoint_and_a_rebind_resumes_from_it(team, clock):
    gateway = fleet(clock)
    job = JobFactory(team=team, gpus=1)
    request = _request(job, [_whole(0, "a100-res-1", 0)], duration_s=1000.0, checkpoint_s=300.0)
    gateway.job_bind(request=request)
    clock.advance(11)  # 660 virtual seconds: checkpoints at 300 and 600
    assert gateway.observe().jobs[str(job.pk)].last_checkpoint_at == pytest.approx(clock.now.timestamp() - 1)
    gateway.job_evict(job=str(job.pk), namespace="team-nlp", grace_s=30, reason="priority")
    gateway.job_evict(job=str(job.pk), namespace="team-nlp", grace_s=30, reason="priority")  # idempotent
    assert SimulatedProgress.objects.get(job=job).saved_work_s == 600.0
    assert str(job.pk) not in gateway.observe().jobs
    gateway.job_bind(request=request)
    clock.advance(400 / 60 - 0.01)
    assert gateway.observe().jobs[str(job.pk)].phases() == {ReplicaPhase.RUNNING}
    clock.advance(0.02)
    assert gateway.observe().jobs[str(job.pk)].phases() == {ReplicaPhase.SUCCEEDED}


def test_a_spot_node_gets_a_notice_then_goes_then_comes_back(team, clock):
    gateway = fleet(clock, interruptions_per_node_hour=1000.0, notice_s=120.0, replace_after_s=600.0)
    job = JobFactory(team=team, gpus=1)
    gateway.job_bind(request=_request(job, [_whole(0, "pcie-spot-1", 0)], duration_s=10_000.0))
    gateway.observe()  # the first look starts the rate's clock
    clock.advance(1)
    spot = {n.name: n for n in gateway.observe().nodes}["pcie-spot-1"]
    assert spot.interruption is not None and not spot.schedulable
    assert spot.interruption.deadline_at == pytest.approx(clock.now.timestamp() + 2)
    reserved = {n.name: n for n in gateway.observe().nodes}["a100-res-1"]
    assert reserved.interruption is None  # only spot capacity is interrupted
    clock.advance(2)
    observation = gateway.observe()
    assert "pcie-spot-1" not in {n.name for n in observation.nodes}
    assert observation.jobs[str(job.pk)].phases() == {ReplicaPhase.GONE}
    with pytest.raises(GatewayConflict, match="not in the fleet"):
        gateway.job_bind(request=_request(JobFactory(team=team), [_whole(0, "pcie-spot-1", 1)]))
    clock.advance(10)
    observation = gateway.observe()
    assert "pcie-spot-1" in {n.name for n in observation.nodes}
    assert str(job.pk) not in observation.jobs  # the replacement is a fresh machine


def test_no_interruptions_at_rate_zero(team, clock):
    gateway = fleet(clock, interruptions_per_node_hour=0.0)
    for _ in range(5):
        gateway.observe()
        clock.advance(3600)
    assert all(node.interruption is None for node in gateway.observe().nodes)


def test_a_reconfiguration_takes_its_delay_and_drains_the_gpus_it_changes(team, clock):
    gateway = fleet(clock, mig_reconfigure_s=300.0)
    on_gpu1 = JobFactory(team=team, gpus=1)
    gateway.job_bind(request=_request(on_gpu1, [_whole(0, "mig-od-1", 1)]))
    target = ((("7g.80gb", 0),), (("3g.40gb", 0), ("3g.40gb", 4)))
    gateway.node_reconfigure(node="mig-od-1", layouts=target)
    gateway.node_reconfigure(node="mig-od-1", layouts=target)  # idempotent while in flight
    node = {n.name: n for n in gateway.observe().nodes}["mig-od-1"]
    assert node.mig_status.state == MigConfigState.PENDING and node.mig_status.desired == target
    assert node.mig[0] == tuple((p, s) for p, s in BALANCED_80GB)  # not yet
    assert not SimulatedPod.objects.filter(job=on_gpu1).exists()
    whole_7g = ReplicaPlacement(0, "mig-od-1", (Device(gpu=0, mig_profile="7g.80gb", mig_start=0),))
    with pytest.raises(GatewayConflict, match="changing its MIG layout"):
        gateway.job_bind(request=_request(JobFactory(team=team), [whole_7g]))
    clock.advance(5)
    node = {n.name: n for n in gateway.observe().nodes}["mig-od-1"]
    assert node.mig_status.state == MigConfigState.SUCCESS and node.mig == target
    assert Gpu.objects.get(node__name="mig-od-1", index=1).mig_layout == [["3g.40gb", 0], ["3g.40gb", 4]]


def test_an_impossible_mig_layout_is_a_conflict(team, clock):
    with pytest.raises(GatewayConflict, match="overlaps"):
        fleet(clock).node_reconfigure(node="mig-od-1", layouts=((("4g.40gb", 0), ("3g.40gb", 0)),))


def test_utilization_counts_what_runs(team, clock):
    gateway = fleet(clock)
    gateway.job_bind(request=_request(JobFactory(team=team, gpus=4), [_whole(0, "a100-res-1", 0, 1, 2, 3)]))
    slice_ = ReplicaPlacement(0, "mig-od-1", (Device(gpu=0, mig_profile="3g.40gb", mig_start=4),))
    gateway.job_bind(
        request=_request(JobFactory(team=team, gpus=None, mig_profile="3g.40gb", kind="inference"), [slice_])
    )
    readings = {r.node: r for r in gateway.utilization()}
    assert readings["a100-res-1"].allocated_gpus == 4.0 and readings["a100-res-1"].gpu_class == "A100"
    assert 0.4 <= readings["a100-res-1"].busy_ratio <= 0.5  # training ≈ 0.92 of 4 of 8 GPUs
    assert readings["mig-od-1"].allocated_gpus == pytest.approx(3 / 7)
    assert readings["pcie-spot-1"].allocated_gpus == 0.0 and readings["pcie-spot-1"].busy_ratio == 0.0


# -- the checkpoint protocol: periodic saves with a step, SIGTERM on a notice ------------------------------


def _checkpointed(team, clock, gateway, *, node="pcie-spot-1", gpus=(0,), duration_s=100_000.0, interval_s=600.0):
    job = JobFactory(team=team, gpus=len(gpus))
    request = replace(
        _request(job, [_whole(0, node, *gpus)], duration_s=duration_s, checkpoint_s=interval_s),
        checkpoint_dir=f"/checkpoints/nlp/job-{job.pk}",
    )
    gateway.job_bind(request=request)
    return job, request


def test_a_periodic_checkpoint_is_observed_with_its_step_and_path(team, clock):
    gateway = fleet(clock)
    job, _ = _checkpointed(team, clock, gateway)
    clock.advance(25)  # 1500 virtual seconds: saves at 600 and 1200
    observed = gateway.observe().jobs[str(job.pk)]
    assert observed.last_checkpoint_at == pytest.approx(clock.now.timestamp() - 5)
    assert observed.last_checkpoint_step == 1200  # whole virtual seconds of work saved
    assert observed.last_checkpoint_path == f"/checkpoints/nlp/job-{job.pk}/step-000001200.ckpt"


def test_an_eviction_under_notice_saves_on_sigterm_reports_it_and_stops_once_saved(team, clock):
    gateway = fleet(clock, checkpoint_cost_s=60.0)  # a save takes 1 real second at 60×
    job, request = _checkpointed(team, clock, gateway)
    clock.advance(25)  # 1500 virtual seconds of work, the last periodic save at 1200
    gone_at = gateway.notice_give(node="pcie-spot-1")
    assert gone_at == clock.now + timedelta(seconds=2)  # 120 virtual seconds of notice
    evicted_at = clock.now
    gateway.job_evict(job=str(job.pk), namespace="team-nlp", grace_s=1.5, reason="spot-reclaim")

    observed = gateway.observe().jobs[str(job.pk)]
    assert observed.phases() == {ReplicaPhase.STOPPING}
    assert observed.last_checkpoint_step == 1500 and observed.last_checkpoint_at == evicted_at.timestamp()
    event = JobEvent.objects.get(job=job, type="checkpointed")  # reported as the job itself would
    assert event.at == evicted_at
    assert event.details == {
        "step": 1500,
        "size_bytes": 0,
        "duration_s": 60.0,
        "path": f"/checkpoints/nlp/job-{job.pk}/step-000001500.ckpt",
        "replica": 0,
        "source": "simulated",
    }
    assert SimulatedProgress.objects.get(job=job).saved_work_s == 1500.0
    gateway.job_evict(job=str(job.pk), namespace="team-nlp", grace_s=1.5, reason="spot-reclaim")  # no second save
    assert JobEvent.objects.filter(job=job, type="checkpointed").count() == 1

    clock.advance(0.5)
    assert gateway.observe().jobs[str(job.pk)].phases() == {ReplicaPhase.STOPPING}  # still saving
    clock.advance(0.5)
    assert str(job.pk) not in gateway.observe().jobs  # saved and exited, before the node goes
    placement = _whole(0, "a100-res-1", 0)
    gateway.job_bind(request=replace(request, placements=(placement,)))
    assert SimulatedPod.objects.get(job=job).work_start_s == 1500.0  # the next run starts from the save


@pytest.mark.parametrize(
    ("grace_s", "gone_in_s", "why"),
    [(0.5, 2.0, "the save does not fit in the grace"), (5.0, 0.5, "the node goes before the save ends")],
)
def test_a_save_that_cannot_finish_keeps_the_last_periodic_checkpoint(team, clock, grace_s, gone_in_s, why):
    gateway = fleet(clock, checkpoint_cost_s=60.0)
    job, _ = _checkpointed(team, clock, gateway)
    clock.advance(25)
    gateway.notice_give(node="pcie-spot-1", notice_s=gone_in_s * 60)
    gateway.job_evict(job=str(job.pk), namespace="team-nlp", grace_s=grace_s, reason="spot-reclaim")
    assert not JobEvent.objects.filter(job=job, type="checkpointed").exists(), why
    assert SimulatedProgress.objects.get(job=job).saved_work_s == 1200.0
    assert gateway.observe().jobs[str(job.pk)].phases() == {ReplicaPhase.STOPPING}  # killed at the grace's end
    clock.advance(grace_s)
    assert str(job.pk) not in gateway.observe().jobs


def test_without_a_notice_or_a_grace_an_eviction_stops_the_pods_at_once(team, clock):
    gateway = fleet(clock)
    job, _ = _checkpointed(team, clock, gateway)
    clock.advance(25)
    gateway.job_evict(job=str(job.pk), namespace="team-nlp", grace_s=30, reason="priority")  # no notice
    assert str(job.pk) not in gateway.observe().jobs
    other, _ = _checkpointed(team, clock, gateway, gpus=(1,))
    gateway.notice_give(node="pcie-spot-1")
    gateway.job_evict(job=str(other.pk), namespace="team-nlp", grace_s=0, reason="spot-reclaim")  # no grace
    assert str(other.pk) not in gateway.observe().jobs
    assert not JobEvent.objects.filter(type="checkpointed").exists()


def test_a_job_without_checkpoints_stops_at_once_on_a_notice(team, clock):
    gateway = fleet(clock)
    job = JobFactory(team=team, gpus=1)
    gateway.job_bind(request=_request(job, [_whole(0, "pcie-spot-1", 0)], duration_s=10_000.0))
    gateway.notice_give(node="pcie-spot-1")
    gateway.job_evict(job=str(job.pk), namespace="team-nlp", grace_s=30, reason="spot-reclaim")
    assert str(job.pk) not in gateway.observe().jobs


def test_a_notice_is_given_once_and_only_on_a_node_of_the_fleet(team, clock):
    gateway = fleet(clock)
    gateway.notice_give(node="pcie-spot-1")
    with pytest.raises(GatewayConflict, match="under a notice already"):
        gateway.notice_give(node="pcie-spot-1")
    with pytest.raises(GatewayConflict, match="not in the fleet"):
        gateway.notice_give(node="no-such-node")
