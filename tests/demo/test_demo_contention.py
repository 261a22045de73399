"""The demo's first minute on the seeded fleet: the feed, the spot interruption and the scheduling loop run as beat
schedules them (``portal/demo_settings.py``), on a clock the test moves, and the queue shows contention —
several teams waiting, a reservation with a start time, a job held by its quota, borrowing, and production
inference that started by preemption."""

from __future__ import annotations

import random

import pytest

from demo.feed import demo_feed
from demo.interruption import demo_spot_interruption
from demo.opening import ARRIVAL, OPENING
from demo.seed import demo_seed
from jobs.models import Job, JobEvent
from jobs.selectors.team_usage import team_quota_use
from scheduler.core.model.vocabulary import EventType, EvictionReason, JobState
from scheduler.gateways.simulated import FleetSettings, SimulatedFleet
from scheduler.loop.apply import Retry
from scheduler.loop.cycle import cycle_run
from teams.models import Team
from tests.scheduler.loop_helpers import Clock

pytestmark = pytest.mark.django_db

NO_WAIT = Retry(attempts=1, backoff_s=0.0, sleep=lambda _s: None)
STEP_S = 5


@pytest.fixture
def first_minute(settings, tmp_path):
    """Seed, then one minute of beat's schedule: the feed, the reclaim and the cycle at their periods."""
    from portal import demo_settings

    settings.SCHEDULER = {**settings.SCHEDULER, "lock_backend": "file"}
    settings.SCHEDULER_LOCK_FILE = tmp_path / "scheduler.lock"
    demo_seed(history=False)
    clock = Clock()
    speed = demo_settings.SCHEDULER["simulated_speed"]
    notice_s = demo_settings.SCHEDULER["simulated_notice_s"]
    fleet = SimulatedFleet(FleetSettings(speed=speed, interruptions_per_node_hour=0.0, notice_s=notice_s), clock=clock)
    periods = {
        "feed": int(demo_settings.DEMO_FEED_S),
        "reclaim": int(demo_settings.DEMO_INTERRUPTION_S),
        "cycle": int(demo_settings.SCHEDULER["cycle_s"]),
    }
    rng = random.Random(2026)
    for elapsed in range(STEP_S, 60 + STEP_S, STEP_S):
        clock.advance(STEP_S)
        # Beat runs an interval task first one period after it starts, as here.
        if elapsed % periods["feed"] == 0:
            demo_feed(rng=rng, now=clock())
        if elapsed % periods["reclaim"] == 0:
            demo_spot_interruption(gateway=fleet)
        if elapsed % periods["cycle"] == 0:
            cycle_run(gateway=fleet, retry=NO_WAIT)
    return clock


def test_within_a_minute_several_teams_wait_for_different_reasons(first_minute):
    clock = first_minute
    pending = list(Job.objects.filter(state=JobState.PENDING).select_related("team"))
    assert len({job.team.slug for job in pending}) >= 2
    # Every waiting job has been seen by a cycle: a position and a reason of the engine's.
    assert all(job.queue_position and job.team_queue_position for job in pending)
    assert not any("next scheduling cycle" in job.state_reason for job in pending)

    reserved = [job for job in pending if "reserved on" in job.state_reason]
    assert reserved and all(job.eta_at is not None and job.eta_at > clock() for job in reserved)
    assert all("expected to start in about" in job.state_reason for job in reserved)

    held = [job for job in pending if "within quota" in job.state_reason]
    assert held and all(job.eta_at is None for job in held)
    # Language Models' second evaluation, held by its guarantee (work that is not preemptible), says what unblocks it.
    by_guarantee = [job for job in held if "not preemptible" in job.state_reason]
    assert by_guarantee and all("submit it as preemptible" in job.state_reason for job in by_guarantee)


def test_within_a_minute_a_team_borrows_above_its_guarantee(first_minute):
    borrowing = {
        team.slug: [row.gpu_class for row in team_quota_use(team=team) if row.borrowed_gpus > 0]
        for team in Team.objects.all()
    }
    assert any(borrowing.values()), borrowing


def test_within_a_minute_production_inference_starts_by_preemption(first_minute):
    arrival = Job.objects.get(name=ARRIVAL.name)
    assert (arrival.priority, arrival.state) == ("production", JobState.RUNNING)
    evicted = JobEvent.objects.filter(type=EventType.PREEMPTED, details__reason=EvictionReason.PRODUCTION.value)
    assert evicted.exists()
    assert {str(arrival.pk)} == {event.details["by"] for event in evicted}
    # Only work that is not production was evicted, and it waits again (or has already started elsewhere).
    assert not any(event.job.priority == "production" for event in evicted)


def test_the_opening_is_submitted_once_and_the_stream_follows(first_minute):
    names = [job.name for job in OPENING]
    assert sorted(Job.objects.filter(name__in=names).values_list("name", flat=True)) == sorted(names)
    assert Job.objects.filter(name=ARRIVAL.name).count() == 1
    streamed = Job.objects.exclude(name__in=[*names, ARRIVAL.name]).exclude(name__startswith="history-")
    assert streamed.exists()  # the feed's later calls submit the stream


def test_an_opening_job_refused_leaves_no_part_of_the_opening(monkeypatch):
    """All of the opening or none: with part of it submitted, the next step would see live work and never
    submit the rest."""
    from django.utils import timezone

    from demo import opening
    from jobs.errors import PendingLimitReached

    demo_seed(history=False)
    submit = opening.job_submit
    calls = []

    def refuse_the_fifth(**kwargs):
        calls.append(kwargs["spec"]["name"])
        if len(calls) == 5:
            raise PendingLimitReached("the team has too many pending jobs")
        return submit(**kwargs)

    monkeypatch.setattr(opening, "job_submit", refuse_the_fifth)
    now = timezone.now()
    with pytest.raises(PendingLimitReached):
        opening.opening_step(now=now)
    assert not Job.objects.filter(name__in=[job.name for job in OPENING]).exists()
    monkeypatch.setattr(opening, "job_submit", submit)
    assert len(opening.opening_step(now=now) or []) == len(OPENING)  # the next step submits all of it
