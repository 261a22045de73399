"""The demo's job feed and the `demo run` supervisor (it stops every process it started)."""

from __future__ import annotations

import os
import random
import sys
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from demo.feed import demo_feed
from demo.management.commands.demo import DemoSupervisor
from demo.opening import ARRIVAL, OPENING
from demo.seed import _PRODUCTION_KINDS as DEMO_PRODUCTION_KINDS
from demo.seed import _TEAMS as DEMO_TEAMS
from jobs.models import Job
from tests.factories import ProjectFactory, TeamFactory, grant_production

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]
STUBBORN = [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


class FakeSupervisor(DemoSupervisor):
    GRACE_S = 1.0

    def __init__(self, commands):
        super().__init__(host="127.0.0.1", port=0, out=StringIO())
        self._commands = commands

    def commands(self):
        return self._commands


def _demo_teams() -> None:
    """The demo's teams, projects and grants (demo_seed makes them too, with users and a fleet the feed does not
    need)."""
    for slug, _name, _weight, _quotas, projects in DEMO_TEAMS:
        team = TeamFactory(slug=slug, namespace=f"team-{slug}")
        if slug in DEMO_PRODUCTION_KINDS:
            grant_production(team, *DEMO_PRODUCTION_KINDS[slug])
        for code, _title in projects:
            ProjectFactory(team=team, code=code)


@pytest.mark.django_db
def test_the_feed_opens_with_a_wave_then_streams_valid_demo_jobs_until_the_queue_is_full():
    _demo_teams()
    rng = random.Random(5)
    opening = demo_feed(rng=rng, max_pending=30)
    assert [job.name for job in opening] == [job.name for job in OPENING]
    # Nothing has started, so the production arrival waits; the stream runs until 30 jobs wait.
    streamed = [job for _ in range(25) for job in demo_feed(rng=rng, max_pending=30)]
    assert len(streamed) == 30 - len(OPENING) and Job.objects.filter(state="pending").count() == 30
    assert {job.team.slug for job in streamed} <= {"nlp", "vision", "speech"}
    assert all(job.project is not None and job.duration_s for job in opening + streamed)
    assert not Job.objects.filter(name=ARRIVAL.name).exists()


@pytest.mark.django_db
def test_the_feed_opens_again_once_the_demo_is_idle():
    _demo_teams()
    first = demo_feed(rng=random.Random(1))
    Job.objects.filter(pk__in=[job.pk for job in first]).update(state="cancelled", finished_at=timezone.now())
    again = demo_feed(rng=random.Random(1))
    assert [job.name for job in again] == [job.name for job in OPENING]


@pytest.mark.django_db
def test_the_feed_waits_for_the_demo_teams():
    assert demo_feed(rng=random.Random(1)) == []


def test_the_supervisor_stops_every_child_when_the_time_is_up(settings):
    supervisor = FakeSupervisor([("a", SLEEPER), ("b", SLEEPER), ("c", STUBBORN)])
    assert supervisor.run(duration_s=1.0) == 0
    pids = [child.pid for _name, child in supervisor.children]
    assert len(pids) == 3 and not any(_alive(pid) for pid in pids)
    assert "killed c" in supervisor.out.getvalue()  # SIGTERM ignored: SIGKILL after the grace period


def test_one_child_dying_stops_the_others_and_fails(settings):
    supervisor = FakeSupervisor([("web", SLEEPER), ("worker", [sys.executable, "-c", "raise SystemExit(3)"])])
    assert supervisor.run(duration_s=30.0) == 1
    assert "worker exited with status 3" in supervisor.failure
    assert not any(_alive(child.pid) for _name, child in supervisor.children)


def test_every_demo_process_runs_on_the_demo_settings():
    commands = dict(DemoSupervisor(host="127.0.0.1", port=8123, out=StringIO()).commands())
    assert sorted(commands) == ["beat", "web", "worker"]
    assert all("--settings=portal.demo_settings" in command for command in commands.values())
    assert commands["web"][-1] == "127.0.0.1:8123"


def test_the_demo_settings_need_no_server():
    from portal import demo_settings

    assert demo_settings.CELERY_BROKER_URL == "filesystem://"
    assert demo_settings.SCHEDULER["lock_backend"] == "file" and demo_settings.CLUSTER_BACKEND == "simulated"
    assert demo_settings.CELERY_BEAT_SCHEDULE["demo-feed"]["task"] == "portal.demo_feed"
    assert "scheduling-cycle" in demo_settings.CELERY_BEAT_SCHEDULE


def test_demo_run_refuses_without_debug(settings):
    settings.DEBUG = False
    with pytest.raises(CommandError, match="DEBUG=1"):
        call_command("demo", "run", "--duration-s", "1", stdout=StringIO())
