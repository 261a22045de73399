"""The poison job of RELIABILITY.md, and its kin, sent through every way in: the API, the CLI, a scenario and the
right-sizing question refuse it with the key and the bound, and nothing reaches a cycle. Plus the caps on
pending jobs per team and per user."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from jobs.models import Job, JobEvent
from jobs.services import job_submit
from scheduler.sim.scenario import parse_scenario
from scheduler.specs.fields import ScenarioError
from tests.jobs.test_api import api
from tests.scheduler.loop_helpers import fleet_seed

pytestmark = pytest.mark.django_db

POISON = {"team": "nlp", "name": "x", "model": {"params_b": 1e300}}

HOSTILE = [
    # (what is changed, the key the error names, words of the reason)
    ({"model": {"params_b": 1e300}}, "model.params_b", "a positive number, at most 2,000"),
    ({"model": {"params_b": 7, "context": 10**300}}, "model.context", "of ordinary size"),
    ({"model": {"params_b": 7, "batch": 10**300}}, "model.batch", "of ordinary size"),
    ({"model": {"params_b": 7, "context": 20_000_000}}, "model.context", "at most 10,000,000"),
    ({"memory_gib": 1.7e308}, "memory_gib", "at most 1,128"),
    ({"memory_gib": 0.001}, "memory_gib", "at least 0.01"),
    ({"gpus": 1, "duration_s": int("9" * 400)}, "duration_s", "of ordinary size"),
    ({"gpus": 1, "duration_s": 10**9}, "duration_s", "at most 31,536,000"),
    ({"gpus": 1, "checkpoint_interval_s": int("9" * 400)}, "checkpoint_interval_s", "of ordinary size"),
    ({"gpus": 1, "rank": int("9" * 400)}, "rank", "of ordinary size"),
    ({"gpus": 1, "command": ["x" * (65 * 1024)]}, "command", "at most 64 KiB"),
    ({"gpus": 1, "env": {"1BAD": "x"}}, "env", "is not a variable name"),
    ({"gpus": 1, "env": {"A\u0000B": "x"}}, "env", "NUL"),
    ({"gpus": 1, "env": {"OK": "a\u0000b"}}, "env.OK", "NUL"),
    ({"gpus": 1, "env": {f"V{i}": "x" for i in range(300)}}, "env", "at most 256 variables"),
    ({"gpus": 1, "env": {"BIG": "x" * 33_000}}, "env", "at most 32 KiB"),
    ({"gpus": 1, "name": "n\u0000ame"}, "name", "NUL"),
    ({"gpus": 1, "image": "i" * 501}, "image", "at most 500 characters"),
    ({"gpus": 1, "prioritty": "high"}, "prioritty", "unknown key; allowed here: id, team, project"),
]


def _spec(change: dict[str, object]) -> dict[str, object]:
    return {"team": "nlp", "name": "x", "kind": "inference", **change}


@pytest.mark.parametrize(("change", "key", "words"), HOSTILE, ids=[c[1] + ":" + c[2][:20] for c in HOSTILE])
def test_the_api_refuses_with_one_entry_per_field_and_writes_nothing(lead, change, key, words) -> None:
    response = api(lead).post("/api/v1/jobs/", _spec(change), format="json")
    assert response.status_code == 400, response.content[:300]
    body = response.json()
    assert key in body and any(words in reason for reason in body[key]), body
    assert not Job.objects.exists() and not JobEvent.objects.exists()


def test_the_poison_job_of_the_issue_is_a_400_for_a_plain_member(member) -> None:
    response = api(member).post("/api/v1/jobs/", POISON, format="json")
    assert response.status_code == 400
    assert response.json() == {"model.params_b": ["must be a positive number, at most 2,000, got 1e+300"]}
    assert not Job.objects.exists()


def test_the_api_wants_a_json_object(lead) -> None:
    client = api(lead)
    listed = client.post("/api/v1/jobs/", [POISON], format="json")
    assert listed.status_code == 400 and "one JSON object" in listed.json()["non_field_errors"][0]
    form = client.post("/api/v1/jobs/", {"team": "nlp", "gpus": "1"})  # multipart: not a job spec's types
    assert form.status_code == 400 and "Content-Type: application/json" in form.json()["non_field_errors"][0]
    no_team = client.post("/api/v1/jobs/", {"gpus": 1}, format="json")
    assert no_team.status_code == 400 and "team" in no_team.json()


def test_the_cli_refuses_the_poison_with_the_file_and_the_key(team, tmp_path) -> None:
    path = tmp_path / "poison.json"
    path.write_text(json.dumps({k: v for k, v in POISON.items() if k != "team"}))
    err = StringIO()
    with pytest.raises(CommandError, match="nothing was submitted"):
        call_command("jobs", "submit", "--team", "nlp", "--spec", str(path), stderr=err, stdout=StringIO())
    assert f"{path}: model.params_b: must be a positive number, at most 2,000, got 1e+300" in err.getvalue()
    assert not Job.objects.exists()


def test_a_scenario_refuses_the_poison_before_it_runs() -> None:
    scenario = {
        "cluster": [{"name": "n1", "gpu_model": "H100-SXM5-80GB", "gpus": 8}],
        "teams": [{"name": "nlp", "guaranteed": 8}],
        "events": [{"t": 0, "submit": {"id": "p", "team": "nlp", "kind": "inference", "model": {"params_b": 1e300}}}],
        "until": 60,
    }
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(scenario, source="poison.json")
    assert "poison.json: events[0].submit.model.params_b: must be a positive number, at most 2,000" in str(caught.value)


def test_right_sizing_refuses_the_poison_and_unknown_keys(lead) -> None:
    fleet_seed()
    client = api(lead)
    poison = client.post("/api/v1/rightsize/", {"kind": "inference", "memory_gib": 1.7e308}, format="json")
    assert poison.status_code == 400 and "at most 1,128" in poison.json()["memory_gib"][0]
    unknown = client.post("/api/v1/rightsize/", {"gpus": 1, "gpuz": 2}, format="json")
    assert unknown.status_code == 400 and "unknown key" in unknown.json()["gpuz"][0]
    fine = client.post("/api/v1/rightsize/", {"kind": "inference", "model": {"params_b": 7}}, format="json")
    assert fine.status_code == 200 and fine.json()["best"] is not None


def test_the_pending_caps_per_team_and_per_user(settings, team, lead, member) -> None:
    settings.JOBS = {"pending_limit_team": 3, "pending_limit_user": 2}
    spec = {"gpus": 1}
    for _ in range(2):
        job_submit(team=team, spec=spec, actor=member)
    third = api(member).post("/api/v1/jobs/", {**spec, "team": "nlp"}, format="json")
    assert third.status_code == 409
    assert "you already have 2 pending jobs, the limit per user" in third.json()["detail"]
    assert api(lead).post("/api/v1/jobs/", {**spec, "team": "nlp"}, format="json").status_code == 201
    fourth = api(lead).post("/api/v1/jobs/", {**spec, "team": "nlp"}, format="json")
    assert fourth.status_code == 409 and "team nlp already has 3 pending jobs" in fourth.json()["detail"]
    Job.objects.filter(submitted_by=member).update(state="running", started_at=timezone.now())  # not counted now
    assert api(member).post("/api/v1/jobs/", {**spec, "team": "nlp"}, format="json").status_code == 201
    assert Job.objects.filter(state="pending").count() == 2


def test_a_job_the_engine_could_never_run_is_refused_at_submit_with_its_reason(team, lead) -> None:
    fleet_seed()  # an 8-GPU A100 box, a 4-GPU PCIe server, a MIG box: no 16 GPUs in one node
    response = api(lead).post("/api/v1/jobs/", {"team": "nlp", "gpus": 16}, format="json")
    assert response.status_code == 400
    reason = response.json()["non_field_errors"][0]
    assert reason.startswith("this job could never run on this cluster: no node in the cluster can hold one replica")
    gang = api(lead).post("/api/v1/jobs/", {"team": "nlp", "gpus": 8, "replicas": 40}, format="json")
    assert gang.status_code == 400 and "the cluster can hold at most" in gang.json()["non_field_errors"][0]
    assert not Job.objects.exists()
    assert api(lead).post("/api/v1/jobs/", {"team": "nlp", "gpus": 8}, format="json").status_code == 201


def test_an_empty_inventory_judges_nothing_yet(team, lead) -> None:
    assert api(lead).post("/api/v1/jobs/", {"team": "nlp", "gpus": 16}, format="json").status_code == 201
