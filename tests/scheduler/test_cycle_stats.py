"""The loop's running totals (scheduler.loop.stats): phase histograms, decisions, MIG reconfigurations seen to end,
interruption notices counted once, the error of the start estimate a job was shown."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from jobs.services import job_submit
from scheduler.bridge.cycle_stats import PHASE_BUCKETS_S, PHASES
from scheduler.gateways.protocol import Interruption, MigConfigState, MigStatus, NodeObservation, Observation
from scheduler.loop.cycle import cycle_run
from scheduler.loop.stats import cycle_stats_record, histogram_add
from scheduler.models import CycleStats, EtaHistory
from tests.scheduler.loop_helpers import Clock, fleet, fleet_seed, team_seed

pytestmark = pytest.mark.django_db


def _node(name: str, *, mig: MigConfigState = MigConfigState.SUCCESS, since=None, notice_at=None) -> NodeObservation:
    return NodeObservation(
        name=name,
        gpu_model="A100-SXM4-80GB",
        gpu_count=8,
        interconnect="nvswitch",
        tier="spot",
        mig_status=MigStatus(state=mig, since=since),
        interruption=Interruption(noticed_at=notice_at, deadline_at=None, source="test") if notice_at else None,
    )


def _cycle(t: float, *nodes: NodeObservation, decisions=None) -> CycleStats:
    return cycle_stats_record(
        observation=Observation(observed_at=t, nodes=nodes, jobs={}),
        phases_s=dict.fromkeys(PHASES, 0.02),
        decisions=decisions or {},
        at=datetime.fromtimestamp(t, tz=UTC),
    )


def test_phase_durations_are_a_cumulative_histogram():
    histogram = histogram_add({}, 0.02, PHASE_BUCKETS_S)
    histogram = histogram_add(histogram, 3.0, PHASE_BUCKETS_S)
    assert histogram["count"] == 2 and histogram["sum"] == pytest.approx(3.02)
    assert histogram["buckets"] == [int(b >= 0.02) + int(b >= 3.0) for b in PHASE_BUCKETS_S]
    assert histogram_add({"count": 9, "sum": 1.0, "buckets": [1, 2]}, 1.0, PHASE_BUCKETS_S)["count"] == 1  # re-bucketed


def test_decisions_and_cycles_add_up():
    _cycle(100.0, decisions={"binds": [{"job": "1"}, {"job": "2"}], "rejections": [{"job": "3"}], "waiting": 4})
    stats = _cycle(110.0, decisions={"binds": [{"job": "4"}]})
    assert stats.cycles == 2 and stats.last_success_at == datetime.fromtimestamp(110.0, tz=UTC)
    assert stats.decisions == {
        "bind": 3,
        "eviction": 0,
        "reconfiguration": 0,
        "rejection": 1,
        "move": 0,
        "provision": 0,
        "withdrawal": 0,
        "release": 0,
    }
    assert {phase: h["count"] for phase, h in stats.phases.items()} == dict.fromkeys(PHASES, 2)


def test_a_reconfiguration_is_counted_when_it_is_seen_to_end():
    stats = _cycle(100.0, _node("a", mig=MigConfigState.PENDING, since=90.0), _node("b"))
    assert stats.mig_in_flight == {"a": {"state": "pending", "since": 90.0}}
    stats = _cycle(110.0, _node("a", mig=MigConfigState.REBOOTING, since=105.0), _node("b"))
    assert stats.mig_outcomes == {"success": 0, "failed": 0}
    stats = _cycle(120.0, _node("a"), _node("b", mig=MigConfigState.FAILED, since=115.0))
    assert stats.mig_outcomes == {"success": 1, "failed": 1} and list(stats.mig_in_flight) == ["b"]
    stats = _cycle(130.0, _node("a"), _node("b", mig=MigConfigState.FAILED, since=115.0))
    assert stats.mig_outcomes == {"success": 1, "failed": 1}  # still the same failure


def test_an_interruption_notice_is_counted_once():
    _cycle(100.0, _node("spot-1", notice_at=95.0))
    stats = _cycle(110.0, _node("spot-1", notice_at=95.0), _node("spot-2", notice_at=108.0))
    assert stats.spot_interruptions == 2
    stats = _cycle(120.0, _node("spot-1"), _node("spot-2", notice_at=108.0))
    stats = _cycle(130.0, _node("spot-1", notice_at=125.0))  # a new notice for a replacement node of the same name
    assert stats.spot_interruptions == 3 and stats.notices == {"spot-1": 125.0}


def test_the_start_estimate_shown_a_quarter_into_the_wait_is_measured_when_the_job_starts():
    fleet_seed()
    team = team_seed()
    clock = Clock()
    gateway = fleet(clock)
    spec = {"kind": "training", "gpus": 8, "tier": "reserved-only", "duration_s": 1200}  # 20 s at 60×
    job_submit(team=team, spec=spec, actor=None, now=clock.now)
    waiting = job_submit(team=team, spec=spec, actor=None, now=clock.now)
    shown = []
    for step in (0, 5, 5):
        clock.advance(step)
        cycle_run(gateway=gateway)
        waiting.refresh_from_db()
        shown.append((clock.now, waiting.eta_at))
    assert waiting.state == "pending" and EtaHistory.objects.filter(job=waiting).exists()
    clock.advance(11)  # the first job completes: the waiting one starts
    stats = cycle_run(gateway=gateway) and CycleStats.objects.get()
    waiting.refresh_from_db()
    assert waiting.state == "running" and not EtaHistory.objects.exists()
    wait = (waiting.started_at - waiting.submitted_at).total_seconds()
    quarter = waiting.submitted_at.timestamp() + wait / 4
    predicted = [eta for at, eta in shown if at.timestamp() <= quarter][-1]
    expected = abs(predicted.timestamp() - waiting.started_at.timestamp()) / wait
    assert stats.eta_errors["count"] == 1
    assert stats.eta_errors["sum"] == pytest.approx(expected, abs=0.01)
