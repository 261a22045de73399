"""The loop's housekeeping services and their thin tasks: cluster sync, interruption handling, MIG watch,
utilization samples, gateway selection, and the snapshot built from rows + observation."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from jobs.models import JobEvent
from jobs.services import job_submit
from scheduler.bridge.policy import policy_current
from scheduler.bridge.snapshot import build
from scheduler.core.vocabulary import Fabric
from scheduler.errors import GatewayNotConfigured
from scheduler.gateways import gateway_get, gateway_override
from scheduler.gateways.protocol import MaintenanceEvent, MigConfigState, MigStatus, NodeObservation, Observation
from scheduler.gateways.simulated import SimulatedFleet
from scheduler.loop.cycle import cycle_run
from scheduler.loop.notice import notices_unhandled
from scheduler.models import Node, SimulatedNodeState, UtilizationSample
from scheduler.services import cluster_maintain, cluster_sync, mig_watch, utilization_record
from scheduler.tasks import interruptions_handle_task, mig_watch_task, utilization_sample_task
from tests.scheduler.loop_helpers import Clock, fleet, fleet_seed, team_seed

pytestmark = pytest.mark.django_db


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def team(db):
    fleet_seed()
    return team_seed()


def _notice(node: str, clock: Clock, *, gone_in_s: float = 60, back_in_s: float = 600) -> None:
    SimulatedNodeState.objects.update_or_create(
        node=Node.objects.get(name=node),
        defaults={
            "notice_at": clock.now,
            "gone_at": clock.now + timedelta(seconds=gone_in_s),
            "back_at": clock.now + timedelta(seconds=back_in_s),
        },
    )


def test_cluster_sync_registers_unknown_nodes_and_skips_impossible_ones(team, clock):
    observed = fleet(clock).observe()
    extra = NodeObservation(
        name="h100-new-1",
        gpu_model="H100-SXM5-80GB",
        gpu_count=8,
        interconnect="nvswitch",
        tier="on-demand",
        price_per_gpu_hour=None,
    )
    alien = NodeObservation(name="t4-1", gpu_model="Tesla-T4", gpu_count=1, interconnect="pcie", tier="spot")
    report = cluster_sync(
        observation=Observation(observed_at=observed.observed_at, nodes=(*observed.nodes, extra, alien), jobs={})
    )
    assert Node.objects.get(name="h100-new-1").gpus.count() == 8
    assert Node.objects.get(name="h100-new-1").price_per_gpu_hour == 0  # unknown price: set it in the admin
    assert report.skipped and report.skipped[0].startswith("t4-1: unknown GPU model 'Tesla-T4'")
    assert not Node.objects.filter(name="t4-1").exists()


def test_cluster_sync_records_the_observed_fabric_and_the_snapshot_passes_it_to_the_engine(team, clock):
    observed = fleet(clock).observe()
    efa = NodeObservation(
        name="h100-efa-1",
        gpu_model="H100-SXM5-80GB",
        gpu_count=8,
        interconnect="nvswitch",
        tier="on-demand",
        fabric="efa",
        fabric_devices=32,
        placement_group="pg-a",
    )
    bad = NodeObservation(
        name="h100-bad-1", gpu_model="H100-SXM5-80GB", gpu_count=8, interconnect="nvswitch", tier="spot"
    )
    bad = dataclasses.replace(bad, fabric_devices=2)
    observation = Observation(observed_at=observed.observed_at, nodes=(*observed.nodes, efa, bad), jobs={})
    report = cluster_sync(observation=observation)
    row = Node.objects.get(name="h100-efa-1")
    assert (row.fabric, row.fabric_devices, row.placement_group) == ("efa", 32, "pg-a")
    assert any(s.startswith("h100-bad-1: a node without a fabric (tcp) has no fabric devices") for s in report.skipped)
    built = build(observation, policy_current(), clock.now.timestamp())
    engine = {n.name: n for n in built.snapshot.nodes}
    assert (engine["h100-efa-1"].fabric, engine["h100-efa-1"].placement_group) == (Fabric.EFA, "pg-a")
    assert engine["a100-res-1"].fabric == Fabric.TCP


def test_cluster_sync_keeps_an_admins_cordon(team, clock):
    Node.objects.filter(name="a100-res-1").update(state="cordoned")
    cluster_sync(observation=fleet(clock).observe())
    assert Node.objects.get(name="a100-res-1").state == "cordoned"
    built = build(fleet(clock).observe(), policy_current(), clock.now.timestamp())
    assert {n.name: n.schedulable for n in built.snapshot.nodes}["a100-res-1"] is False


def test_the_interruption_task_runs_a_cycle_when_a_notice_is_not_drained_yet(team, clock, settings, tmp_path):
    settings.SCHEDULER = {**settings.SCHEDULER, "lock_backend": "file"}
    settings.SCHEDULER_LOCK_FILE = tmp_path / "scheduler.lock"
    gateway = fleet(clock)
    job = job_submit(
        team=team, spec={"gpus": 2, "tier": "spot-ok", "gpu_model": "A100-PCIE-40GB", "duration_s": 60_000}, actor=None
    )
    cycle_run(gateway=gateway)
    _notice("pcie-spot-1", clock)
    unhandled = notices_unhandled(observation=gateway.observe())
    assert unhandled == [{"job": str(job.pk), "node": "pcie-spot-1", "source": "simulated-spot"}]
    assert not JobEvent.objects.filter(job=job, type="draining").exists()  # looking records nothing

    with gateway_override(gateway):
        result = interruptions_handle_task.run()
        assert result["draining"] == unhandled and result["cycle"]["repairs"]["drained"] == [str(job.pk)]
        assert interruptions_handle_task.run() == {"draining": []}  # drained: nothing left to hurry
    event = JobEvent.objects.get(job=job, type="draining")
    assert event.details["node"] == "pcie-spot-1" and event.details["source"] == "simulated-spot"
    assert Node.objects.get(name="pcie-spot-1").state == "draining"


def test_mig_watch_reports_changes_in_flight_and_stuck_ones(team, clock):
    gateway = fleet(clock, mig_reconfigure_s=100_000.0)
    gateway.node_reconfigure(node="mig-od-1", layouts=((("7g.80gb", 0),), ()))
    assert mig_watch(observation=gateway.observe(), stuck_after_s=900) == {"pending": ["mig-od-1"], "stuck": []}
    clock.advance(1000)
    assert mig_watch(observation=gateway.observe(), stuck_after_s=900) == {
        "pending": ["mig-od-1"],
        "stuck": ["mig-od-1"],
    }


def test_the_simulated_fleets_maintenance_reports_a_reconfiguration_going_live_once(team, clock):
    gateway = fleet(clock, mig_reconfigure_s=600.0)  # 10 real seconds at 60x
    target = ((("7g.80gb", 0),), ())
    gateway.node_reconfigure(node="mig-od-1", layouts=target)
    assert gateway.maintain() == ()
    assert cluster_maintain(gateway=gateway, stuck_after_s=900)["pending"] == ["mig-od-1"]
    clock.advance(10)

    assert gateway.maintain() == (MaintenanceEvent(node="mig-od-1", step="mig-live"),)
    assert gateway.maintain() == ()
    assert cluster_maintain(gateway=gateway, stuck_after_s=900) == {"pending": [], "stuck": [], "steps": []}
    assert {n.name: n.mig for n in gateway.observe().nodes}["mig-od-1"] == target


def test_a_pending_reconfiguration_closes_the_node_in_the_snapshot_with_the_new_layout(team, clock):
    gateway = fleet(clock, mig_reconfigure_s=600.0)
    target = ((("7g.80gb", 0),), ())
    gateway.node_reconfigure(node="mig-od-1", layouts=target)
    policy = policy_current()
    node = {n.name: n for n in build(gateway.observe(), policy, clock.now.timestamp()).snapshot.nodes}["mig-od-1"]
    assert node.mig == target and node.reconfiguring_until == pytest.approx(clock.now.timestamp() + 10)
    # A backend that cannot estimate the end keeps the node closed cycle by cycle, on the old layout.
    unknown = NodeObservation(
        name="mig-od-1",
        gpu_model="A100-SXM4-80GB",
        gpu_count=2,
        interconnect="nvswitch",
        tier="on-demand",
        mig_status=MigStatus(state=MigConfigState.PENDING),
    )
    closed = build(Observation(observed_at=0.0, nodes=(unknown,), jobs={}), policy, 100.0).snapshot.nodes
    assert {n.name: n.reconfiguring_until for n in closed}["mig-od-1"] == 101.0


def test_utilization_samples_record_intervals(team, clock):
    gateway = fleet(clock)
    assert utilization_record(readings=gateway.utilization(), at=clock.now) == 3
    clock.advance(30)
    utilization_record(readings=gateway.utilization(), at=clock.now)
    latest = UtilizationSample.objects.filter(node__name="a100-res-1").order_by("-at").first()
    assert latest.interval_s == 30.0 and latest.gpus == 8.0 and latest.gpu_class == "A100"


def test_the_tasks_are_thin_calls_of_the_services(team, clock):
    with gateway_override(fleet(clock)):
        assert interruptions_handle_task.run() == {"draining": []}
        assert mig_watch_task.run() == {"pending": [], "stuck": [], "steps": []}
        assert utilization_sample_task.run() == {"samples": 3, "backend": "simulated"}


def test_gateway_selection(settings, monkeypatch):
    settings.CLUSTER_BACKEND = "simulated"
    settings.SCHEDULER = {**settings.SCHEDULER, "simulated_speed": 120.0}
    gateway = gateway_get()
    assert isinstance(gateway, SimulatedFleet) and gateway.settings.speed == 120.0
    settings.CLUSTER_BACKEND = "kubernetes"

    def missing(name):
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    monkeypatch.setattr("scheduler.gateways.importlib.import_module", missing)
    with pytest.raises(
        GatewayNotConfigured, match=r"CLUSTER_BACKEND=kubernetes needs the module scheduler\.gateways\.kube\.gateway"
    ):
        gateway_get()
