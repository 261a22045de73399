"""A waiting job's start estimate and reason (jobs.selectors.waiting): a start time that has passed is never shown as a
time — on the queue page, the job page or the API — and no page invents a time or a reason the engine did not
write."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from jobs.selectors.waiting import DUE_NOW, NO_ESTIMATE, EtaStatus, eta_display, waiting_reason
from tests.factories import JobFactory

QUOTA_REASON = (
    "waiting for 8 A100 GPUs within quota: team nlp would hold 9 GPUs of class A100 in work that is not "
    "preemptible, above its guarantee of 8; it starts when the team's work that is not preemptible frees 1 GPU "
    "of class A100, or submit it as preemptible to use borrowed capacity; team at its guarantee; next in line"
)


def test_an_estimate_ahead_is_a_time_one_passed_is_due_none_is_none() -> None:
    now = timezone.now()
    ahead = eta_display(now + timedelta(minutes=5), now)
    assert (ahead.status, ahead.at, ahead.text) == (EtaStatus.ESTIMATED, now + timedelta(minutes=5), "in 5\xa0minutes")
    for passed in (now, now - timedelta(minutes=17)):
        assert eta_display(passed, now) == eta_display(now - timedelta(seconds=1), now)
        assert (eta_display(passed, now).at, eta_display(passed, now).text) == (None, DUE_NOW)
    assert (eta_display(None, now).status, eta_display(None, now).at) == (EtaStatus.NONE, None)


@pytest.mark.django_db
def test_the_reason_is_the_engines_or_says_no_cycle_has_seen_the_job(team) -> None:
    seen = JobFactory(team=team, state="pending", queue_position=1, state_reason=QUOTA_REASON)
    unseen = JobFactory(team=team, state="pending")
    positioned_without_reason = JobFactory(team=team, state="pending", queue_position=2, state_reason="")
    running = JobFactory(
        team=team, state="completed", submitted_at=timezone.now() - timedelta(hours=1), finished_at=timezone.now()
    )
    assert waiting_reason(seen) == QUOTA_REASON
    assert (
        waiting_reason(unseen) == waiting_reason(positioned_without_reason) == "waiting for the next scheduling cycle"
    )
    assert waiting_reason(running) is None


@pytest.fixture
def waiting_jobs(team, lead):
    now = timezone.now()
    return {
        "late": JobFactory(
            team=team,
            name="late",
            state="pending",
            submitted_by=lead,
            queue_position=1,
            team_queue_position=1,
            eta_at=now - timedelta(minutes=17),
            state_reason="waiting for 1 GPU; team within its guarantee; next in line",
        ),
        "held": JobFactory(
            team=team,
            name="held",
            state="pending",
            submitted_by=lead,
            queue_position=2,
            team_queue_position=2,
            eta_at=None,
            state_reason=QUOTA_REASON,
        ),
        "soon": JobFactory(
            team=team,
            name="soon",
            state="pending",
            submitted_by=lead,
            queue_position=3,
            team_queue_position=3,
            eta_at=now + timedelta(hours=2),
            state_reason="waiting for 1 GPU; team within its guarantee; 2 jobs ahead",
        ),
    }


def _row(body: str, job_id: int) -> str:
    start = body.index(f'data-job="{job_id}"')
    return body[start : body.index("</tr>", start)]


@pytest.mark.django_db
def test_the_queue_page_shows_due_never_a_past_time(client, lead, waiting_jobs) -> None:
    client.force_login(lead)
    body = client.get(reverse("jobs:queue")).content.decode()
    late, held, soon = (_row(body, waiting_jobs[name].pk) for name in ("late", "held", "soon"))
    past = timezone.localtime(waiting_jobs["late"].eta_at).strftime("%H:%M")
    assert DUE_NOW in late and past not in late
    assert NO_ESTIMATE in held and "or submit it as preemptible" in held and "minute" not in held
    assert timezone.localtime(waiting_jobs["soon"].eta_at).strftime("%H:%M") in soon and "in 1\xa0hour" in soon


@pytest.mark.django_db
def test_the_job_page_shows_due_never_a_past_time(client, lead, outsider, waiting_jobs) -> None:
    client.force_login(lead)
    late = client.get(reverse("jobs:detail", args=[waiting_jobs["late"].pk])).content.decode()
    assert DUE_NOW in late and "expected start" not in late
    held = client.get(reverse("jobs:detail", args=[waiting_jobs["held"].pk])).content.decode()
    assert NO_ESTIMATE in held and "or submit it as preemptible" in held
    soon = client.get(reverse("jobs:detail", args=[waiting_jobs["soon"].pk]), headers={"HX-Request": "true"})
    assert "expected start" in soon.content.decode() and DUE_NOW not in soon.content.decode()
    client.force_login(outsider)
    assert client.get(reverse("jobs:detail", args=[waiting_jobs["late"].pk])).status_code == 404


@pytest.mark.django_db
def test_the_api_gives_no_past_time_and_says_why(lead, outsider, waiting_jobs) -> None:
    client = APIClient()
    client.force_authenticate(lead)
    rows = {row["name"]: row for row in client.get("/api/v1/queue/").json()["results"]}
    assert (rows["late"]["eta_at"], rows["late"]["eta_status"]) == (None, "due")
    assert (rows["held"]["eta_at"], rows["held"]["eta_status"]) == (None, "none")
    assert rows["held"]["waiting_reason"] == QUOTA_REASON
    assert rows["soon"]["eta_status"] == "estimated" and rows["soon"]["eta_at"].startswith(
        str(timezone.localtime(waiting_jobs["soon"].eta_at).date())
    )
    detail = client.get(f"/api/v1/jobs/{waiting_jobs['late'].pk}/").json()
    assert (detail["eta_at"], detail["eta_status"]) == (None, "due")
    running = JobFactory(
        team=waiting_jobs["late"].team,
        state="running",
        submitted_at=timezone.now() - timedelta(hours=1),
        started_at=timezone.now(),
    )
    assert client.get(f"/api/v1/jobs/{running.pk}/").json()["eta_status"] is None
    outside = APIClient()
    outside.force_authenticate(outsider)
    assert outside.get(f"/api/v1/jobs/{waiting_jobs['late'].pk}/").status_code == 404


@pytest.mark.django_db
def test_the_api_schema_documents_the_estimate(lead) -> None:
    client = APIClient()
    client.force_authenticate(lead)
    schema = client.get("/api/schema/", {"format": "json"}).json()
    fields = schema["components"]["schemas"]["Job"]["properties"]
    assert "never given" in fields["eta_at"]["description"] and fields["eta_at"]["nullable"]
    assert "next scheduling cycle decides" in fields["eta_status"]["description"]
    assert "what would unblock" in fields["waiting_reason"]["description"]
