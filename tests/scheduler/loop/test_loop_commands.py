"""Operator commands of the loop: cluster sync, schedule --once, scheduler run, jobs submit/list; each --json."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from jobs.models import Job, JobEvent
from scheduler.gateways import gateway_override
from scheduler.loop.locks import FileLock
from scheduler.models import Node, SimulatedNodeState, SimulatedPod
from tests.scheduler.loop_helpers import Clock, fleet, fleet_seed, team_seed

pytestmark = pytest.mark.django_db


@pytest.fixture
def loop(settings, tmp_path):
    """The seeded fleet and a team, the file lock (no Redis needed), and a fleet with a test clock."""
    settings.SCHEDULER = {**settings.SCHEDULER, "lock_backend": "file"}
    settings.SCHEDULER_LOCK_FILE = tmp_path / "scheduler.lock"
    fleet_seed()
    team_seed()
    clock = Clock()
    with gateway_override(fleet(clock)):
        yield clock


def _run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


def _spec(tmp_path, data, name="job.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def test_cluster_sync_reports_nodes_and_gpus(loop):
    data = json.loads(_run("cluster", "sync", "--json"))
    assert data["backend"] == "simulated" and data["gone"] == [] and data["skipped"] == []
    nodes = {n["name"]: n for n in data["nodes"]}
    assert nodes["mig-od-1"]["mig"] == {"0": [["1g.10gb", 0], ["1g.10gb", 1], ["2g.20gb", 2], ["3g.40gb", 4]]}
    assert "3 nodes, 14 GPUs" in _run("cluster", "sync")


def test_cluster_sync_marks_an_interrupted_node_gone_and_ready_again(loop):
    SimulatedNodeState.objects.update_or_create(
        node=Node.objects.get(name="pcie-spot-1"),
        defaults={
            "notice_at": loop.now,
            "gone_at": loop.now + timedelta(seconds=2),
            "back_at": loop.now + timedelta(seconds=5),
        },
    )
    _run("cluster", "sync")
    assert Node.objects.get(name="pcie-spot-1").state == "draining"
    loop.advance(3)
    assert json.loads(_run("cluster", "sync", "--json"))["gone"] == ["pcie-spot-1"]
    assert Node.objects.get(name="pcie-spot-1").state == "gone"
    loop.advance(3)
    _run("cluster", "sync")
    assert Node.objects.get(name="pcie-spot-1").state == "ready"


def test_jobs_submit_then_schedule_once_then_list(loop, tmp_path):
    spec = _spec(tmp_path, {"name": "bert", "kind": "training", "gpus": 2, "duration_s": 600})
    submitted = json.loads(_run("jobs", "submit", "--team", "nlp", "--spec", spec, "--json"))
    assert submitted["state"] == "pending" and submitted["request"] == "1 × 2 GPUs"
    report = json.loads(_run("schedule", "--once", "--json"))
    assert [b["job"] for b in report["decisions"]["binds"]] == [str(submitted["id"])]
    listed = json.loads(_run("jobs", "list", "--json", "--state", "running"))
    assert [j["id"] for j in listed] == [submitted["id"]]
    text = _run("jobs", "list", "--team", "nlp")
    assert "bert" in text and "running" in text


def test_schedule_once_in_words(loop, tmp_path):
    _run("jobs", "submit", "--team", "nlp", "--spec", _spec(tmp_path, {"gpus": 1, "duration_s": 60}))
    text = _run("schedule", "--once")
    assert "bind job" in text and "a100-res-1/0" in text


def test_a_bad_spec_prints_every_error_and_writes_nothing(loop, tmp_path):
    spec = _spec(tmp_path, {"gpus": 0, "tier": "cheap"}, name="bad.json")
    err = StringIO()
    with pytest.raises(CommandError, match=r"2 error\(s\) in .*bad.json; nothing was submitted"):
        call_command("jobs", "submit", "--team", "nlp", "--spec", spec, stderr=err, stdout=StringIO())
    assert "bad.json: gpus: must be at least 1 and at most 64, got 0" in err.getvalue()
    assert "bad.json: tier: must be one of" in err.getvalue()
    assert not Job.objects.exists() and not JobEvent.objects.exists()


@pytest.mark.parametrize(
    ("content", "message"),
    [("{not json", ":1:2: invalid JSON: Expecting property name"), (None, ": no such file")],
)
def test_unreadable_specs(loop, tmp_path, content, message):
    path = tmp_path / "x.json"
    if content is not None:
        path.write_text(content)
    err = StringIO()
    with pytest.raises(CommandError, match=r"cannot read .*x\.json; nothing was submitted"):
        call_command("jobs", "submit", "--team", "nlp", "--spec", str(path), stdout=StringIO(), stderr=err)
    assert err.getvalue().startswith(f"{path}{message}"), err.getvalue()


def test_an_unknown_team_is_an_error(loop, tmp_path):
    with pytest.raises(CommandError, match="no team with slug 'ghost'"):
        _run("jobs", "submit", "--team", "ghost", "--spec", _spec(tmp_path, {"gpus": 1}))


def test_schedule_once_refuses_while_another_cycle_holds_the_lock(loop, settings):
    held = FileLock(settings.SCHEDULER_LOCK_FILE)
    token = held.acquire()
    try:
        with pytest.raises(CommandError, match="another scheduling cycle holds the lock"):
            _run("schedule", "--once")
    finally:
        held.release(token)


def test_scheduler_run_loops_and_stops(loop, tmp_path):
    _run("jobs", "submit", "--team", "nlp", "--spec", _spec(tmp_path, {"gpus": 1, "duration_s": 60}))
    lines = _run("scheduler", "run", "--cycles", "2", "--interval-s", "0", "--json").strip().splitlines()
    assert len(lines) == 2
    first, second = (json.loads(line) for line in lines)
    assert len(first["decisions"]["binds"]) == 1 and second["decisions"]["binds"] == []
    assert SimulatedPod.objects.count() == 1
    assert "stopped after 1 cycle(s)" in _run("scheduler", "run", "--cycles", "1", "--interval-s", "0")


def test_cluster_sync_names_the_gpus_that_carry_mig_layouts(loop):
    mig = [line for line in _run("cluster", "sync").splitlines() if "MIG on GPUs" in line]
    assert len(mig) == 1 and mig[0].startswith("  mig-od-1:") and mig[0].endswith(", MIG on GPUs 0)")
