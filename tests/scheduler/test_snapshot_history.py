"""A team's run-time history in the engine's snapshot (``Team.typical_runtime_s``): the median run time of
its latest completed jobs, read for every team in one query."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from jobs.models import Job
from scheduler.bridge.snapshot import RUNTIME_HISTORY_JOBS, build, teams_current
from scheduler.core import Policy
from scheduler.gateways.protocol import Observation
from teams.models import Team
from tests.factories import JobFactory, QuotaFactory, TeamFactory

pytestmark = pytest.mark.django_db

NOW = timezone.now().replace(microsecond=0)


def ran(team: Team, seconds: float, *, state: str = "completed", finished_at: datetime | None = None) -> Job:
    """A job of ``team`` that ran for ``seconds`` and ended in ``state`` at ``finished_at`` (now by default)."""
    finished = finished_at or NOW
    started = finished - timedelta(seconds=seconds)
    return JobFactory(team=team, state=state, submitted_at=started, started_at=started, finished_at=finished)


def runtimes() -> dict[str, float | None]:
    return {team.name: team.typical_runtime_s for team in teams_current()}


def test_the_typical_run_time_is_the_median_of_completed_jobs_only() -> None:
    odd, even, unlucky, _fresh = (TeamFactory(slug=slug) for slug in ("odd", "even", "unlucky", "fresh"))
    for seconds in (60, 600, 120):
        ran(odd, seconds)
    for seconds in (100, 200, 300, 400):
        ran(even, seconds)
    # Failed, cancelled and rejected runs say nothing about how long the work takes.
    ran(odd, 90_000, state="failed")
    ran(odd, 90_000, state="cancelled")
    ran(odd, 90_000, state="rejected")
    ran(unlucky, 30, state="failed")
    # Evicted and waiting again, or running now: started, not finished.
    JobFactory(team=odd, state="pending", submitted_at=NOW - timedelta(hours=5), started_at=NOW - timedelta(hours=5))
    JobFactory(team=odd, state="running", submitted_at=NOW - timedelta(hours=5), started_at=NOW - timedelta(hours=5))
    assert runtimes() == {"odd": 120.0, "even": 250.0, "unlucky": None, "fresh": None}


def test_only_the_latest_completed_jobs_count() -> None:
    team = TeamFactory(slug="busy")
    # The latest 50, half of a minute and half of two: median 90 s.
    for i in range(RUNTIME_HISTORY_JOBS):
        ran(team, 60 if i % 2 else 120, finished_at=NOW - timedelta(minutes=i))
    # Older, longer runs fall outside the history (counted, they would make the median 120 s).
    for i in range(5):
        ran(team, 10_000, finished_at=NOW - timedelta(days=2, minutes=i))
    assert runtimes() == {"busy": 90.0}


def test_one_query_reads_the_history_of_every_team(django_assert_num_queries) -> None:
    for slug in ("a", "b", "c", "d"):
        team = TeamFactory(slug=slug)
        QuotaFactory(team=team, gpu_class="any", guaranteed_gpus=1, burst_gpus=2)
        ran(team, 60)
        ran(team, 180)
    # Teams, their quotas (prefetched), and the history of all of them: three, whatever the number of teams.
    with django_assert_num_queries(3):
        teams = teams_current()
    assert [(t.name, t.typical_runtime_s) for t in teams] == [(s, 120.0) for s in ("a", "b", "c", "d")]


def test_the_snapshot_carries_each_teams_history() -> None:
    team = TeamFactory(slug="nlp")
    ran(team, 3600)
    TeamFactory(slug="new")
    snapshot = build(Observation(observed_at=NOW.timestamp(), nodes=(), jobs={}), Policy(), NOW.timestamp()).snapshot
    assert {t.name: t.typical_runtime_s for t in snapshot.teams} == {"new": None, "nlp": 3600.0}
