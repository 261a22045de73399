"""A move keeps its promise (jobs.services.ranks, job_move, the manage page's ↑ and ↓): moving a job changes its
place against one neighbour only, and work submitted later still queues behind every job already ordered — in
the portal's order and in the engine's positions alike."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import transaction
from django.urls import reverse
from django.utils import timezone
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.errors import JobPermissionDenied, JobStateError
from jobs.models import Job, JobEvent
from jobs.selectors.jobs import resuming_jobs
from jobs.services import job_list_reorder, job_move, job_submit, team_order_key
from jobs.services.positions import positions_lock, positions_refresh
from jobs.services.ranks import Entry, move
from tests.factories import JobFactory
from tests.portal.fleet import fleet

T0 = datetime(2025, 11, 3, 9, 0, tzinfo=UTC)


def _sorted(entries: list[Entry], ranks: dict[int, int]) -> list[int]:
    return [e.pk for e in sorted(entries, key=lambda e: (ranks[e.pk], e.submitted_at, str(e.pk)))]


@settings(max_examples=300, deadline=None)
@given(
    ranks=st.lists(st.integers(min_value=-3, max_value=0), min_size=1, max_size=7),
    moves=st.lists(st.tuples(st.integers(min_value=0, max_value=6), st.booleans()), max_size=12),
)
def test_a_move_swaps_one_pair_and_never_puts_later_work_ahead(ranks: list[int], moves: list[tuple[int, bool]]) -> None:
    entries = [Entry(pk=i + 1, rank=r, submitted_at=T0 + timedelta(minutes=i)) for i, r in enumerate(ranks)]
    current = {e.pk: e.rank for e in entries}
    for index, up in moves:
        order = _sorted(entries, current)
        pk = order[index % len(order)]
        class_now = [Entry(pk=p, rank=current[p], submitted_at=entries[p - 1].submitted_at) for p in order]
        written = move(class_now, pk, up=up)
        current.update(written)
        expected = list(order)
        i = expected.index(pk)
        j = i - 1 if up else i + 1
        if 0 <= j < len(expected):
            expected[i], expected[j] = expected[j], expected[i]
        else:
            assert written == {}
        assert _sorted(entries, current) == expected  # exactly one pair swapped, everyone else in place
        assert max(current.values()) <= 0  # never a positive rank: a job submitted later comes last
        later = Entry(pk=99, rank=0, submitted_at=T0 + timedelta(days=1))
        assert _sorted([*entries, later], {**current, 99: 0})[-1] == 99


def test_a_move_with_room_writes_the_moved_jobs_rank_only() -> None:
    a, b = (Entry(pk=i, rank=-1, submitted_at=T0 + timedelta(minutes=i)) for i in (1, 2))
    c, d = (Entry(pk=i, rank=0, submitted_at=T0 + timedelta(minutes=i)) for i in (3, 4))
    assert move([a, b, c, d], 4, up=True) == {4: -1}  # between b and c by its own rank alone


def test_the_first_move_of_an_unordered_queue_lowers_the_jobs_ahead_each_in_place() -> None:
    a, b, c = (Entry(pk=i, rank=0, submitted_at=T0 + timedelta(minutes=i)) for i in (1, 2, 3))
    assert move([a, b, c], 3, up=True) == {1: -1, 3: -1}  # a stays first; c passes b; b keeps rank 0
    assert move([a, b, c], 1, up=True) == {}  # nothing ahead of the first


@pytest.mark.django_db
def test_after_moving_b_above_a_a_job_submitted_later_queues_behind_both(client, lead, team) -> None:
    """The issue's reproduction: before, the move wrote ranks 0, 1, 2 and every later job (rank 0) ran first."""
    fleet()
    now = timezone.now()
    a, b, c = (
        JobFactory(team=team, name=n, state="pending", submitted_by=lead, submitted_at=now - timedelta(minutes=10 - i))
        for i, n in enumerate("abc")
    )
    client.force_login(lead)
    response = client.post(reverse("jobs:manage", args=[team.slug]), {"action": f"up:{b.pk}"}, follow=True)
    assert "Moved b up to #1 in the team&#x27;s order" in response.content.decode()
    assert max(Job.objects.values_list("rank", flat=True)) <= 0
    job_submit(team=team, spec={"name": "d", "gpus": 1}, actor=lead)
    job_submit(team=team, spec={"name": "e", "gpus": 1, "priority": "low"}, actor=lead)
    with transaction.atomic():
        positions_lock()
        positions_refresh(now=timezone.now().timestamp())
    pending = list(Job.objects.filter(team=team, state="pending"))
    portal = [j.name for j in sorted(pending, key=lambda j: team_order_key(j, resuming_jobs(p.pk for p in pending)))]
    assert portal == ["b", "a", "c", "d", "e"]
    # The engine's positions (scheduler.core.queue_order) agree with the manage page's order.
    engine = [j.name for j in sorted(pending, key=lambda j: j.team_queue_position or 0)]
    assert engine == portal
    assert {j.name: j.team_queue_position for j in pending} == {"b": 1, "a": 2, "c": 3, "d": 4, "e": 5}
    assert (a.rank, c.rank) == (0, 0)  # the rows as created: the move wrote the ranks of a and b only


@pytest.mark.django_db
def test_a_move_records_an_event_for_each_rank_it_writes_and_changes_no_other_place(lead, team) -> None:
    now = timezone.now()
    jobs = [
        JobFactory(team=team, name=n, state="pending", submitted_at=now - timedelta(minutes=10 - i))
        for i, n in enumerate("abcd")
    ]
    job_list_reorder(team=team, order=[jobs[i].pk for i in (3, 0, 1, 2)], actor=lead)  # d, a, b, c
    JobEvent.objects.all().delete()
    changed = job_move(job=jobs[1], up=False, actor=lead, now=now)  # b passes c
    names = [j.name for j in sorted(Job.objects.filter(team=team), key=team_order_key)]
    assert names == ["d", "a", "c", "b"]
    assert {j.name for j in changed} == set(JobEvent.objects.values_list("job__name", flat=True))
    assert set(JobEvent.objects.values_list("type", "actor")) == {("rank_changed", lead.pk)}


@pytest.mark.django_db
def test_a_move_past_another_priority_changes_nothing(lead, team) -> None:
    high = JobFactory(team=team, state="pending", priority="high")
    normal = JobFactory(team=team, state="pending")
    assert job_move(job=normal, up=True, actor=lead) == []
    assert job_move(job=high, up=False, actor=lead) == []
    assert not JobEvent.objects.exists()


@pytest.mark.django_db
def test_only_managers_move_and_only_pending_jobs(lead, member, outsider, team) -> None:
    a = JobFactory(team=team, state="pending")
    b = JobFactory(team=team, state="pending")
    for user in (member, outsider):
        with pytest.raises(JobPermissionDenied):
            job_move(job=b, up=True, actor=user)
    assert set(Job.objects.values_list("rank", flat=True)) == {0} and not JobEvent.objects.exists()
    Job.objects.filter(pk=a.pk).update(state="cancelled", finished_at=timezone.now())
    with pytest.raises(JobStateError, match="no longer pending"):
        job_move(job=a, up=False, actor=lead)
