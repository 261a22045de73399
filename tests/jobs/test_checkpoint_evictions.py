"""The proposed checkpoint interval folds in how often the scheduler evicts the team's preemptible work on the
job's tier (the last 7 days, per job-hour), says which rate it used and from which window, and falls back to the
tier's rate alone without history. The issue's case: a team preempted 9 times in 18 minutes was still proposed
the 4 h cap."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.urls import reverse
from django.utils import timezone

from jobs.checkpoint_intervals import (
    EVICTION_WINDOW_S,
    checkpoint_interval_proposal,
    checkpoint_interval_proposal_for_spec,
    observed_evictions,
)
from jobs.models import Job
from scheduler.core import checkpoint_interval
from tests.factories import AllocationFactory, JobFactory, NodeFactory, TeamFactory

pytestmark = pytest.mark.django_db

CAP_S = 4 * 3600.0
COST_S = 60.0
SPOT_RATE = 0.0067


@pytest.fixture(autouse=True)
def checkpoints(settings):
    settings.CHECKPOINTS = {
        "interruptions_per_node_day": {"spot": SPOT_RATE, "on-demand": 0.0038, "reserved": 0.0038},
        "default_cost_s": COST_S,
        "write_gib_per_s": 1.0,
        "max_interval_s": CAP_S,
    }


def _ran(team, node, *, hours_ago: float, hours: float | None, reason: str = "", preemptible: bool = True, **kw):
    """A preemptible job of ``team`` that held two GPUs of ``node`` (spot) from ``hours_ago`` for ``hours``
    (None: still running), its allocations ending for ``reason``."""
    job = JobFactory(team=team, preemptible=preemptible, gpus=2, tier="spot-ok")
    started = timezone.now() - timedelta(hours=hours_ago)
    ended = None if hours is None else started + timedelta(hours=hours)
    for gpu in range(2):  # one eviction ends both allocations at one instant: counted once, its hours once
        AllocationFactory(
            job=job,
            node=node,
            gpu_index=gpu,
            tier=kw.get("tier", "spot"),
            started_at=started,
            ended_at=ended,
            end_reason=reason,
        )
    return job


@pytest.fixture
def history(team):
    """Team t's preemptible work on spot in the last week: 6 job-hours, 3 evictions by the scheduler."""
    node = NodeFactory(gpu_count=8, tier="spot")
    _ran(team, node, hours_ago=5, hours=2, reason="priority")
    _ran(team, node, hours_ago=3, hours=1, reason="reclaim")
    _ran(team, node, hours_ago=2, hours=1, reason="production")
    _ran(team, node, hours_ago=1, hours=None)  # still running: 1 h so far
    _ran(team, node, hours_ago=1.5, hours=1, reason="completed")
    # Not counted: a spot interruption (the tier's own rate), work older than the window, another team's evictions,
    # the team's work that is not preemptible, and its work on another tier.
    _ran(team, node, hours_ago=40, hours=0.0, reason="spot-reclaim")
    _ran(team, node, hours_ago=8 * 24, hours=1, reason="priority")
    _ran(TeamFactory(slug="other"), node, hours_ago=2, hours=1, reason="priority")
    _ran(team, node, hours_ago=2, hours=1, reason="priority", preemptible=False)
    _ran(team, node, hours_ago=2, hours=1, reason="priority", tier="on-demand")
    return node


def test_the_observed_rate_counts_the_schedulers_evictions_per_job_hour(team, history) -> None:
    observed = observed_evictions(team=team, tiers=("spot",), now=timezone.now())
    assert observed is not None
    assert observed.evictions == 3 and observed.job_hours == pytest.approx(6.0, abs=1e-3)
    assert observed.per_job_day == pytest.approx(12.0, rel=1e-3) and observed.window_s == EVICTION_WINDOW_S == 604_800


def test_the_proposal_folds_the_observed_rate_into_the_mtbf(team, history) -> None:
    proposal = checkpoint_interval_proposal_for_spec(
        tier="spot-ok", priority="normal", replicas=1, gpus_per_replica=2, model=None, team=team
    )
    expected = checkpoint_interval(
        cost_s=COST_S, interruptions_per_node_day=SPOT_RATE, nodes=1, max_interval_s=CAP_S, evictions_per_job_day=12.0
    )
    assert proposal.interval_s == pytest.approx(expected.interval_s, rel=1e-3) and proposal.bound == "none"
    assert proposal.interval_s < 1000  # not the 4 h cap the tier alone gives
    assert "3 in 6.0 job-hours of its preemptible work over the last 7 days (12.00 a job-day)" in (
        proposal.eviction_text
    )
    alone = checkpoint_interval_proposal_for_spec(
        tier="spot-ok", priority="normal", replicas=1, gpus_per_replica=2, model=None
    )
    assert alone.interval_s == CAP_S and alone.evictions is None  # no team given: the tier's rate alone


def test_without_history_the_tiers_rate_stands_and_says_so(team) -> None:
    NodeFactory(gpu_count=8, tier="spot")
    proposal = checkpoint_interval_proposal_for_spec(
        tier="spot-ok", priority="normal", replicas=1, gpus_per_replica=2, model=None, team=team
    )
    assert proposal.evictions is None and proposal.interval_s == CAP_S
    assert proposal.eviction_text.startswith("No history of the team's preemptible work on spot in the last 7 days")


def test_a_running_jobs_proposal_uses_its_teams_rate_on_its_tier(team, history) -> None:
    made: Any = JobFactory(team=team, preemptible=True, gpus=1, tier="spot-ok")
    job = Job.objects.get(pk=made.pk)
    AllocationFactory(job=job, node=history, gpu_index=7, tier="spot", started_at=timezone.now())
    proposal = checkpoint_interval_proposal(job=job)
    assert proposal.placed and proposal.evictions is not None and proposal.evictions.evictions == 3


def test_the_submit_forms_proposal_reads_the_chosen_team_only(client, lead, team, history, outsider) -> None:
    client.force_login(lead)
    fields = {"tier": "spot-ok", "priority": "normal", "replicas": 1, "request_by": "gpus", "gpus": 2}
    page = client.post(reverse("jobs:checkpoint_interval"), {**fields, "team": team.pk}).content.decode()
    assert "observed evictions on spot: 3 in 6.0 job-hours" in page
    client.force_login(outsider)
    assert client.post(reverse("jobs:checkpoint_interval"), {**fields, "team": team.pk}).status_code == 404
