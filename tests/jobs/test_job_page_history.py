"""The job page leads with where the job runs now and folds its history: a long job shows its latest events and
checkpoints, the earlier ones in collapsed <details>, every one of them still on the page; the page stays
readable for each role that may see the job and hidden from everyone else."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.test.html import Element, parse_html
from django.urls import reverse
from django.utils import timezone

from jobs.models import Job
from jobs.pages.job_page import CHECKPOINTS_SHOWN, TIMELINE_SHOWN, fold
from jobs.selectors.jobs import job_events
from jobs.selectors.timeline import event_text
from tests.factories import JobFactory
from tests.jobs.long_jobs import CHECKPOINTS_PER_RUN, long_job
from tests.portal.fleet import fleet

pytestmark = pytest.mark.django_db

RUNS = 30  # 30 runs of 6 events each: far more than the page shows open


def _elements(node: Element | str) -> Iterator[Element]:
    if isinstance(node, str):
        return
    yield node
    for child in node.children:
        yield from _elements(child)


def _by_testid(root: Element, testid: str) -> Element:
    found = [e for e in _elements(root) if ("data-testid", testid) in e.attributes]
    assert len(found) == 1, f"{len(found)} elements with data-testid={testid}"
    return found[0]


def _items(element: Element, name: str) -> list[Element]:
    return [e for e in _elements(element) if e.name == name]


def _text(element: Element | str) -> str:
    if isinstance(element, str):
        return element
    return " ".join(_text(child) for child in element.children)


def _is_closed_details(element: Element) -> bool:
    return element.name == "details" and "open" not in dict(element.attributes)


@pytest.fixture
def node():
    return fleet()


@pytest.fixture
def long(team, node) -> Job:
    return long_job(team, node, runs=RUNS)


def _page(client, job: Job) -> tuple[str, Element]:
    response = client.get(reverse("jobs:detail", args=[job.pk]))
    assert response.status_code == 200
    body = response.content.decode()
    return body, parse_html(body)


def test_a_long_jobs_timeline_shows_its_latest_state_changes_and_folds_the_earlier_ones(client, member, long) -> None:
    """The open entries are the latest TIMELINE_SHOWN state changes; each run of checkpoints is one line among
    them (jobs.pages.job_page), so checkpoints never push a state change out of sight."""
    client.force_login(member)
    body, root = _page(client, long)
    events = list(job_events(job=long))
    changes = [event_text(e) for e in events if e.type != "checkpointed"]
    assert len(changes) > 5 * TIMELINE_SHOWN

    shown = _items(_by_testid(root, "timeline"), "li")
    opened = [li for li in shown if ("class", "checkpoints") not in li.attributes]
    assert [_text(li.children[0]) for li in opened] == changes[-TIMELINE_SHOWN:]
    folded_runs = [li for li in shown if ("class", "checkpoints") in li.attributes]
    assert folded_runs and all(
        _text(li).startswith(f"{CHECKPOINTS_PER_RUN} checkpoints, last at") for li in folded_runs
    )
    earlier = _by_testid(root, "timeline-earlier")
    assert _is_closed_details(earlier)
    total = len(_items(earlier, "li")) + len(shown)
    assert total == len(changes) + RUNS  # one line per state change, one per run of checkpoints
    assert f"Show all {total} entries ({total - len(shown)} earlier)" in _text(earlier)
    # Nothing is lost by folding: every state change is on the page, oldest first.
    positions = []
    start = 0
    for text in changes:
        start = body.index(text, start)
        positions.append(start)
    assert positions == sorted(positions)


def test_a_long_jobs_checkpoints_and_earlier_placements_are_folded(client, member, long) -> None:
    client.force_login(member)
    _body, root = _page(client, long)
    total = RUNS * CHECKPOINTS_PER_RUN
    assert len(_items(_by_testid(root, "checkpoints"), "li")) == CHECKPOINTS_SHOWN
    folded = _by_testid(root, "checkpoints-earlier")
    assert _is_closed_details(folded) and len(_items(folded, "li")) == total - CHECKPOINTS_SHOWN
    assert f"step {total * 100}" in _text(_by_testid(root, "checkpoints"))  # the latest is the one open
    before = _by_testid(root, "placed-before")
    assert _is_closed_details(before) and len(_items(before, "tbody")[0].children) == RUNS
    assert _is_closed_details(_by_testid(root, "request"))


def test_the_page_leads_with_where_the_job_runs_now(client, member, long, node) -> None:
    client.force_login(member)
    body, root = _page(client, long)
    now = _by_testid(root, "placed-now")
    rows = _items(now, "tr")[1:]
    assert len(rows) == 1 and node.name in _text(rows[0]) and "#1" in _text(rows[0]) and "reserved" in _text(rows[0])
    assert "Where it runs now" in body
    order = [body.index(marker) for marker in ('data-testid="placed-now"', 'id="job-logs"', 'data-testid="timeline"')]
    assert order == sorted(order)


def test_a_short_job_folds_nothing_and_a_pending_one_says_where_it_waits(client, member, team) -> None:
    job = JobFactory(team=team, name="waiting", state="pending", queue_position=4)
    job.events.create(type="submitted", at=job.submitted_at)
    client.force_login(member)
    body, root = _page(client, job)
    assert len(_items(_by_testid(root, "timeline"), "li")) == 1
    assert 'data-testid="timeline-earlier"' not in body and 'data-testid="placed-before"' not in body
    assert "Not placed yet: #4 in the cluster queue" in _text(_by_testid(root, "not-placed"))


def test_an_ended_job_says_where_it_last_ran(client, member, long, node) -> None:
    ended = timezone.now()
    long.allocations.filter(ended_at__isnull=True).update(ended_at=ended, end_reason="completed")
    Job.objects.filter(pk=long.pk).update(state="completed", finished_at=ended)
    client.force_login(member)
    _body, root = _page(client, long)
    said = _text(_by_testid(root, "not-placed"))
    assert "it is completed" in said and f"last ran on {node.name}" in said
    assert len(_by_testid(root, "placed-before").children) > 0


def test_fold_keeps_the_order_and_cuts_at_the_latest() -> None:
    folded = fold([1, 2, 3, 4, 5], shown=2)
    assert (folded.earlier, folded.shown, folded.total) == ([1, 2, 3], [4, 5], 5)
    short = fold([1], shown=2)
    assert (short.earlier, short.shown) == ([], [1])


@pytest.mark.parametrize(
    ("who", "status"),
    [("lead", 200), ("member", 200), ("platform_admin", 200), ("finance_user", 404), ("outsider", 404)],
)
def test_who_may_read_a_long_jobs_page(client, request, long, who: str, status: int) -> None:
    client.force_login(request.getfixturevalue(who))
    assert client.get(reverse("jobs:detail", args=[long.pk])).status_code == status
