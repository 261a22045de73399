"""Checkpoints reported by the cluster feed the ledger's lost-work rule, end to end on the simulated fleet:
the cycle's reconciliation records a ``checkpointed`` event when a job's reported checkpoint advances, and a
spot interruption then costs only the work since that checkpoint (docs/billing.md, Lost work)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from billing.models import LostWork
from billing.services import ledger_close_due
from jobs.models import JobEvent
from jobs.services import job_submit
from scheduler.loop.cycle import cycle_run
from scheduler.models import Node, SimulatedNodeState
from tests.scheduler.loop_helpers import Clock, fleet, fleet_seed, team_seed

pytestmark = pytest.mark.django_db

SPOT = {"gpus": 2, "tier": "spot-ok", "gpu_model": "A100-PCIE-40GB", "duration_s": 60_000}


def _reclaim(node: str, *, notice_at, gone_in_s: float) -> None:
    SimulatedNodeState.objects.update_or_create(
        node=Node.objects.get(name=node),
        defaults={
            "notice_at": notice_at,
            "gone_at": notice_at + timedelta(seconds=gone_in_s),
            "back_at": notice_at + timedelta(hours=1),
        },
    )


def test_an_interrupted_checkpointed_job_loses_only_the_work_since_its_checkpoint() -> None:
    fleet_seed()
    team = team_seed()
    clock = Clock()
    gateway = fleet(clock)  # 60 virtual seconds per real second
    saved = job_submit(team=team, spec={**SPOT, "checkpoint_interval_s": 600}, actor=None, now=clock.now)
    unsaved = job_submit(team=team, spec=SPOT, actor=None, now=clock.now)
    bound_at = clock.now
    cycle_run(gateway=gateway)
    assert set(JobEvent.objects.filter(type="bound").values_list("job_id", flat=True)) == {saved.pk, unsaved.pk}

    clock.advance(25)  # 1500 virtual seconds: checkpoints at 600 and 1200, i.e. 10 s and 20 s after binding
    report = cycle_run(gateway=gateway)
    cycle_run(gateway=gateway)  # the same checkpoint again: nothing new

    assert report.repairs["checkpointed"] == [str(saved.pk)]
    checkpoints = list(JobEvent.objects.filter(type="checkpointed").values_list("job_id", "at"))
    assert checkpoints == [(saved.pk, bound_at + timedelta(seconds=20))]

    _reclaim("pcie-spot-1", notice_at=clock.now, gone_in_s=2)  # gone 27 s after binding
    clock.advance(10)  # by now a still-running job would have saved again at 30 s: this one did not
    report = cycle_run(gateway=gateway)

    assert sorted(report.repairs["lost"]) == sorted([str(saved.pk), str(unsaved.pk)])
    assert JobEvent.objects.filter(type="checkpointed").count() == 1
    ledger_close_due(now=clock.now + timedelta(hours=1))
    lost: dict[int, list[LostWork]] = {}
    for row in LostWork.objects.order_by("pk"):
        lost.setdefault(row.job_id, []).append(row)
    assert {job: len(rows) for job, rows in lost.items()} == {saved.pk: 2, unsaved.pk: 2}  # one per GPU held
    ended_at = bound_at + timedelta(seconds=35)
    for row in lost[saved.pk]:
        assert (row.preempted_at, row.reason) == (ended_at, "node-lost")
        assert row.last_checkpoint_at == bound_at + timedelta(seconds=20)
        assert row.lost_s == Decimal(15)  # since the checkpoint, not since the start
        assert row.gpu_hours == pytest.approx(Decimal(15) / 3600, abs=Decimal("0.000001"))
    for row in lost[unsaved.pk]:
        assert row.last_checkpoint_at is None and row.lost_s == Decimal(35)


def test_a_checkpoint_is_recorded_once_per_time_and_only_when_it_advances() -> None:
    fleet_seed()
    team = team_seed()
    clock = Clock()
    gateway = fleet(clock)
    job = job_submit(team=team, spec={**SPOT, "checkpoint_interval_s": 600}, actor=None, now=clock.now)
    start = clock.now
    cycle_run(gateway=gateway)

    seen = []
    for _ in range(6):  # every 5 s: a checkpoint every 10 s of real time
        clock.advance(5)
        cycle_run(gateway=gateway)
        seen.append(JobEvent.objects.filter(job=job, type="checkpointed").count())

    assert seen == [0, 1, 1, 2, 2, 3]
    times = list(JobEvent.objects.filter(job=job, type="checkpointed").values_list("at", flat=True))
    assert times == [start + timedelta(seconds=s) for s in (10, 20, 30)]
