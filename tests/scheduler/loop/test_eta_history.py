"""The start estimates kept for the loop's stats (scheduler.loop.eta_history): read as values, the changed ones
written in one statement whatever their number, each with exactly its own list (SQLite here; PostgreSQL's
``UPDATE … FROM jsonb_array_elements`` with ``DATABASE_URL=postgres://…``)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from jobs.models import Job
from scheduler.loop.eta_history import histories_create, histories_locked, histories_write
from scheduler.loop.stats import _eta_errors
from scheduler.models import EtaHistory
from teams.models import Team
from tests.factories import JobFactory, TeamFactory

pytestmark = pytest.mark.django_db


def _pending(team: Team, count: int) -> list[Job]:
    return [JobFactory(team=team, state="pending") for _ in range(count)]


@pytest.mark.parametrize("count", [1, 250])  # above SQLite's 999 parameters for one statement's worth of rows
def test_changed_histories_are_written_in_one_statement(count: int) -> None:
    jobs = _pending(TeamFactory(), count + 1)
    histories_create([(job.pk, [[100.0, 200.0]]) for job in jobs])
    changed = [(job.pk, [[100.0, 200.0], [110.0, None], [120.0, 250.5 + i]]) for i, job in enumerate(jobs[:count])]
    with CaptureQueriesContext(connection) as queries:
        histories_write(changed)
    assert len(queries) == 1
    stored = dict(EtaHistory.objects.values_list("job_id", "changes"))
    assert stored == {**{job.pk: [[100.0, 200.0]] for job in jobs}, **dict(changed)}
    assert histories_locked() == stored


def test_only_the_estimates_that_changed_are_kept_and_written() -> None:
    team = TeamFactory()
    now = timezone.now().replace(microsecond=0)
    same, moved, new = _pending(team, 3)
    Job.objects.filter(pk__in=[same.pk, moved.pk]).update(eta_at=now + timedelta(hours=1))
    _eta_errors(now.timestamp(), 10.0)  # their first estimates
    Job.objects.filter(pk=moved.pk).update(eta_at=now + timedelta(hours=2))
    with CaptureQueriesContext(connection) as queries:
        assert _eta_errors(now.timestamp() + 10, 10.0) == []
    # A write, or SQLite's executemany of one ("N times: UPDATE …"); not a read that locks ("… FOR UPDATE").
    writes = [q["sql"] for q in queries.captured_queries if re.match(r"(\d+ times: )?(UPDATE|INSERT)", q["sql"])]
    assert len(writes) == 1  # the one history that changed; nothing created, nothing unchanged rewritten
    hour, two = (now + timedelta(hours=1)).timestamp(), (now + timedelta(hours=2)).timestamp()
    assert dict(EtaHistory.objects.values_list("job_id", "changes")) == {
        same.pk: [[now.timestamp(), hour]],
        moved.pk: [[now.timestamp(), hour], [now.timestamp() + 10, two]],
        new.pk: [[now.timestamp(), None]],
    }


def test_a_pass_leaves_the_lists_it_read_as_they_were_stored() -> None:
    """The histories read may be the last read's lists (scheduler.kept_rows): a pass that adds an estimate makes a
    new list, so what the next cycle reads is what is stored."""
    team = TeamFactory()
    now = timezone.now().replace(microsecond=0)
    same, moved = _pending(team, 2)
    Job.objects.filter(pk__in=[same.pk, moved.pk]).update(eta_at=now + timedelta(hours=1))
    _eta_errors(now.timestamp(), 10.0)
    read = histories_locked()
    first = {same.pk: [[now.timestamp(), (now + timedelta(hours=1)).timestamp()]]}
    first[moved.pk] = list(first[same.pk])
    assert read == first
    Job.objects.filter(pk=moved.pk).update(eta_at=now + timedelta(hours=2))
    _eta_errors(now.timestamp() + 10, 10.0)
    assert read == first  # not changed in place
    stored = dict(EtaHistory.objects.values_list("job_id", "changes"))
    assert len(stored[moved.pk]) == 2 and histories_locked() == stored
    assert histories_locked()[same.pk] is histories_locked()[same.pk]  # unchanged: not decoded again
