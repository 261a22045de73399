"""The demo's job feed and the `demo run` supervisor (it stops every process it started)."""

from __future__ import annotations

import os
import random
import sys
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from demo.feed import demo_feed
from demo.management.commands.demo import DemoSupervisor
from demo.seed import _TEAMS as DEMO_TEAMS
from jobs.models import Job
from tests.factories import ProjectFactory, TeamFactory

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


@pytest.mark.django_db
def test_the_feed_submits_valid_demo_jobs_until_the_queue_is_full():
    # The demo's teams and projects (demo_seed makes them too, with users and a fleet the feed does not need).
    for slug, _name, _weight, _quotas, projects in DEMO_TEAMS:
        team = TeamFactory(slug=slug, namespace=f"team-{slug}")
        for code, _title in projects:
            ProjectFactory(team=team, code=code)
    rng = random.Random(5)
    jobs = [demo_feed(rng=rng, max_pending=12) for _ in range(15)]
    submitted = [job for job in jobs if job is not None]
    assert len(submitted) == 12 and Job.objects.filter(state="pending").count() == 12
    assert {job.team.slug for job in submitted} <= {"nlp", "vision", "speech"}
    assert all(job.project is not None and job.duration_s for job in submitted)


@pytest.mark.django_db
def test_the_feed_waits_for_the_demo_teams():
    assert demo_feed(rng=random.Random(1)) is None


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
