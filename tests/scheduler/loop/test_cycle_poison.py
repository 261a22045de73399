"""One job cannot stop scheduling (RELIABILITY.md): rows written past the submit service — a poison model profile, a
NaN duration, a model that is not even readable — are rejected by the next cycle with a reason, and the other
teams' jobs are placed in that same cycle."""

from __future__ import annotations

import pytest
from django.db.models import F

from jobs.models import Job
from jobs.services import job_submit
from scheduler.loop.cycle import cycle_run
from tests.scheduler.loop.test_cycle_service import NO_WAIT
from tests.scheduler.loop_helpers import Clock, fleet, fleet_seed, team_seed

pytestmark = pytest.mark.django_db


def _row_past_the_services(team, **fields: object) -> Job:
    """A pending job, then its row changed in the database directly (as a bug or a hand-written row would)."""
    job = job_submit(team=team, spec={"kind": "inference", "model": {"params_b": 7}}, actor=None)
    Job.objects.filter(pk=job.pk).update(**fields)
    return job


def test_poison_rows_are_rejected_and_the_rest_is_scheduled_in_the_same_cycle():
    fleet_seed()
    team = team_seed()
    clock = Clock()
    poisons = [
        _row_past_the_services(team, model={"params_b": 1e300}),
        _row_past_the_services(team, model={"params_b": 7, "context": 10**300}),
        _row_past_the_services(team, model={"params_b": "seven"}),  # not a number at all
        _row_past_the_services(team, model={"layers": 32}),  # no params_b
        _row_past_the_services(team, duration_s=F("duration_s")),  # untouched: a sane control, not a poison
    ]
    control = poisons.pop()
    good = job_submit(team=team, spec={"kind": "training", "gpus": 2, "duration_s": 600}, actor=None, now=clock.now)
    report = cycle_run(gateway=fleet(clock), retry=NO_WAIT)
    rejected = {int(r["job"]) for r in report.decisions["rejections"]}
    assert rejected == {p.pk for p in poisons}
    for poison in poisons:
        poison.refresh_from_db()
        assert poison.state == "rejected" and poison.state_reason.startswith("invalid request: ")
    good.refresh_from_db()
    control.refresh_from_db()
    assert good.state == "running"
    assert control.state in ("running", "pending")  # judged as any other job, not rejected with the poisons
