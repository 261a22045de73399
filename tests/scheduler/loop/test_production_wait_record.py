"""A scheduling cycle records what production waited for although it preempts lower work (billing.ProductionWait):
one row per GPU class and cause (the team for a burst limit), none when production does not wait, none for work
below production."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from billing.models import ProductionWait
from jobs.models import Job
from jobs.services import job_submit
from scheduler.loop.cycle import cycle_run
from teams.models import Quota
from tests.scheduler.loop_helpers import fleet, fleet_seed, team_seed

pytestmark = pytest.mark.django_db


@pytest.fixture
def team(db):
    fleet_seed()  # A100s only: 8 whole reserved, 2 MIG-split on-demand, 4 PCIe on spot (production never runs there)
    team = team_seed(guaranteed=8, burst=40)
    team.max_priority, team.production_kinds = "production", ["inference", "training"]
    team.save()
    return team


def _production(team, gpus: int, name: str = "serve"):
    spec = {"name": name, "kind": "inference", "gpus": gpus, "priority": "production", "gpu_model": "A100"}
    return job_submit(team=team, spec=spec, actor=None)


def test_production_the_fleet_cannot_hold_is_recorded_as_held_on_its_class(team, clock, settings) -> None:
    settings.SCHEDULER = {**settings.SCHEDULER, "cycle_s": 10}
    gateway = fleet(clock)
    _production(team, 8, name="fits")  # fills the 8 whole reserved A100s
    cycle_run(gateway=gateway)
    assert not ProductionWait.objects.exists()  # nothing waited

    waiting = [_production(team, 8, name="too-big"), _production(team, 2, name="also")]
    clock.advance(10)
    cycle_run(gateway=gateway)

    rows = ProductionWait.objects.values_list(
        "gpu_class", "cause", "team", "gpu_units", "short_units", "jobs", "seconds"
    )
    # The 2-GPU job is given room: production's whole-GPU drain turns MIG off on the on-demand box's split GPU
    # (docs/scheduling-rules.md §5), and a wait for a reconfiguration under way is not counted. The 8-GPU job
    # alone is the row: production holds 8 and wants 8 more of the 10 A100s it may use, 2 of them now coming to
    # the other job (the spot PCIe server is no place for production): it is 6 GPUs short.
    assert list(rows) == [("A100", "held", None, 8 * 7000, 6 * 7000, 1, 10.0)]
    assert {job.state for job in Job.objects.filter(pk__in=[j.pk for j in waiting])} == {"pending"}


def test_production_that_waits_while_its_class_has_room_is_recorded_with_nothing_short(team, clock) -> None:
    """The MIG-split GPU of the on-demand box is not turned whole for a 2-GPU job: the engine says capacity, but
    the class has room (8 held + 2 waiting of 10), so buying GPUs would not have helped."""
    gateway = fleet(clock)
    _production(team, 8, name="fits")
    _production(team, 2, name="split")

    cycle_run(gateway=gateway)

    row = ProductionWait.objects.get()
    assert (row.cause, row.gpus, row.short_gpus) == ("held", 2.0, 0.0)


def test_a_burst_limit_that_refuses_production_is_recorded_with_its_team(team, clock) -> None:
    Quota.objects.filter(team=team).update(guaranteed_gpus=Decimal(2), burst_gpus=Decimal(2))
    gateway = fleet(clock)
    _production(team, 4)  # room on the fleet, above the team's burst limit of 2

    cycle_run(gateway=gateway)

    row = ProductionWait.objects.get()
    assert (row.gpu_class, row.cause, row.team, row.gpus, row.jobs) == ("A100", "burst", team, 4.0, 1)
    assert (row.scope, row.need_gpus, row.short_units) == ("any", 4.0, 0)  # its overall limit of 2 refused it


def test_the_class_limit_is_named_when_it_is_the_one_exceeded(team, clock) -> None:
    Quota.objects.create(team=team, gpu_class="A100", guaranteed_gpus=Decimal(2), burst_gpus=Decimal(3))
    gateway = fleet(clock)
    _production(team, 2, name="runs")  # within 3 on A100
    cycle_run(gateway=gateway)
    _production(team, 2, name="refused")  # 2 held + 2 = 4 > 3 on A100 (and within 40 overall)

    clock.advance(10)
    cycle_run(gateway=gateway)

    row = ProductionWait.objects.get()
    assert (row.cause, row.scope, row.gpus, row.need_gpus) == ("burst", "A100", 2.0, 4.0)


def test_work_below_production_that_waits_is_not_counted(team, clock) -> None:
    gateway = fleet(clock)
    job_submit(team=team, spec={"kind": "training", "gpus": 8, "gpu_model": "A100"}, actor=None)
    job_submit(team=team, spec={"kind": "training", "gpus": 8, "gpu_model": "A100"}, actor=None)

    cycle_run(gateway=gateway)

    assert not ProductionWait.objects.exists()


def test_a_cycle_that_records_deletes_what_the_advisor_no_longer_reads(team, clock) -> None:
    old = ProductionWait.objects.create(
        at=clock.now - timedelta(days=367), gpu_class="A100", cause="held", gpu_units=7000, jobs=1, seconds=10
    )
    kept = ProductionWait.objects.create(
        at=clock.now - timedelta(days=365), gpu_class="A100", cause="held", gpu_units=7000, jobs=1, seconds=10
    )
    gateway = fleet(clock)
    cycle_run(gateway=gateway)  # nothing waits: nothing is written, nothing deleted
    assert ProductionWait.objects.count() == 2
    _production(team, 8, name="fits")
    _production(team, 8, name="waits")

    cycle_run(gateway=gateway)

    assert not ProductionWait.objects.filter(pk=old.pk).exists() and ProductionWait.objects.filter(pk=kept.pk).exists()
