"""The queue page and API cost the same number of SQL queries with 10 or 10,000 pending jobs (timings are
measured by ``manage.py bench portal``, never asserted here)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from rest_framework.test import APIClient

from tests.portal.fleet import pending_queue

pytestmark = pytest.mark.django_db

PAGE = "jobs:queue"


def _count(client, url: str, **headers: str) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url, headers=headers).status_code == 200
    return len(queries)


@pytest.fixture
def small_and_big(team, lead, outsider):
    """Query counts measured on a short queue, then the queue grown to 10,000 pending jobs."""
    pending_queue(team, 10, submitted_by=lead)
    return team


def test_queue_page_and_api_use_a_constant_number_of_queries(
    client, lead, team, outsider, small_and_big, django_assert_num_queries
) -> None:
    client.force_login(lead)
    api = APIClient()
    api.force_authenticate(lead)
    page_url, api_url = reverse(PAGE), "/api/v1/queue/"
    small = {
        "page": _count(client, page_url),
        "partial": _count(client, page_url, HX_Request="true"),
        "api": _count(api, api_url),
    }
    other = outsider.memberships.get().team
    pending_queue(team, 9_990 - 2_000, submitted_by=lead, start_position=11)
    pending_queue(other, 2_000, start_position=10_001)  # another team's queue: scoped out, still constant

    with django_assert_num_queries(small["page"]):
        response = client.get(page_url)
    assert response.context["page"].paginator.count == 8_000
    with django_assert_num_queries(small["partial"]):
        client.get(page_url, headers={"HX-Request": "true"})
    with django_assert_num_queries(small["api"]):
        body = api.get(api_url, {"page": 40}).json()
    assert body["count"] == 8_000 and len(body["results"]) == 50
    # Session, user, org roles (navigation, scoping), team filter, count and one page: nothing per row.
    assert small["api"] <= 5 and small["page"] <= 10


def test_dashboard_queries_do_not_grow_with_the_queue(client, lead, team, django_assert_num_queries) -> None:
    pending_queue(team, 10, submitted_by=lead)
    client.force_login(lead)
    url = reverse("jobs:dashboard", args=[team.slug])
    baseline = _count(client, url)
    pending_queue(team, 5_000, submitted_by=lead, start_position=11)
    with django_assert_num_queries(baseline):
        assert client.get(url).context["data"].pending_jobs == 5_010
