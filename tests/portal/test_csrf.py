"""Every state-changing page refuses a POST without the CSRF token: Django's CsrfViewMiddleware answers 403 and
nothing is written. The test client skips the check unless told (``enforce_csrf_checks``), so these requests are
what a forged cross-site form sends: the signed-in session's cookie and no token."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from jobs.models import Job, JobEvent
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def forged(lead) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(lead)
    return client


def _posts(team, job) -> list[tuple[str, dict[str, object]]]:
    return [
        (reverse("jobs:submit"), {"team": team.pk, "name": "forged", "kind": "training", "gpus": 1}),
        (reverse("jobs:cancel", args=[job.pk]), {}),
        (reverse("jobs:priority", args=[job.pk]), {"priority": "low"}),
        (reverse("jobs:manage", args=[team.slug]), {"action": "cancel", "jobs": [job.pk]}),
        (reverse("jobs:list"), {"action": "cancel", "jobs": [job.pk]}),
        (reverse("api_token"), {}),
        (reverse("api_token_revoke"), {}),
        (reverse("password_change"), {"old_password": "x", "new_password1": "y", "new_password2": "y"}),
        (reverse("sign_ins"), {}),
        (reverse("logout"), {}),
    ]


def test_a_forged_post_to_any_state_changing_page_is_refused_and_writes_nothing(forged, lead, team) -> None:
    job = JobFactory(team=team, state="pending", priority="normal")
    events = JobEvent.objects.count()
    for url, data in _posts(team, job):
        response = forged.post(url, data)
        assert response.status_code == 403, url
    job.refresh_from_db()
    assert (job.state, job.priority) == ("pending", "normal")
    assert Job.objects.count() == 1 and JobEvent.objects.count() == events
    assert forged.get(reverse("jobs:detail", args=[job.pk])).status_code == 200  # still signed in


def test_a_forged_sign_in_is_refused(db) -> None:
    response = Client(enforce_csrf_checks=True).post(reverse("login"), {"username": "a", "password": "b"})
    assert response.status_code == 403
