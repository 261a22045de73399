"""The jobs page (``/jobs/``): every job of the reader's teams in any state, searched, filtered, sorted and paged
by the query string; bulk cancel for what the reader may cancel; and the API list filtering the same way."""

from __future__ import annotations

import re
from datetime import timedelta
from urllib.parse import urlencode

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from jobs.api.filters import SORT_CHOICES
from jobs.models import Job, JobEvent
from jobs.pages.job_list import JOBS_PAGE_SIZE
from tests.factories import JobFactory, ProjectFactory
from tests.portal.fleet import fleet, running_job

pytestmark = pytest.mark.django_db

URL = "/jobs/"


def names(response) -> list[str]:
    """Job names of the page's rows, in their order."""
    assert response.status_code == 200
    body = response.content.decode()
    return re.findall(r'<tr data-job="\d+">.*?<a href="/jobs/\d+/">([^<]+)</a>', body, flags=re.S)


@pytest.fixture
def jobs(team, lead, member, outsider):
    """A week of the team's work in every state, and a job of the outsider's team."""
    now = timezone.now()
    node = fleet()
    project = ProjectFactory(team=team, code="llm-pretrain")
    made = {
        "trainer": running_job(
            team, node, name="trainer", submitted_by=member, project=project, started_at=now - timedelta(minutes=30)
        ),
        "waiting": JobFactory(
            team=team,
            name="waiting",
            state="pending",
            submitted_by=lead,
            priority="high",
            kind="inference",
            gpus=None,
            mig_profile="3g.40gb",
            gpu_model="H100-SXM5-80GB",
            submitted_at=now - timedelta(hours=1),
        ),
        "old-done": JobFactory(
            team=team,
            name="old-done",
            state="completed",
            submitted_by=member,
            priority="low",
            image="nvcr.io/nvidia/pytorch:24.05",
            submitted_at=now - timedelta(days=6),
            finished_at=now - timedelta(days=5),
        ),
        "broken": JobFactory(
            team=team,
            name="broken",
            state="failed",
            submitted_by=lead,
            priority="production",
            kind="batch",
            submitted_at=now - timedelta(days=2),
            finished_at=now - timedelta(days=2),
        ),
        "mine-pending": JobFactory(
            team=team, name="mine-pending", state="pending", submitted_by=member, submitted_at=now - timedelta(hours=2)
        ),
        "theirs": JobFactory(
            team=outsider.memberships.get().team,
            name="theirs",
            state="running",
            submitted_by=outsider,
            image="nvcr.io/nvidia/pytorch:24.05",
            started_at=now,
            submitted_at=now,
        ),
    }
    return made


def test_anonymous_is_sent_to_sign_in(client) -> None:
    response = client.get(URL)
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_url_is_named_and_linked_from_the_navigation(client, member, jobs) -> None:
    assert reverse("jobs:list") == URL
    client.force_login(member)
    body = client.get(reverse("jobs:queue")).content.decode()
    assert f'<a href="{URL}"' in body


def test_the_overview_links_its_recent_jobs_to_the_list(client, platform_admin, jobs) -> None:
    client.force_login(platform_admin)
    body = client.get(reverse("home")).content.decode()
    assert f'<small><a href="{URL}">every job of your teams</a></small>' in body


def test_every_state_of_the_teams_jobs_newest_first_each_linking_to_its_page(client, member, jobs) -> None:
    client.force_login(member)
    response = client.get(URL)
    assert names(response) == ["trainer", "waiting", "mine-pending", "broken", "old-done"]
    body = response.content.decode()
    for job in Job.objects.filter(team__slug="nlp"):
        assert reverse("jobs:detail", args=[job.pk]) in body
    assert "5 jobs" in body


def test_outsider_never_sees_another_teams_jobs(client, outsider, jobs) -> None:
    client.force_login(outsider)
    assert names(client.get(URL)) == ["theirs"]
    # Naming the other team, or searching for its job by name or id, finds nothing and says nothing of it.
    for query in ({"team": "nlp"}, {"q": "trainer"}, {"q": str(jobs["trainer"].pk)}, {"project": "llm-pretrain"}):
        response = client.get(URL, query)
        assert names(response) == [], query
        assert "filter-errors" not in response.content.decode(), query


def test_platform_admin_sees_every_team(client, platform_admin, jobs) -> None:
    client.force_login(platform_admin)
    assert set(names(client.get(URL))) == set(jobs)


def test_finance_without_a_team_gets_an_empty_list_pointing_to_the_reports(client, finance_user, jobs) -> None:
    client.force_login(finance_user)
    response = client.get(URL)
    assert names(response) == []
    body = response.content.decode()
    assert "not a member of any team" in body and reverse("billing:reports") in body
    assert "theirs" not in body and "trainer" not in body


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"state": "running"}, {"trainer"}),
        ({"state": ["pending", "failed"]}, {"waiting", "mine-pending", "broken"}),
        ({"team": "nlp"}, {"trainer", "waiting", "mine-pending", "broken", "old-done"}),
        ({"project": "llm-pretrain"}, {"trainer"}),
        ({"priority": "production"}, {"broken"}),
        ({"kind": "inference"}, {"waiting"}),
        ({"gpu_model": "H100-SXM5-80GB"}, {"waiting"}),  # asked for
        ({"gpu_model": "A100-SXM4-80GB"}, {"trainer"}),  # placed on
        ({"gpu_model": "A100"}, {"trainer"}),  # a class matches its models
        ({"mine": "true"}, {"trainer", "old-done", "mine-pending"}),
        ({"q": "WAIT"}, {"waiting"}),  # name, any case
        ({"q": "nlp-lead"}, {"waiting", "broken"}),  # submitter
        ({"q": "pytorch:24"}, {"old-done"}),  # image (the outsider's job with it stays hidden)
        ({"name": "mine"}, {"mine-pending"}),
    ],
)
def test_each_filter_and_the_search(client, member, jobs, query, expected) -> None:
    client.force_login(member)
    assert set(names(client.get(URL, query))) == expected


def test_search_by_id(client, member, jobs) -> None:
    client.force_login(member)
    broken = jobs["broken"]
    # A bare number also matches names and images containing it; "#" asks for the id alone.
    assert "broken" in names(client.get(URL, {"q": str(broken.pk)}))
    assert names(client.get(URL, {"q": f"#{broken.pk}"})) == ["broken"]


def test_submitted_time_range(client, member, jobs) -> None:
    client.force_login(member)
    now = timezone.now()
    query = {
        "submitted_after": (now - timedelta(days=7)).isoformat(),
        "submitted_before": (now - timedelta(days=1)).isoformat(),
    }
    assert set(names(client.get(URL, query))) == {"broken", "old-done"}


@pytest.mark.parametrize(
    ("sort", "expected"),
    [
        ("-submitted", ["trainer", "waiting", "mine-pending", "broken", "old-done"]),
        ("submitted", ["old-done", "broken", "mine-pending", "waiting", "trainer"]),
        ("-priority", ["broken", "waiting", "mine-pending", "trainer", "old-done"]),
        ("priority", ["old-done", "trainer", "mine-pending", "waiting", "broken"]),
        ("name", ["broken", "mine-pending", "old-done", "trainer", "waiting"]),
        ("-name", ["waiting", "trainer", "old-done", "mine-pending", "broken"]),
        ("state", ["old-done", "broken", "mine-pending", "waiting", "trainer"]),
    ],
)
def test_sorts(client, member, jobs, sort, expected) -> None:
    # Equal priorities (trainer and mine-pending are both normal) fall back on the id in the same direction.
    Job.objects.filter(name="trainer").update(priority="normal")
    client.force_login(member)
    got = names(client.get(URL, {"sort": sort}))
    if sort.endswith("priority"):
        # Ties among normal jobs follow the id, not the submit time: compare the order of priorities.
        order = {"production": 0, "high": 1, "normal": 2, "low": 3}
        priorities = [order[Job.objects.get(name=n).priority] for n in got]
        assert priorities == sorted(priorities, reverse=sort == "priority")
        assert set(got) == set(expected)
    elif sort == "state":
        states = [Job.objects.get(name=n).state for n in got]
        assert states == sorted(states)
    else:
        assert got == expected


def test_every_sort_offered_is_accepted(client, member, jobs) -> None:
    client.force_login(member)
    for value, _label in SORT_CHOICES:
        assert len(names(client.get(URL, {"sort": value}))) == 5, value


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"state": "exploded"}, "state"),
        ({"priority": "urgent"}, "priority"),
        ({"kind": "party"}, "kind"),
        ({"gpu_model": "V100"}, "gpu_model"),
        ({"sort": "cost"}, "sort"),
        ({"submitted_after": "yesterday"}, "submitted_after"),
        ({"submitted_before": "2026-01-01T00:00+20:00"}, "submitted_before"),
        ({"q": "x" * 201}, "q"),
    ],
)
def test_a_bad_filter_value_is_a_message_on_the_page_and_400_in_the_api(client, member, jobs, query, field) -> None:
    client.force_login(member)
    response = client.get(URL, query)
    assert response.status_code == 200 and names(response) == []
    body = response.content.decode()
    assert 'data-testid="filter-errors"' in body and f"<li>{field}:" in body
    api = APIClient()
    api.force_authenticate(member)
    bad = api.get("/api/v1/jobs/", query)
    assert bad.status_code == 400 and field in bad.json()


def test_pagination_keeps_the_filters(client, lead, team) -> None:
    now = timezone.now()
    Job.objects.bulk_create(
        Job(
            team=team,
            name=f"bulk-{i:03d}",
            kind="training",
            gpus=1,
            state="completed",
            submitted_at=now,
            started_at=now,
            finished_at=now,
        )
        for i in range(JOBS_PAGE_SIZE + 7)
    )
    JobFactory(team=team, name="odd-one-out", state="pending")
    client.force_login(lead)
    first = client.get(URL, {"state": "completed", "sort": "name"})
    assert len(names(first)) == JOBS_PAGE_SIZE
    body = first.content.decode()
    assert f"{JOBS_PAGE_SIZE + 7} jobs match" in body
    next_link = re.search(r'href="\?([^"]+)" rel="next"', body)
    assert next_link is not None
    second = client.get(URL + "?" + next_link.group(1).replace("&amp;", "&"))
    assert names(second) == [f"bulk-{i:03d}" for i in range(JOBS_PAGE_SIZE, JOBS_PAGE_SIZE + 7)]


def test_a_bookmarked_url_shows_the_same_jobs_and_the_form_as_it_was(client, member, jobs) -> None:
    client.force_login(member)
    query = urlencode(
        [("state", "pending"), ("state", "completed"), ("q", "n"), ("sort", "name"), ("team", "nlp")], doseq=True
    )
    first = client.get(f"{URL}?{query}")
    client.logout()
    client.force_login(member)
    again = client.get(f"{URL}?{query}")
    assert names(first) == names(again) == ["mine-pending", "old-done", "waiting"]
    body = again.content.decode()
    assert 'value="n"' in body
    assert re.search(r'value="pending" checked', body) and re.search(r'value="completed" checked', body)
    assert not re.search(r'value="running" checked', body)
    assert re.search(r'<option value="name" selected>', body)
    assert re.search(r'<option value="nlp" selected>', body)


def test_the_page_costs_a_constant_number_of_queries(client, lead, team) -> None:
    def count(n: int) -> int:
        Job.objects.bulk_create(
            Job(team=team, name=f"q-{n}-{i}", kind="training", gpus=1, state="pending", submitted_at=timezone.now())
            for i in range(n)
        )
        client.force_login(lead)
        with CaptureQueriesContext(connection) as queries:
            assert client.get(URL).status_code == 200
        counts = [q["sql"] for q in queries.captured_queries if q["sql"].lstrip().upper().startswith("SELECT COUNT")]
        assert len(counts) == 1, counts
        return len(queries.captured_queries)

    assert count(3) == count(30)


def test_dashboard_counts_link_to_the_filtered_list(client, lead, team, jobs) -> None:
    client.force_login(lead)
    body = client.get(reverse("jobs:dashboard", args=[team.slug])).content.decode()
    links = {
        testid: href.replace("&amp;", "&")
        for href, testid in re.findall(r'<a class="stat" href="([^"]+)" data-testid="([a-z-]+)"', body)
    }
    assert names(client.get(links["running-link"])) == ["trainer"]
    assert set(names(client.get(links["pending-link"]))) == {"waiting", "mine-pending"}
    every = re.search(r'href="([^"]+)" data-testid="all-jobs-link"', body)
    assert every is not None and len(names(client.get(every.group(1).replace("&amp;", "&")))) == 5


# --- Bulk cancel ------------------------------------------------------------------------------------------------


def checkboxes(response) -> set[int]:
    return {int(pk) for pk in re.findall(r'name="selected" value="(\d+)"', response.content.decode())}


def test_a_lead_cancels_any_live_job_of_the_team(client, lead, jobs) -> None:
    client.force_login(lead)
    page = client.get(URL, {"state": "pending"})
    live = {jobs[n].pk for n in ("waiting", "mine-pending")}
    assert checkboxes(client.get(URL)) == live | {jobs["trainer"].pk}  # ended jobs have no box
    assert "data-confirm=" in page.content.decode()
    response = client.post(f"{URL}?state=pending", {"action": "cancel", "selected": sorted(live)})
    assert response.status_code == 302 and response["Location"] == f"{URL}?state=pending"
    assert set(Job.objects.filter(pk__in=live).values_list("state", flat=True)) == {"cancelled"}
    assert JobEvent.objects.filter(job_id__in=live, type="cancelled", actor=lead).count() == 2
    assert "Cancelled 2 jobs." in client.get(response["Location"]).content.decode()


def test_a_member_gets_boxes_only_for_their_own_live_jobs(client, member, jobs) -> None:
    client.force_login(member)
    assert checkboxes(client.get(URL)) == {jobs["trainer"].pk, jobs["mine-pending"].pk}
    # A forged post for a colleague's job is refused by the service, and nothing is cancelled.
    waiting, mine = jobs["waiting"], jobs["mine-pending"]
    response = client.post(URL, {"action": "cancel", "selected": [waiting.pk, mine.pk]}, follow=True)
    assert "a member cancels only the jobs they submitted" in response.content.decode()
    assert set(Job.objects.filter(pk__in=[waiting.pk, mine.pk]).values_list("state", flat=True)) == {"pending"}
    client.post(URL, {"action": "cancel", "selected": [mine.pk]})
    mine.refresh_from_db()
    assert mine.state == "cancelled"


def test_an_outsider_cannot_cancel_another_teams_job_and_learns_nothing(client, outsider, jobs) -> None:
    client.force_login(outsider)
    target = jobs["waiting"]
    response = client.post(URL, {"action": "cancel", "selected": [target.pk]}, follow=True)
    body = response.content.decode()
    assert "not jobs of your teams" in body and "waiting" not in body
    target.refresh_from_db()
    assert target.state == "pending"
    assert checkboxes(client.get(URL)) == {jobs["theirs"].pk}


def test_finance_gets_no_boxes_and_cancels_nothing(client, finance_user, jobs) -> None:
    client.force_login(finance_user)
    assert checkboxes(client.get(URL)) == set()
    client.post(URL, {"action": "cancel", "selected": [jobs["waiting"].pk]})
    assert Job.objects.get(pk=jobs["waiting"].pk).state == "pending"


def test_bulk_cancel_refuses_ended_jobs_and_an_empty_selection(client, lead, jobs) -> None:
    client.force_login(lead)
    body = client.post(URL, {"action": "cancel", "selected": [jobs["broken"].pk]}, follow=True).content.decode()
    assert "is already failed" in body
    body = client.post(URL, {"action": "cancel"}, follow=True).content.decode()
    assert "select at least one job first" in body
    body = client.post(URL, {"action": "delete", "selected": [jobs["waiting"].pk]}, follow=True).content.decode()
    assert "Choose an action" in body
    assert Job.objects.get(pk=jobs["waiting"].pk).state == "pending"


def test_platform_admin_cancels_across_teams(client, platform_admin, jobs) -> None:
    client.force_login(platform_admin)
    targets = [jobs["theirs"].pk, jobs["waiting"].pk]
    client.post(URL, {"action": "cancel", "selected": targets})
    assert set(Job.objects.filter(pk__in=targets).values_list("state", flat=True)) == {"cancelled"}


# --- The API list filters the same way -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        {"state": "running"},
        {"state": ["pending", "failed"]},
        {"project": "llm-pretrain"},
        {"kind": "inference"},
        {"gpu_model": "A100"},
        {"gpu_model": "H100-SXM5-80GB"},
        {"q": "nlp-lead"},
        {"q": "pytorch"},
        {"sort": "-priority"},
        {"sort": "name"},
        {"team": "vision"},
        {},
    ],
)
def test_the_api_list_answers_like_the_page(client, member, jobs, query) -> None:
    client.force_login(member)
    page = names(client.get(URL, query))
    api = APIClient()
    api.force_authenticate(member)
    response = api.get("/api/v1/jobs/", query)
    assert response.status_code == 200
    assert [row["name"] for row in response.json()["results"]] == page
