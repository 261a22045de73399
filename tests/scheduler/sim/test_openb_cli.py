"""``manage.py bench openb``: options, errors, the JSON shape, the table — on small slices of the real trace."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from scheduler.sim.bench import openb_cli
from scheduler.sim.bench.openb_cli import parse_scorers, parse_seeds, run
from scheduler.sim.bench.registry import BenchUsageError, benchmarks
from scheduler.sim.openb.matrix import Job, run_all
from scheduler.sim.openb.published import PAPER_VARIANTS, load_published
from scheduler.sim.traces import TraceError

SHARED = Path(__file__).resolve().parents[3].parent / "shared" / "traces"
TRACES = SHARED / "alibaba-openb-2023"
PUBLISHED = SHARED / "fgd-atc23-expected-results"


def _head(source: Path, target: Path, lines: int) -> Path:
    with source.open(encoding="utf-8") as handle:
        target.write_text("".join(next(handle) for _ in range(lines + 1)), encoding="utf-8")
    return target


@pytest.fixture()
def small(tmp_path: Path) -> tuple[Path, Path]:
    """The first 120 pods of the default and gpuspec10 lists (named as the real ones) and the first 30 nodes."""
    pods = _head(TRACES / "openb_pod_list_default.csv", tmp_path / "openb_pod_list_default.csv", 120)
    _head(TRACES / "openb_pod_list_gpuspec10.csv", tmp_path / "openb_pod_list_gpuspec10.csv", 120)
    nodes = _head(TRACES / "openb_node_list_gpu_node.csv", tmp_path / "nodes.csv", 30)
    return pods, nodes


def bench(*args: str) -> str:
    out = StringIO()
    call_command("bench", "openb", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_openb_is_registered() -> None:
    assert "openb" in benchmarks()


@pytest.mark.parametrize(
    ("text", "expected"),
    [("42", [42]), ("42-44", [42, 43, 44]), ("42-43,50, 43", [42, 43, 50])],
)
def test_seed_specs(text: str, expected: list[int]) -> None:
    assert parse_seeds(text) == expected


@pytest.mark.parametrize(("text", "message"), [("x", "'x' is not a seed"), ("44-42", "must go up"), ("4-", "4-")])
def test_bad_seed_specs_are_refused(text: str, message: str) -> None:
    with pytest.raises(BenchUsageError, match=message):
        parse_seeds(text)


def test_policies() -> None:
    assert parse_scorers("fgd, random,fgd") == ["fgd", "random"]
    with pytest.raises(BenchUsageError, match="unknown tetris"):
        parse_scorers("fgd,tetris")
    with pytest.raises(BenchUsageError, match="none given"):
        parse_scorers(",")


def test_json_shape(small: tuple[Path, Path]) -> None:
    pods, nodes = small
    payload = json.loads(
        bench(
            "--trace",
            str(pods),
            "--nodes",
            str(nodes),
            "--seeds",
            "42-43",
            "--policies",
            "fgd,random,bestfit",
            "--jobs",
            "1",
            "--json",
        )
    )
    assert payload["benchmark"] == "openb"
    assert payload["command"].startswith("python manage.py bench openb --trace ")
    assert payload["trace"] == str(pods)
    assert payload["seeds"] == [42, 43]
    assert set(payload["policies"]) == {"fgd", "random", "bestfit"}
    fgd = payload["policies"]["fgd"]
    assert set(fgd["unallocated_gpu_pct_at_100"]) == {"median", "mean", "std", "per_seed"}
    assert set(fgd["unallocated_gpu_pct_at_100"]["per_seed"]) == {"42", "43"}
    assert all(len(point) == 2 for point in fgd["curve"])
    assert fgd["published"]["median"] == 4.77  # the default list's published FGD row sits beside ours
    assert isinstance(fgd["within_0_5_of_published"], bool)
    assert isinstance(payload["sanity_within_0_5"], bool)
    assert payload["wall_s_per_seed"] > 0  # kept to the millisecond: even a tiny trace takes that long
    assert payload["claims"][0]["claim"].startswith("B1 sanity")


def test_the_table_names_the_command_and_every_policy(small: tuple[Path, Path]) -> None:
    pods, nodes = small
    table = bench(
        "--trace", str(pods), "--nodes", str(nodes), "--seeds", "42", "--policies", "microcosm,fgd", "--jobs", "1"
    )
    assert "command: python manage.py bench openb" in table
    assert "microcosm" in table and "fgd" in table
    assert "vs published FGD 4.77 %" in table
    assert "sanity (random, bestfit, fgd within ±0.5 of published): not checked" in table


def test_variants_run_every_pod_list_beside_the_trace(small: tuple[Path, Path], tmp_path: Path) -> None:
    pods, nodes = small
    outcome = run(
        {
            "trace": pods,
            "nodes": nodes,
            "seeds": "42",
            "policies": "microcosm,fgd",
            "variants": "default,gpuspec10",
            "jobs": 2,
            "published": PUBLISHED,
        }
    )
    assert set(outcome.payload["variants"]) == {"default", "gpuspec10"}
    assert outcome.payload["command"].startswith("python manage.py bench openb --variants default,gpuspec10")
    assert len(outcome.figures) == 3  # one bar chart over the lists, one curve chart per list
    claims = [c.claim for c in outcome.claims]
    assert any("of the 17 published pod lists" in claim for claim in claims)


def test_a_missing_trace_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match=r"nowhere\.csv: pod list not found"):
        bench("--trace", str(tmp_path / "nowhere.csv"))
    with pytest.raises(CommandError, match=r"openb_pod_list_gpushare40\.csv"):
        bench("--trace", str(tmp_path / "openb_pod_list_default.csv"), "--variants", "all17")


def test_a_missing_node_list_is_a_clear_error(small: tuple[Path, Path], tmp_path: Path) -> None:
    pods, _ = small
    with pytest.raises(CommandError, match="node list not found"):
        bench("--trace", str(pods), "--nodes", str(tmp_path / "none.csv"))


def test_bad_seeds_are_a_clear_error() -> None:
    with pytest.raises(CommandError, match="--seeds 'forty': 'forty' is not a seed"):
        bench("--seeds", "forty")


def test_a_malformed_trace_reports_file_and_line(small: tuple[Path, Path], tmp_path: Path) -> None:
    _, nodes = small
    bad = tmp_path / "openb_pod_list_bad.csv"
    bad.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1000,10,3,1000\n", encoding="utf-8")
    with pytest.raises(CommandError, match=r"openb_pod_list_bad.csv:2: num_gpu"):
        bench("--trace", str(bad), "--nodes", str(nodes), "--seeds", "42")


def test_a_pod_list_without_gpu_requests_is_refused(small: tuple[Path, Path], tmp_path: Path) -> None:
    _, nodes = small
    cpu_only = _head(TRACES / "openb_pod_list_cpu050.csv", tmp_path / "openb_pod_list_cpu050.csv", 20)
    with pytest.raises(CommandError, match="asks for no GPU"):
        bench("--trace", str(cpu_only), "--nodes", str(nodes), "--seeds", "42", "--policies", "fgd", "--jobs", "1")


def test_without_published_tables_the_comparison_is_empty(small: tuple[Path, Path], tmp_path: Path) -> None:
    pods, nodes = small
    outcome = run({"trace": pods, "nodes": nodes, "seeds": "42", "policies": "fgd", "jobs": 1, "published": tmp_path})
    assert outcome.payload["policies"]["fgd"]["published"] is None
    assert outcome.payload["sanity_within_0_5"] is None


def test_published_rows() -> None:
    published = load_published(PUBLISHED)
    assert published[("openb_pod_list_default", "fgd")].summary.median == 4.77
    assert published[("openb_pod_list_default", "random")].summary.median == 13.75
    assert len(published[("openb_pod_list_default", "bestfit")].summary.per_seed) == 10
    assert all((f"openb_pod_list_{variant}", "fgd") in published for variant in PAPER_VARIANTS)
    curve = dict(published[("openb_pod_list_default", "fgd")].curve)
    assert curve[100] == pytest.approx(4.77, abs=0.2)


def test_published_tables_are_checked(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot open"):
        load_published(tmp_path)
    (tmp_path / "analysis_allo_discrete.csv").write_text("workload,seed\nx,1\n", encoding="utf-8")
    with pytest.raises(TraceError, match="missing column"):
        load_published(tmp_path)
    (tmp_path / "analysis_allo_discrete.csv").write_text(
        "workload,sc_policy,seed,100\nx,06-FGD,oops,95\nx,07-Other,1,95\n", encoding="utf-8"
    )
    with pytest.raises(TraceError, match=":2: the seed or a bucket is not a number"):
        load_published(tmp_path)


def test_run_all_gives_the_same_results_in_one_or_two_workers(small: tuple[Path, Path]) -> None:
    pods, nodes = small
    jobs = [Job(pods, policy, seed) for policy in ("fgd", "gpu-packing") for seed in (42, 43)]
    alone = [r.run for r in run_all(nodes, jobs, workers=1)]
    together = [r.run for r in run_all(nodes, jobs, workers=2)]
    assert alone == together


def test_the_replay_time_claim_is_measured_only_on_the_whole_default_trace(
    small: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    pods, nodes = small
    sliced = run({"trace": pods, "nodes": nodes, "seeds": "42", "policies": "random", "jobs": 1})
    assert not any(c.claim.startswith("B5") for c in sliced.claims)  # a slice says nothing about B5
    # The claim is made when the run replays the default files, whatever they hold: the slice stands in for them
    # here (the whole trace takes half a minute of the suite to say the same).
    monkeypatch.setattr(openb_cli, "DEFAULT_TRACE", pods)
    monkeypatch.setattr(openb_cli, "DEFAULT_NODES", nodes)
    whole = run({"seeds": "42", "policies": "random", "jobs": 1})
    [claim] = [c for c in whole.claims if c.claim.startswith("B5")]
    assert claim.measured.startswith("slowest random ") and isinstance(claim.reproduced, bool)  # judged, not timed here
    other_nodes = nodes.with_name("other_nodes.csv")
    other_nodes.write_bytes(nodes.read_bytes())
    elsewhere = run({"nodes": other_nodes, "seeds": "42", "policies": "random", "jobs": 1})
    assert not any(c.claim.startswith("B5") for c in elsewhere.claims)  # other nodes: not the default replay
