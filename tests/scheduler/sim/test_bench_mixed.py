"""``bench mixed`` on a short window: the JSON's shape, the table, the claims and the errors a person can act
on. No figures are asserted: benchmarks are never timed or tuned tests."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from scheduler.sim.bench import mixed_cli
from scheduler.sim.bench.registry import BenchUsageError, benchmarks

POLICY_KEYS = {
    "status",
    "effective_utilization",
    "allocation_ratio",
    "queue_wait_s",
    "production_inference_wait_s",
    "completed",
    "training_throughput",
    "plan_repairs",
    "wall_s",
}


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "philly_runtime.csv"
    path.write_text("runtime\n0.0\n120\n900\n3600\n7200\n", encoding="utf-8")
    return path


def bench(*args: str) -> str:
    out = StringIO()
    call_command("bench", "mixed", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_registered_once_under_its_name() -> None:
    assert benchmarks()["mixed"] is mixed_cli


def test_json_has_every_policy_side_by_side(trace: Path) -> None:
    args = ["--hours", "0.25", "--warmup-hours", "0.05", "--seed", "3", "--trace", str(trace)]
    payload = json.loads(bench(*args, "--policies", "naive,k8s-default,binpack,fgd,microcosm", "--json"))
    assert payload["benchmark"] == "mixed" and payload["command"].startswith("python manage.py bench mixed")
    assert "--seed 3" in payload["command"] and payload["command"].endswith("--json")
    assert list(payload["policies"]) == ["naive", "k8s-default", "binpack", "fgd", "microcosm"]
    for name, figures in payload["policies"].items():
        if figures["status"] == "failed":
            assert figures["error"], name
            continue
        assert set(figures) >= POLICY_KEYS, name
        assert 0 <= figures["effective_utilization"] <= figures["allocation_ratio"] + 1e-9 <= 1 + 1e-9
        for stats in figures["queue_wait_s"].values():
            assert {"p50", "p95", "max", "jobs", "still_waiting"} <= set(stats)
    assert payload["window_s"] == [180.0, 180.0 + 900.0]
    assert payload["cluster"]["gpus"] == 64 and payload["workload"]["jobs"] > 0
    assert {c["claim"][:3] for c in payload["claims"]} == {"B2:"}


def test_the_table_names_the_command_and_every_policy(trace: Path) -> None:
    table = bench("--hours", "0.2", "--warmup-hours", "0", "--policies", "naive,fgd", "--trace", str(trace))
    lines = table.splitlines()
    assert lines[0].startswith("Mixed (B2): mixed-64 at load 1.2, seed 42")
    assert lines[1].startswith("command: python manage.py bench mixed")
    assert any(line.startswith("policy") and "naive" in line and "fgd" in line for line in lines)
    assert any(line.startswith("effective utilization") for line in lines)


def test_the_same_seed_gives_the_same_figures(trace: Path) -> None:
    args = ["--hours", "0.2", "--warmup-hours", "0", "--policies", "binpack", "--trace", str(trace), "--json"]
    first, second = json.loads(bench(*args)), json.loads(bench(*args))
    for payload in (first, second):
        payload["policies"]["binpack"].pop("wall_s")
    assert first["policies"] == second["policies"]


def test_report_has_the_utilization_and_wait_charts(trace: Path, tmp_path: Path) -> None:
    outcome = mixed_cli.run(
        {"hours": 0.2, "warmup_hours": 0.0, "policies": ["naive"], "trace": trace, "seed": 1, "load": 1.2}
    )
    titles = [figure.layout.title.text for figure in outcome.figures]
    assert titles == ["Utilization over time (10-minute buckets)", "Queueing delay by priority class (p95)"]
    assert outcome.figures[0].data, "the utilization chart has a line per policy"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"policies": ["naive", "nope"]}, "unknown policies nope; known: microcosm"),
        ({"cluster": "mixed-65"}, "unknown cluster 'mixed-65'; known: mixed-64"),
        ({"trace": Path("/nonexistent/philly_runtime.csv")}, "no such file"),
    ],
)
def test_bad_options_say_what_to_change(options: dict[str, object], message: str, trace: Path) -> None:
    base = {"hours": 0.1, "warmup_hours": 0.0, "trace": trace, "seed": 1, "load": 1.2}
    with pytest.raises(BenchUsageError, match=message):
        mixed_cli.run({**base, **options})


def test_a_malformed_trace_names_the_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("runtime\n12\nabc\n", encoding="utf-8")
    with pytest.raises(CommandError, match=r"bad.csv:3"):
        bench("--trace", str(bad), "--hours", "0.1")


@pytest.mark.parametrize("args", [["--load", "0"], ["--hours", "-1"], ["--warmup-hours", "x"]])
def test_bad_numbers_are_refused_by_the_parser(args: list[str]) -> None:
    with pytest.raises(CommandError):
        bench(*args)


def test_a_planner_that_crashes_is_reported_failed_and_the_others_still_run(
    trace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from scheduler.sim import planners

    def boom(snapshot, policy, now):  # type: ignore[no-untyped-def]
        if now >= 60:
            raise RuntimeError("engine bug")
        return planners.PLANNERS["naive"](snapshot, policy, now)

    monkeypatch.setitem(planners.PLANNERS, "boom", boom)
    outcome = mixed_cli.run(
        {"hours": 0.1, "warmup_hours": 0.0, "policies": ["boom", "naive"], "trace": trace, "seed": 1, "load": 1.2}
    )
    failed = outcome.payload["policies"]["boom"]
    assert failed["status"] == "failed"
    assert failed["error"] == "the planner raised RuntimeError at the cycle t=60: engine bug"
    assert outcome.payload["policies"]["naive"]["status"] == "ok"
    assert "boom FAILED: the planner raised RuntimeError" in outcome.table
