"""The scheduling loop's log lines as JSON (LOG_FORMAT=json): every line parses, with the cycle and, for each
decision, its job, team and node as fields; the same records as plain readable lines."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from jobs.services import job_submit
from portal.log_formats import PLAIN_FORMAT, JsonLines
from scheduler.loop.apply import Retry
from scheduler.loop.cycle import cycle_run
from tests.scheduler.loop_helpers import Clock, fleet, fleet_seed, team_seed

pytestmark = pytest.mark.django_db

NO_WAIT = Retry(attempts=3, backoff_s=0.0, sleep=lambda _s: None)


def _capture(formatter: logging.Formatter) -> Iterator[io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    logger = logging.getLogger("scheduler")
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield stream
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


@pytest.fixture
def json_lines() -> Iterator[io.StringIO]:
    yield from _capture(JsonLines())


@pytest.fixture
def plain_lines() -> Iterator[io.StringIO]:
    yield from _capture(logging.Formatter(PLAIN_FORMAT))


def _cycle_with_binds_and_waiting(token: int) -> list[int]:
    clock = Clock()
    fleet_seed()
    nlp, cv = team_seed("nlp"), team_seed("cv")
    placed = [
        job_submit(team=nlp, spec={"kind": "training", "gpus": 4, "duration_s": 600}, actor=None, now=clock.now).pk,
        job_submit(team=cv, spec={"kind": "training", "gpus": 2, "duration_s": 600}, actor=None, now=clock.now).pk,
    ]
    # More whole GPUs than the fleet has free after the two above: it waits.
    job_submit(team=cv, spec={"kind": "training", "gpus": 8, "duration_s": 600}, actor=None, now=clock.now)
    cycle_run(gateway=fleet(clock), fence_token=token, retry=NO_WAIT)
    return placed


def test_every_cycle_line_is_json_with_the_cycle_and_each_decision_its_job_team_and_node(json_lines):
    placed = _cycle_with_binds_and_waiting(token=1234)
    lines = [line for line in json_lines.getvalue().splitlines() if line]
    records = [json.loads(line) for line in lines]  # every line parses
    cycle_records = [r for r in records if r["logger"] == "scheduler.loop.cycle"]
    assert cycle_records, lines
    for record in records:
        assert {"time", "level", "logger", "message"} <= record.keys()
    for record in cycle_records:
        assert record["cycle"] == 1234

    summary = next(r for r in cycle_records if "waiting" in r)
    assert summary["level"] == "INFO"
    assert summary["binds"] == 2 and summary["waiting"] == 1 and summary["evictions"] == 0
    assert summary["message"].startswith("cycle 1234: 2 binds, 0 evictions")

    per_kind = [r for r in cycle_records if r.get("kind") == "bind" and "jobs" in r]
    assert len(per_kind) == 1  # one line for the kind
    assert sorted(per_kind[0]["jobs"]) == sorted(str(pk) for pk in placed)
    assert per_kind[0]["teams"] == ["cv", "nlp"]

    per_bind = {r["job"]: r for r in cycle_records if r["level"] == "DEBUG" and r.get("kind") == "bind"}
    assert sorted(per_bind) == sorted(str(pk) for pk in placed)
    assert per_bind[str(placed[0])]["team"] == "nlp" and per_bind[str(placed[1])]["team"] == "cv"
    assert all(r["node"] for r in per_bind.values())


def test_the_same_lines_read_as_plain_text(plain_lines):
    placed = _cycle_with_binds_and_waiting(token=7)
    text = plain_lines.getvalue()
    assert (
        "INFO scheduler.loop.cycle: cycle 7: 2 binds, 0 evictions, 0 reconfigurations, 0 rejections, 0 moves, 1 waiting"
        in (text)
    )
    assert f"job {placed[0]} (nlp) on a100-res-1: 4 GPUs" in text
    assert not any(line.startswith("{") for line in text.splitlines())
