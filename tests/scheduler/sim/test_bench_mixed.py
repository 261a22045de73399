"""``bench mixed`` on a short window: the JSON's shape, the table, the claims and the errors a person can act
on. No figures are asserted: benchmarks are never timed or tuned tests."""

from __future__ import annotations

import argparse
import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from scheduler.core.model.policy import Policy
from scheduler.sim.bench import mixed_cli
from scheduler.sim.bench.mixed_matrix import Setup
from scheduler.sim.bench.registry import BenchUsageError, benchmarks
from scheduler.sim.bench.seeds import parse_seeds
from tests.untraced import untraced

POLICY_KEYS = {
    "status",
    "effective_utilization",
    "allocation_ratio",
    "idle_while_pending",
    "queue_wait_s",
    "production_inference_wait_s",
    "production_avoidable_wait_s",
    "production_unavoidable_wait_s",
    "completed",
    "training_throughput",
    "evictions_by_cause",
    "evictions_per_8h",
    "moves_per_8h",
    "eta_error",
    "plan_repairs",
    "wall_s",
}
MEDIAN_KEYS = {
    "effective_utilization",
    "idle_while_pending",
    "evictions_per_8h",
    "evictions.priority",
    "production_inference_wait_s.p95",
    "production_avoidable_wait_s.p95",
    "production_avoidable_wait_s.max",
    "queue_wait_s.production.max",
    "eta_error.p50",
    "eta_error.p90",
}
FAST = ("--jobs", "1")


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "philly_runtime.csv"
    path.write_text("runtime\n0.0\n120\n900\n3600\n7200\n", encoding="utf-8")
    return path


def bench(*args: str) -> str:
    out = StringIO()
    call_command("bench", "mixed", *FAST, *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_registered_once_under_its_name() -> None:
    assert benchmarks()["mixed"] is mixed_cli


@untraced
def test_json_has_every_policy_side_by_side_per_mix_and_seed(trace: Path) -> None:
    args = ["--hours", "0.25", "--warmup-hours", "0.05", "--seeds", "3-4", "--trace", str(trace)]
    payload = json.loads(bench(*args, "--policies", "naive,k8s-default,binpack,fgd,microcosm", "--json"))
    assert payload["benchmark"] == "mixed" and payload["command"].startswith("python manage.py bench mixed")
    assert "--mix balanced,serving --seeds 3-4" in payload["command"] and payload["command"].endswith("--json")
    assert payload["seeds"] == [3, 4] and payload["loads"] == [1.2]
    mixes = payload["by_load"]["1.2"]["mixes"]
    assert list(mixes) == ["balanced", "serving"]
    for mix, entry in mixes.items():
        assert entry["inference_share"] == {"balanced": 0.4, "serving": 0.8}[mix]
        assert list(entry["workloads"]) == ["3", "4"] and all(w["jobs"] > 0 for w in entry["workloads"].values())
        assert list(entry["policies"]) == ["naive", "k8s-default", "binpack", "fgd", "microcosm"]
        for name, summary in entry["policies"].items():
            assert summary["status"] == "ok", (mix, name, summary.get("errors"))
            assert set(summary["median"]) >= MEDIAN_KEYS
            for figure in summary["median"].values():
                assert set(figure) == {"median", "min", "max", "worst", "worst_seed"}
                if figure["median"] is not None:
                    assert figure["min"] <= figure["median"] <= figure["max"]
                    assert figure["worst"] in (figure["min"], figure["max"]) and figure["worst_seed"] in (3, 4)
            for seed, figures in summary["seeds"].items():
                assert set(figures) >= POLICY_KEYS, (mix, name, seed)
                assert 0 <= figures["effective_utilization"] <= figures["allocation_ratio"] + 1e-9 <= 1 + 1e-9
                assert 0 <= figures["idle_while_pending"] <= 1
    assert payload["window_s"] == [180.0, 180.0 + 900.0]
    assert payload["cluster"]["gpus"] == 64
    assert {c["claim"][:3] for c in payload["claims"]} == {"B2 "}
    claims = [c["claim"] for c in payload["claims"]]
    assert any("serving" in c and "2× naive" in c for c in claims)
    assert any("balanced" in c and "evictions per 8 h" in c for c in claims)
    assert sum("idle_while_pending ≤ 5 %" in c for c in claims) == 2


def test_one_mix_and_the_table_names_the_command_and_every_policy(trace: Path) -> None:
    table = bench(
        "--hours", "0.2", "--warmup-hours", "0", "--policies", "naive,fgd", "--mix", "serving", "--seeds", "42",
        "--trace", str(trace),
    )  # fmt: skip
    lines = table.splitlines()
    assert lines[0].startswith("Mixed (B2): mixed-64 at load 1.2, mixes serving, seeds 42")
    assert lines[1].startswith("command: python manage.py bench mixed --mix serving --seeds 42")
    assert any(line.startswith("serving") and "naive" in line and "fgd" in line for line in lines)
    assert not any(line.startswith("balanced") for line in lines)
    for row in ("effective utilization", "idle while pending", "  by priority", "eta_error p90", "low wait max"):
        assert any(line.startswith(row) for line in lines), row


def test_the_preemption_search_bound_reaches_the_policy_and_the_command(trace: Path) -> None:
    setup = Setup(cluster="mixed-64", load=1.2, hours=0.1, warmup_s=0.0, runtimes=(60.0,), preemption_search_per_team=5)
    assert setup.config("balanced", 1).policy.preemption_search_per_team == 5
    assert (
        Setup(cluster="mixed-64", load=1.2, hours=0.1, warmup_s=0.0, runtimes=(60.0,)).config("balanced", 1).policy
        == Policy()
    )  # the policy's default bound: the policy every other run plans with
    table = bench(
        "--hours", "0.1", "--warmup-hours", "0", "--policies", "microcosm", "--mix", "serving", "--seeds", "42",
        "--trace", str(trace), "--preemption-search-per-team", "5",
    )  # fmt: skip
    assert "--policies microcosm --preemption-search-per-team 5" in table.splitlines()[1]
    with pytest.raises(CommandError, match="must be at least 0"):
        bench("--preemption-search-per-team", "-1")


def test_mix_both_is_every_mix_and_an_unknown_mix_is_refused() -> None:
    assert mixed_cli.mix_list("both") == ["balanced", "serving"]
    assert mixed_cli.mix_list("serving,balanced") == ["serving", "balanced"]
    with pytest.raises(CommandError, match="unknown mix busy"):
        bench("--mix", "busy")
    with pytest.raises(CommandError, match="--seeds"):
        bench("--seeds", "46-42")


def test_the_same_seed_gives_the_same_figures_with_one_worker_or_two(trace: Path) -> None:
    args = ["--hours", "0.2", "--warmup-hours", "0", "--policies", "binpack,naive", "--seeds", "1-2"]
    args += ["--mix", "balanced", "--trace", str(trace), "--json"]
    first = json.loads(bench(*args))
    second = json.loads(bench(*args, "--jobs", "2"))
    for payload in (first, second):
        for summary in payload["by_load"]["1.2"]["mixes"]["balanced"]["policies"].values():
            summary["median"].pop("wall_s")
            for figures in summary["seeds"].values():
                figures.pop("wall_s")
    assert first["by_load"] == second["by_load"]


def test_report_has_the_utilization_and_wait_charts(trace: Path, tmp_path: Path) -> None:
    outcome = mixed_cli.run(
        {"hours": 0.2, "warmup_hours": 0.0, "policies": ["naive"], "trace": trace, "seeds": "1", "jobs": 1}
    )
    titles = [figure.layout.title.text for figure in outcome.figures]
    assert titles == [
        "Utilization over time (10-minute buckets), balanced, seed 1",
        "Queueing delay by priority class (p95, median over seeds)",
    ]
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
    base = {"hours": 0.1, "warmup_hours": 0.0, "trace": trace, "seeds": "1", "load": 1.2, "jobs": 1}
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
    options = {"hours": 0.1, "warmup_hours": 0.0, "policies": ["boom", "naive"], "trace": trace, "seeds": "1"}
    outcome = mixed_cli.run({**options, "mix": ["balanced"], "jobs": 1})
    policies = outcome.payload["by_load"]["1.2"]["mixes"]["balanced"]["policies"]
    assert policies["boom"]["status"] == "failed"
    assert policies["boom"]["errors"] == {"1": "the planner raised RuntimeError at the cycle t=60: engine bug"}
    assert policies["naive"]["status"] == "ok"
    assert "balanced seed 1: boom FAILED: the planner raised RuntimeError" in outcome.table


def test_loads_are_a_comma_list_of_positive_numbers() -> None:
    assert mixed_cli.load_list("0.8,1.2, 1.6") == [0.8, 1.2, 1.6]
    assert mixed_cli.load_list("1.2,1.2") == [1.2]
    for text, message in [
        ("0.8,x", "'x' is not a number; give loads like 0.8,1.2,1.6"),
        ("0.8,0", "load 0 must be greater than 0"),
        (" , ", "name at least one load, e.g. 0.8,1.2,1.6"),
    ]:
        with pytest.raises(argparse.ArgumentTypeError, match=message):
            mixed_cli.load_list(text)


def test_load_and_loads_together_are_refused() -> None:
    with pytest.raises(CommandError, match="give --load L or --loads L1,L2,…, not both"):
        bench("--load", "1.2", "--loads", "0.8,1.6")
    with pytest.raises(CommandError, match="--loads"):
        bench("--loads", "0.8,-1")


def test_several_loads_make_a_table_per_mix_and_load_with_the_worst_seed(trace: Path) -> None:
    options = {"hours": 0.2, "warmup_hours": 0.0, "policies": ["naive", "microcosm"], "seeds": "1-3"}
    outcome = mixed_cli.run({**options, "loads": [0.8, 1.6], "mix": ["balanced"], "trace": trace, "jobs": 1})
    payload = outcome.payload
    assert payload["loads"] == [0.8, 1.6] and "load" not in payload
    assert "--loads 0.8,1.6 " in payload["command"] and "--load " not in payload["command"]
    assert list(payload["by_load"]) == ["0.8", "1.6"]
    for entry in payload["by_load"].values():
        assert list(entry["mixes"]) == ["balanced"]
        figures = entry["mixes"]["balanced"]["policies"]["microcosm"]["median"]
        assert set(figures["effective_utilization"]) == {"median", "min", "max", "worst", "worst_seed"}
        assert figures["effective_utilization"]["worst"] == figures["effective_utilization"]["min"]
        assert figures["wall_s"]["worst"] == figures["wall_s"]["max"]
        assert figures["effective_utilization"]["worst_seed"] in (1, 2, 3)
    tags = {claim.claim.split(":")[0] for claim in outcome.claims}
    assert tags == {"B2 balanced at load 0.8", "B2 balanced at load 1.6"}
    lines = outcome.table.splitlines()
    assert lines[0].startswith("Mixed (B2): mixed-64 at loads 0.8, 1.6, mixes balanced, seeds 1–3")
    blocks = [line for line in lines if line.startswith("balanced at load")]
    assert len(blocks) == 2 and all("naive" in b and "microcosm" in b and "worst" in b for b in blocks)
    effective = [line for line in lines if line.startswith("effective utilization ")]
    assert len(effective) == 2 and all("(seed " in line for line in effective)


def test_the_quick_run_keeps_one_load_and_its_command(trace: Path) -> None:
    outcome = mixed_cli.run(
        {"hours": 0.1, "warmup_hours": 0.0, "policies": ["naive"], "trace": trace, "seeds": "1", "jobs": 1}
    )
    assert outcome.payload["loads"] == [1.2] and list(outcome.payload["by_load"]) == ["1.2"]
    assert "--load 1.2 " in outcome.payload["command"]
    assert outcome.table.startswith("Mixed (B2): mixed-64 at load 1.2, mixes balanced, serving, seeds 1,")


def test_bench_all_runs_the_headline_and_the_quick_run_of_every_policy() -> None:
    from scheduler.sim.bench import all_cli

    runs = {run.key: all_cli._options(run) for run in all_cli.runs() if run.module is mixed_cli}
    assert list(runs) == ["mixed", "mixed-quick"]  # the headline holds B2's section and its notes
    headline, quick = runs["mixed"], runs["mixed-quick"]
    assert parse_seeds(headline["seeds"]) == list(range(42, 62))
    assert headline["loads"] == [0.8, 1.2, 1.6] and headline["load"] is None
    assert headline["policies"] == ["naive", "microcosm"]
    assert parse_seeds(quick["seeds"]) == [42, 43, 44, 45, 46] and mixed_cli.loads_of(quick) == [1.2]
    assert quick["policies"] == ["naive", "k8s-default", "binpack", "fgd", "microcosm"]
    for options in (headline, quick):  # the protocol is the same; only seeds, loads and policies differ
        assert options["mix"] == ["balanced", "serving"] and options["cluster"] == "mixed-64"
        assert (options["hours"], options["warmup_hours"]) == (8.0, 2.0)
