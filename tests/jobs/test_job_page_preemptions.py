"""A preempted job's page reads right (jobs.pages.job_page, jobs.selectors.preemptions): its preemption stays in
sight under any number of checkpoints, the header counts preemptions, and a victim's page names the preempting
job's team and kind — linking that job only for a viewer who may open it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from jobs.models import Job, JobEvent
from jobs.services import job_requeue
from tests.factories import JobFactory
from tests.portal.fleet import fleet, running_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def node():
    return fleet()


@pytest.fixture
def victim(team, node) -> Job:
    return running_job(team, node, name="victim", checkpoint_interval_s=10)


def _preemptor(team, *, kind="inference", priority="production", name="serve-llm") -> Job:
    return JobFactory(team=team, name=name, kind=kind, priority=priority, state="pending")


def _page(client, user, job: Job) -> str:
    client.force_login(user)
    response = client.get(reverse("jobs:detail", args=[job.pk]))
    assert response.status_code == 200
    return response.content.decode()


def _open_timeline(body: str) -> str:
    start = body.index('data-testid="timeline"')
    return body[start : body.index("</ol>", start)]


def test_a_preemption_stays_in_sight_under_a_checkpoint_every_10_s(client, lead, team, victim, outsider) -> None:
    """The issue's reproduction: two minutes of checkpoints every 10 s used to fold the preemption away."""
    theirs = _preemptor(outsider.memberships.get().team)
    at = timezone.now() - timedelta(minutes=5)
    job_requeue(job=victim, reason="production", by=str(theirs.pk), at=at)
    Job.objects.filter(pk=victim.pk).update(state="running")  # bound again, on other GPUs
    JobEvent.objects.create(job=victim, type="bound", at=at + timedelta(seconds=5), details={"resumed": True})
    JobEvent.objects.bulk_create(
        JobEvent(job=victim, type="checkpointed", at=at + timedelta(seconds=10 * (i + 1)), details={"step": 100 * i})
        for i in range(42)
    )
    body = _page(client, lead, victim)
    timeline = _open_timeline(body)
    assert "Preempted by a production inference job of team Vision (production)" in timeline
    assert "42 checkpoints, last at" in timeline and "(step 4100)" in timeline
    assert "Requeued" in timeline and "Restarted from the beginning" in timeline
    assert 'data-testid="preemptions"' in body and "Preempted 1 time, last by a production inference job" in body


def test_the_header_counts_preemptions(client, lead, team, victim) -> None:
    mine = _preemptor(team, kind="training", priority="high", name="urgent-train")
    start = timezone.now() - timedelta(minutes=90)
    job_requeue(job=victim, reason="spot-reclaim", by=None, at=start)
    job_requeue(job=victim, reason="node-lost", by=None, at=start + timedelta(minutes=20))
    job_requeue(job=victim, reason="priority", by=str(mine.pk), at=start + timedelta(minutes=40))
    body = _page(client, lead, victim)
    assert "Preempted 3 times, last by a high training job of team Language Models (priority)" in body
    # The status poll redraws the header alone and keeps the count.
    client.force_login(lead)
    poll = client.get(reverse("jobs:detail", args=[victim.pk]), headers={"HX-Request": "true"}).content.decode()
    assert "Preempted 3 times" in poll and 'data-testid="timeline"' not in poll


def test_a_victim_in_another_team_reads_team_and_kind_and_gets_no_link(
    client, lead, team, victim, outsider, platform_admin
) -> None:
    theirs = _preemptor(outsider.memberships.get().team)
    job_requeue(job=victim, reason="production", by=str(theirs.pk), at=timezone.now())
    event = JobEvent.objects.get(job=victim, type="preempted")
    assert event.details == {
        "reason": "production",
        "by": str(theirs.pk),
        "by_team": "vision",
        "by_team_name": "Vision",
        "by_kind": "inference",
        "by_priority": "production",
    }
    victim.refresh_from_db()
    assert victim.state_reason.startswith("preempted by a production inference job of team Vision (production)")
    body = _page(client, lead, victim)
    link = reverse("jobs:detail", args=[theirs.pk])
    assert "Preempted by a production inference job of team Vision (production)" in body
    assert f'href="{link}"' not in body and "serve-llm" not in body and f"job {theirs.pk}" not in body
    assert client.get(link).status_code == 404  # what the link would have led to: hence no link
    # A platform admin may open both jobs: the link is there.
    assert f'href="{link}"' in _page(client, platform_admin, victim)
    # The preempting team's lead is an outsider to the victim: its page is a 404 to them.
    client.force_login(outsider)
    assert client.get(reverse("jobs:detail", args=[victim.pk])).status_code == 404


def test_a_viewer_of_the_same_team_gets_a_link(client, member, team, victim) -> None:
    mine = _preemptor(team, kind="training", priority="high", name="urgent-train")
    job_requeue(job=victim, reason="priority", by=str(mine.pk), at=timezone.now())
    body = _page(client, member, victim)
    assert f'<a href="{reverse("jobs:detail", args=[mine.pk])}">job {mine.pk} (urgent-train)</a>' in body


def test_an_old_event_with_the_id_alone_is_completed_from_the_job_or_says_another_job(
    client, lead, team, victim, outsider
) -> None:
    theirs = _preemptor(outsider.memberships.get().team)
    at = timezone.now()
    JobEvent.objects.create(job=victim, type="preempted", at=at, details={"reason": "production", "by": str(theirs.pk)})
    body = _page(client, lead, victim)
    assert "Preempted by a production inference job of team Vision (production)" in body
    assert f'href="{reverse("jobs:detail", args=[theirs.pk])}"' not in body
    Job.objects.filter(pk=theirs.pk).delete()
    assert "Preempted by another job (production)" in _page(client, lead, victim)
