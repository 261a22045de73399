"""The simulated fleet's speed is stated on the pages that show job times, and only there; a real cluster never
shows it."""

from __future__ import annotations

import pytest
from django.urls import reverse

from portal.context_processors import SimulatedClock
from tests.factories import JobFactory, MembershipFactory

pytestmark = pytest.mark.django_db

NOTICE = 'data-testid="simulated-speed"'


@pytest.fixture
def timed_pages(team, lead):
    job = JobFactory(team=team, state="pending")
    MembershipFactory(user=lead, role="member")  # a second team: "/" is the overview of both, not a redirect
    return {
        "dashboard": reverse("jobs:dashboard", args=[team.slug]),
        "jobs": reverse("jobs:list"),
        "queue": reverse("jobs:queue"),
        "job": reverse("jobs:detail", args=[job.pk]),
        "overview": reverse("home"),
    }


def test_the_simulated_speed_is_stated_where_times_are_shown(client, settings, lead, timed_pages) -> None:
    settings.CLUSTER_BACKEND = "simulated"
    settings.SCHEDULER = {**settings.SCHEDULER, "simulated_speed": 60.0}
    client.force_login(lead)
    for name, url in timed_pages.items():
        body = client.get(url).content.decode()
        assert NOTICE in body, name
        assert "job time runs 60× — a 1-hour job takes 1 min here" in body, name
    # Pages without job times say nothing of it.
    for url in (reverse("cluster"), reverse("jobs:submit"), reverse("api_token")):
        assert NOTICE not in client.get(url).content.decode(), url


def test_the_notice_follows_the_configured_speed(client, settings, lead, timed_pages) -> None:
    settings.CLUSTER_BACKEND = "simulated"
    settings.SCHEDULER = {**settings.SCHEDULER, "simulated_speed": 720.0}
    client.force_login(lead)
    assert "job time runs 720× — a 1-hour job takes 5 s here" in client.get(timed_pages["queue"]).content.decode()


def test_a_real_cluster_never_shows_it(client, settings, lead, timed_pages) -> None:
    settings.CLUSTER_BACKEND = "kubernetes"
    client.force_login(lead)
    for name, url in timed_pages.items():
        body = client.get(url).content.decode()
        assert NOTICE not in body, name


def test_the_htmx_polls_do_not_repeat_it(client, settings, lead, timed_pages) -> None:
    settings.CLUSTER_BACKEND = "simulated"
    client.force_login(lead)
    for name in ("queue", "job"):
        assert NOTICE not in client.get(timed_pages[name], headers={"HX-Request": "true"}).content.decode(), name


@pytest.mark.parametrize(
    ("speed", "label", "hour"),
    [
        (60.0, "60×", "1 min"),
        (1.0, "1×", "1 h"),
        (0.5, "0.5×", "2 h"),
        (1_000_000.0, "1,000,000×", "less than a second"),
    ],
)
def test_the_speed_in_words(speed: float, label: str, hour: str) -> None:
    clock = SimulatedClock(speed=speed)
    assert (clock.speed_label, clock.hour_takes) == (label, hour)
