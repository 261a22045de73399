"""A replica's log on the simulated fleet: its lifecycle lines as the fleet and the job's record hold them (bound
with its devices, checkpoints saved, asked to stop, stopped), never training output the fleet did not produce."""

from __future__ import annotations

import re

import pytest

from jobs.models import Allocation, JobEvent
from jobs.services import job_submit
from scheduler.gateways.protocol import LogSource
from scheduler.loop.apply import Retry
from scheduler.loop.cycle import cycle_run
from tests.scheduler.loop_helpers import fleet

pytestmark = pytest.mark.django_db

NO_WAIT = Retry(attempts=3, backoff_s=0.0, sleep=lambda _s: None)
STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"
# Every line the fleet may produce: what happened to the replica, nothing else.
LIFECYCLE = re.compile(
    rf"^{STAMP} (bound to node \S+ \(.+\): .+|checkpoint saved.*|stopped on node \S+: .+|asked to stop.*)$"
)


def _lines(text: str) -> list[str]:
    lines = text.splitlines()
    assert all(LIFECYCLE.match(line) for line in lines), lines
    return lines


def _read(gateway, job, replica=0, tail=200, **kw):
    return gateway.job_logs(job=str(job.pk), namespace=job.team.namespace, replica=replica, tail_lines=tail, **kw)


def test_a_checkpointed_job_logs_its_binding_its_saves_and_its_end(team, clock):
    gateway = fleet(clock)
    job = job_submit(
        team=team,
        spec={"kind": "training", "gpus": 2, "duration_s": 1500, "checkpoint_interval_s": 600},
        actor=None,
        now=clock.now,
    )
    assert _read(gateway, job).text == ""  # pending: nothing happened to it yet
    assert "not been bound" in _read(gateway, job).note

    cycle_run(gateway=gateway, retry=NO_WAIT)
    allocations = list(Allocation.objects.filter(job=job).order_by("gpu_index"))
    node = allocations[0].node.name
    running = _lines(_read(gateway, job).text)
    devices = ", ".join(f"GPU {a.gpu_index}" for a in allocations)
    assert running[0].endswith(
        f"bound to node {node} ({allocations[0].node.gpu_model.name}, {allocations[0].tier}): {devices}"
    )

    clock.advance(13)  # 780 virtual seconds: one periodic save at 600
    cycle_run(gateway=gateway, retry=NO_WAIT)
    clock.advance(13)  # past its 1500 s of work
    cycle_run(gateway=gateway, retry=NO_WAIT)
    job.refresh_from_db()
    assert job.state == "completed"

    log = _read(gateway, job)
    lines = _lines(log.text)
    saves = JobEvent.objects.filter(job=job, type="checkpointed").count()
    assert saves >= 1 and sum("checkpoint saved" in line for line in lines) == saves
    assert lines[-1].endswith(f"stopped on node {node}: completed")
    assert (log.source, log.truncated) == (LogSource.SIMULATED, False)
    assert _read(gateway, job, replica=1).text == ""  # a replica the job never had


def test_the_tail_and_the_byte_limit_bound_what_is_read(team, clock):
    gateway = fleet(clock)
    job = job_submit(team=team, spec={"kind": "training", "gpus": 1, "duration_s": 600}, actor=None, now=clock.now)
    cycle_run(gateway=gateway, retry=NO_WAIT)
    clock.advance(20)
    cycle_run(gateway=gateway, retry=NO_WAIT)
    full = _lines(_read(gateway, job).text)
    assert len(full) == 2

    assert _read(gateway, job, tail=1).text == full[-1] + "\n"
    cut = _read(gateway, job, limit_bytes=10)
    assert cut.truncated and cut.text == full[0][:10]


def test_a_stopping_replica_says_it_was_asked_to_stop(team, clock):
    gateway = fleet(clock, checkpoint_cost_s=60.0)
    job = job_submit(
        team=team,
        spec={"kind": "training", "gpus": 1, "duration_s": 100_000, "checkpoint_interval_s": 600, "tier": "spot-ok"},
        actor=None,
        now=clock.now,
    )
    cycle_run(gateway=gateway, retry=NO_WAIT)
    node = Allocation.objects.get(job=job).node.name
    clock.advance(5)
    gateway.notice_give(node=node)
    gateway.job_evict(job=str(job.pk), namespace=job.team.namespace, grace_s=30, reason="spot-reclaim")

    lines = _lines(_read(gateway, job).text)
    assert any(f"asked to stop (SIGTERM) on node {node}" in line for line in lines)
