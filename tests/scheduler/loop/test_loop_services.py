"""The loop's housekeeping and its thin tasks: interruption handling, the tasks over the scheduler app's
services (tests/scheduler/services/ test each service), gateway selection, and a pending reconfiguration in the
snapshot."""

from __future__ import annotations

from datetime import timedelta

import pytest

from jobs.models import JobEvent
from jobs.services import job_submit
from scheduler.bridge.policy import policy_current
from scheduler.bridge.snapshot import build
from scheduler.errors import GatewayNotConfigured
from scheduler.gateways import gateway_get, gateway_override
from scheduler.gateways.protocol import MigConfigState, MigStatus, NodeObservation, Observation
from scheduler.gateways.simulated import SimulatedFleet
from scheduler.loop.cycle import cycle_run
from scheduler.loop.notice import notices_unhandled
from scheduler.models import Node, SimulatedNodeState
from scheduler.tasks import interruptions_handle_task, mig_watch_task, utilization_sample_task
from tests.scheduler.loop_helpers import Clock, fleet, fleet_seed, team_seed

pytestmark = pytest.mark.django_db


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
