"""MIG maintenance: the changes in flight and the stuck ones reported, the gateway's own steps driven."""

from __future__ import annotations

import pytest

from scheduler.gateways.protocol import MaintenanceEvent
from scheduler.services.mig import cluster_maintain, mig_watch
from tests.scheduler.loop_helpers import fleet

pytestmark = pytest.mark.django_db


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
