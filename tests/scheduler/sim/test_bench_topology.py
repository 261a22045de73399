"""``bench topology`` on small clusters and a short window: the JSON's shape, the ratio, and the errors."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from scheduler.sim.bench import topology_cli
from scheduler.sim.bench.registry import BenchUsageError, benchmarks


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "philly_runtime.csv"
    path.write_text("runtime\n600\n1800\n3600\n7200\n", encoding="utf-8")
    return path


def bench(*args: str) -> str:
    out = StringIO()
    call_command("bench", "topology", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_registered_once_under_its_name() -> None:
    assert benchmarks()["topology"] is topology_cli


def test_json_per_cluster_size_and_policy(trace: Path) -> None:
    payload = json.loads(
        bench(
            "--gpus", "16,32", "--hours", "0.5", "--warmup-hours", "0.25", "--seed", "5",
            "--policies", "k8s-default,binpack,microcosm", "--trace", str(trace), "--json",
        )
    )  # fmt: skip
    assert payload["benchmark"] == "topology" and "--gpus 16,32" in payload["command"]
    assert list(payload["clusters"]) == ["16", "32"]
    for size in payload["clusters"].values():
        assert list(size["policies"]) == ["k8s-default", "binpack", "microcosm"]
        base = size["policies"]["k8s-default"]
        assert {"training_throughput", "distributed_speed", "allocation_ratio", "completed"} <= set(base)
        ours = size["policies"]["microcosm"]
        if ours["status"] == "ok" and base["training_throughput"]:
            assert size["microcosm_vs_k8s_default"] == pytest.approx(
                ours["training_throughput"] / base["training_throughput"], abs=1e-3
            )
    assert payload["claims"] == []  # no size of 64 GPUs or more was run


def test_claims_are_made_from_64_gpus(trace: Path) -> None:
    outcome = topology_cli.run(
        {"gpus": [64], "hours": 0.25, "warmup_hours": 0.0, "policies": ["k8s-default", "microcosm"], "trace": trace,
         "seed": 1, "load": 1.2, "oversubscription": 2.0}
    )  # fmt: skip
    (claim,) = outcome.claims
    assert claim.claim.startswith("B3: microcosm ≥ 20 % more training throughput than k8s-default on 64 GPUs")
    assert outcome.figures[0].layout.title.text == "Training throughput by cluster size"


@pytest.mark.parametrize("args", [["--gpus", "60"], ["--gpus", "x"], ["--oversubscription", "0.5"], ["--load", "-1"]])
def test_bad_arguments_are_refused(args: list[str]) -> None:
    with pytest.raises(CommandError):
        bench(*args)


def test_an_unknown_planner_names_the_known_ones(trace: Path) -> None:
    with pytest.raises(BenchUsageError, match="unknown policies bestfit"):
        topology_cli.run({"gpus": [16], "policies": ["bestfit"], "trace": trace})


def test_without_fabric_is_reported_and_tcp_leaves_take_the_fabric_off(trace: Path) -> None:
    args = ("--gpus", "32", "--hours", "0.5", "--warmup-hours", "0.25", "--seed", "5", "--trace", str(trace))
    plain = json.loads(bench(*args, "--policies", "k8s-default", "--json"))
    assert plain["tcp_leaves"] == 0 and "--tcp-leaves" not in plain["command"]
    assert plain["clusters"]["32"]["policies"]["k8s-default"]["without_fabric"]["runs"] == 0  # all InfiniBand
    payload = json.loads(bench(*args, "--policies", "k8s-default", "--tcp-leaves", "1", "--json"))
    assert payload["tcp_leaves"] == 1 and "--tcp-leaves 1" in payload["command"]
    figures = payload["clusters"]["32"]["policies"]["k8s-default"]["without_fabric"]
    assert set(figures) == {"runs", "gpu_hours", "speed"}
    table = bench(*args, "--policies", "k8s-default", "--tcp-leaves", "1")
    assert "no-fabric runs (speed)" in table


def test_tcp_leaves_beyond_the_cluster_are_refused(trace: Path) -> None:
    with pytest.raises((BenchUsageError, CommandError), match="tcp_leaves must be from 0"):
        bench("--gpus", "32", "--tcp-leaves", "5", "--trace", str(trace))
