"""The demo's early spot interruption (demo.interruption): on the seeded demo fleet, a checkpointed training job on spot
gets a notice within minutes and its page reads checkpointed (step N) → preempted (spot interruption) → resumed from
step N on node X."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from demo.interruption import INTERRUPTED_JOB, demo_spot_interruption
from demo.seed import demo_seed
from demo.tasks import demo_spot_interruption_task
from jobs.models import Allocation, Job
from scheduler.errors import GatewayConflict
from scheduler.gateways import gateway_override
from scheduler.gateways.simulated import FleetSettings, SimulatedFleet
from scheduler.loop.apply import Retry
from scheduler.loop.cycle import cycle_run
from tests.scheduler.loop_helpers import Clock

pytestmark = pytest.mark.django_db

NO_WAIT = Retry(attempts=1, backoff_s=0.0, sleep=lambda _s: None)


@pytest.fixture
def demo(settings, tmp_path):
    """The demo org and fleet, the demo's fleet settings (no random reclaims here), the file lock."""
    from portal import demo_settings

    settings.SCHEDULER = {**settings.SCHEDULER, "lock_backend": "file"}
    settings.SCHEDULER_LOCK_FILE = tmp_path / "scheduler.lock"
    demo_seed(history=False)
    clock = Clock()
    notice_s = demo_settings.SCHEDULER["simulated_notice_s"]
    fleet = SimulatedFleet(FleetSettings(speed=60.0, interruptions_per_node_hour=0.0, notice_s=notice_s), clock=clock)
    return fleet, clock


def test_the_demo_reclaims_a_checkpointed_job_on_spot_and_its_page_tells_the_story(demo, client):
    fleet, clock = demo
    submitted = demo_spot_interruption(gateway=fleet)
    job = Job.objects.get(pk=submitted["submitted"])
    assert (job.team.slug, job.name, job.checkpoint_interval_s) == ("speech", "asr-train-spot", 600)
    assert demo_spot_interruption(gateway=fleet) == {"waiting": "for a checkpointed training job on a spot node"}

    cycle_run(gateway=fleet, retry=NO_WAIT)
    (spot,) = {a.node.name for a in Allocation.objects.filter(job=job, ended_at=None)}
    assert {a.tier for a in Allocation.objects.filter(job=job)} == {"spot"}
    assert "waiting" in demo_spot_interruption(gateway=fleet)  # no checkpoint yet: nothing to show

    clock.advance(11)  # 660 virtual seconds: the first save, at 600
    cycle_run(gateway=fleet, retry=NO_WAIT)
    with gateway_override(fleet):
        noticed = demo_spot_interruption_task.run()
    assert (noticed["noticed"], noticed["job"]) == (spot, job.pk)
    assert noticed["cycle"]["repairs"]["drained"] == [str(job.pk)]  # handled at once, not a period later
    assert demo_spot_interruption(gateway=fleet) == {"waiting": "a notice is under way"}

    clock.advance(1)  # saved on SIGTERM (30 virtual seconds) and gone
    report = cycle_run(gateway=fleet, retry=NO_WAIT)
    assert report.repairs["requeued"] == [str(job.pk)]
    assert [bind["job"] for bind in report.decisions["binds"]] == [str(job.pk)]
    (elsewhere,) = {a.node.name for a in Allocation.objects.filter(job=job, ended_at=None)}
    assert elsewhere != spot
    assert "done" in demo_spot_interruption(gateway=fleet)  # once

    client.force_login(get_user_model().objects.get(username="speech-lead"))
    body = client.get(reverse("jobs:detail", args=[job.pk])).content.decode()
    story = [
        "Checkpointed (step 600)",
        "Checkpointed (step 660)",
        "Preempted (spot interruption)",
        f"Resumed from step 660 on node {elsewhere}",
    ]
    assert [line in body for line in story] == [True] * len(story)
    assert sorted(story, key=body.index) == story
    client.force_login(get_user_model().objects.get(username="vision-lead"))  # another team's lead
    assert client.get(reverse("jobs:detail", args=[job.pk])).status_code == 404


def test_the_demo_schedules_its_reclaim_and_keeps_notices_visible_to_the_loop():
    from portal import demo_settings

    entry = demo_settings.CELERY_BEAT_SCHEDULE["demo-spot-interruption"]
    assert entry["task"] == demo_spot_interruption_task.name == "demo.spot_interruption"
    # A notice outlasts the interruption task's period in real seconds, so the loop sees it before the node goes.
    notice_real_s = demo_settings.SCHEDULER["simulated_notice_s"] / demo_settings.SCHEDULER["simulated_speed"]
    assert notice_real_s > demo_settings.CELERY_BEAT_SCHEDULE["interruptions"]["schedule"]
    assert INTERRUPTED_JOB["duration_s"] / demo_settings.SCHEDULER["simulated_speed"] > 5 * 60  # still running then


class _NoticedAlready(SimulatedFleet):
    """The fleet's own random draw noticed the node in the instant the demo asks (notice_give refuses)."""

    def notice_give(self, *, node: str, notice_s: float | None = None):
        raise GatewayConflict(f"node {node} is under a notice already")


def test_a_notice_the_fleet_gave_first_is_waited_for_not_raised(demo):
    fleet, clock = demo
    demo_spot_interruption(gateway=fleet)
    cycle_run(gateway=fleet, retry=NO_WAIT)
    clock.advance(11)  # the first save, at 600 virtual seconds
    cycle_run(gateway=fleet, retry=NO_WAIT)
    racing = _NoticedAlready(fleet.settings, clock=clock)
    answer = demo_spot_interruption(gateway=racing)
    assert set(answer) == {"waiting"} and "under a notice already" in answer["waiting"]
