"""Times in the reader's zone, and the navigation each role gets."""

from __future__ import annotations

import pytest
from django.urls import reverse

from portal.middleware import zone_named

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("Europe/Paris", True),
        ("UTC", True),
        ("", False),
        ("Mars/Olympus", False),
        ("../etc/passwd", False),
        ("/etc/localtime", False),
        ("x" * 100, False),
    ],
)
def test_zone_named_accepts_only_iana_zones(name: str, ok: bool) -> None:
    assert (zone_named(name) is not None) is ok


def test_navigation_links(client, lead, platform_admin) -> None:
    client.force_login(lead)
    body = client.get(reverse("jobs:queue")).content.decode()
    for label in ("Dashboard", "Submit", "Queue", "Cluster", "API docs", "API token"):
        assert f">{label}</a>" in body, label
    assert 'aria-current="page">Queue' in body
    assert ">Admin</a>" not in body
    client.force_login(platform_admin)
    assert ">Admin</a>" in client.get(reverse("jobs:queue")).content.decode()


def test_pages_are_labelled_forms(client, lead, team) -> None:
    client.force_login(lead)
    body = client.get(reverse("jobs:submit")).content.decode()
    for field in ("team", "name", "params_b", "context", "priority", "replicas", "duration_h"):
        assert f'<label for="id_{field}">' in body, field
    assert 'lang="en"' in body and 'name="viewport"' in body


def test_finance_link_only_for_finance_and_admins(client, lead, finance_user, platform_admin) -> None:
    client.force_login(lead)
    assert ">Finance</a>" not in client.get(reverse("cluster")).content.decode()
    for user in (finance_user, platform_admin):
        client.force_login(user)
        assert f'href="{reverse("billing:reports")}">Finance</a>' in client.get(reverse("cluster")).content.decode()
