"""Every command that reads a person's file answers a hostile or broken one with ``FILE…: what is wrong`` and a
non-zero exit, never a traceback (hardening issue, item 8).

The cases come from :mod:`tests.scheduler.hostile_files`: the same reading cases for every command (not a
file, not text, not UTF-8, NUL bytes, oversized, nested past any parser's recursion, numbers of 5,000
digits, NaN, lone surrogates, top levels that are not objects, syntax errors), the YAML-only ones for
``teams apply`` (alias bombs, recursive aliases, ``!!python`` tags, non-string keys), CSV ones for the bench
traces, and valid documents with hostile values at real keys (which may be accepted, but never crash).

In process, ``call_command`` must raise ``CommandError`` and nothing else, and the first line the command
says (stderr, else the error) starts with the file's path. One subprocess per command proves the exit code.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import DataError, IntegrityError

from jobs.management.commands import jobs as jobs_command
from jobs.models import Job
from scheduler.sim.bench import all_cli
from scheduler.sim.traces import rows
from tests.scheduler import hostile_files as hostile
from tests.scheduler.hostile_files import Case

SCENARIOS = Path(__file__).parent / "scenarios"
SHARED_TRACES = Path(settings.BASE_DIR).parent / "shared" / "traces"

JOB = {
    "name": "bert",
    "kind": "training",
    "gpus": 1,
    "replicas": 1,
    "duration_s": 600,
    "checkpoint_interval_s": 300,
    "priority": "normal",
    "preemptible": True,
    "tier": "any",
    "image": "registry/bert:1",
    "command": ["python", "train.py"],
    "env": {"A": "1"},
}
JOB_PATHS = [(key,) for key in JOB] + [("env", "A"), ("command", 0), ("rank",), ("gpu_model",), ("project",)]
MEMORY_JOB = {"name": "chat", "kind": "inference", "memory_gib": 12}
MODEL_JOB = {"name": "llm", "kind": "inference", "model": {"params_b": 7, "dtype": "bf16", "context": 4096, "batch": 8}}
MODEL_PATHS = [("model",), ("model", "params_b"), ("model", "dtype"), ("model", "context"), ("model", "batch")]

ORG = {
    "teams": [
        {
            "name": "Vision",
            "slug": "vision",
            "namespace": "team-vision",
            "weight": 2,
            "quotas": [{"gpu_class": "A100", "guaranteed": 4, "burst": 8}],
            "projects": [{"code": "cv", "name": "Detection"}],
            "members": [{"username": "erin", "role": "lead"}],
        }
    ],
    "finance": ["carol"],
}
ORG_YAML = "teams:\n  - name: Vision\n    slug: vision\n    namespace: team-vision\n    weight: 2\n"
TEAM = ("teams", 0)
ORG_PATHS = [("teams",), TEAM, ("finance",), ("finance", 0), ("platform_admins",)] + [
    (*TEAM, key) for key in ("name", "slug", "namespace", "weight", "quotas", "projects", "members")
]
ORG_PATHS += [(*TEAM, "quotas", 0, key) for key in ("gpu_class", "guaranteed", "burst")]
ORG_PATHS += [(*TEAM, "projects", 0, "code"), (*TEAM, "members", 0, "username"), (*TEAM, "members", 0, "role")]


def _scenario() -> dict:
    doc = json.loads((SCENARIOS / "08_topology_nvswitch_node_first.json").read_text())
    del doc["expect"]
    return {**doc, "policy": {"mig_reconfigure_s": 60}}


SCENARIO = _scenario()
NODE, SUBMIT = ("cluster", "nodes", 0), ("events", 0, "submit")
SCENARIO_PATHS = [(key,) for key in ("name", "cycle_s", "until", "policy", "cluster", "teams", "events")]
SCENARIO_PATHS += [(*NODE, key) for key in ("name", "gpu_model", "gpus", "interconnect", "leaf")]
SCENARIO_PATHS += [(*NODE, "mig"), (*NODE, "tier"), (*NODE, "price_per_gpu_hour"), ("policy", "mig_reconfigure_s")]
SCENARIO_PATHS += [("teams", 0, key) for key in ("name", "guaranteed_gpus", "burst_gpus", "weight", "guaranteed")]
SCENARIO_PATHS += [("events", 0), ("events", 0, "t"), SUBMIT]
SCENARIO_PATHS += [(*SUBMIT, key) for key in ("id", "team", "kind", "gpus", "replicas", "duration_s", "priority")]

PHILLY = b"runtime\n0.0\n120\n900\n3600\n7200\n"


def _cases(*groups: list[Case]) -> list[pytest.param]:
    return [pytest.param(case, id=case.id) for group in groups for case in group]


def _extra(*cases: Case | None) -> list[Case]:
    return [case for case in cases if case is not None]


def _run(args: list[str], path: str, *, may_succeed: bool = False) -> str:
    """Run the command in process: it succeeds (when allowed) or fails with CommandError — no other
    exception escapes — and the first line it says starts with the path (repr'd if it holds a NUL)."""
    err = StringIO()
    try:
        call_command(*args, stdout=StringIO(), stderr=err)
    except CommandError as exc:
        said = err.getvalue().strip() or str(exc)
        first = said.splitlines()[0]
        # A path holding a NUL (only call_command can pass one) may be shown as it is or repr'd.
        shown = {path, repr(path)}
        assert any(first.startswith((f"{name}:", f"{name} ")) for name in shown), said[:2000]
        assert "Traceback" not in said
        return said
    assert may_succeed, f"{args} was accepted"
    return ""


# A command's last resort when validation let a value through that the engine or the database then refused:
# it still answers in one line per problem, but says so. Such a case is a validation gap, listed here with
# the reader that should refuse it (strict both ways, as KNOWN_ENGINE_GAPS in test_scenarios.py).
GAP_MARKERS = ("scenario checks let through", "the database refused", "the database rejected")
KNOWN_VALIDATION_GAPS: dict[str, str] = {}  # none left: scenario quotas, weights and prices are bounded


def _check_gap(case: Case, said: str) -> None:
    gap = any(marker in said for marker in GAP_MARKERS)
    if case.id in KNOWN_VALIDATION_GAPS:
        assert gap, f"{case.id} no longer reaches the last resort: remove it from KNOWN_VALIDATION_GAPS"
    else:
        assert not gap, f"validation let a hostile value through: {said[:500]}"


# --------------------------------------------------------------------------------------------- jobs submit

JOB_READING = hostile.json_cases("job.json", JOB, "gpus") + _extra(
    hostile.nul_in_path("job.json"), hostile.unreadable("job.json", json.dumps(JOB).encode())
)


@pytest.mark.django_db
@pytest.mark.parametrize("case", _cases(JOB_READING))
def test_jobs_submit_refuses_an_unreadable_spec(case: Case, team, tmp_path: Path) -> None:
    path = case.write(tmp_path)
    _run(["jobs", "submit", "--team", team.slug, "--spec", path], path)
    assert not Job.objects.exists()


JOB_VALUES = (
    hostile.value_cases("job.json", JOB, JOB_PATHS)
    + hostile.value_cases("job.json", MEMORY_JOB, [("memory_gib",)])
    + hostile.value_cases("job.json", MODEL_JOB, MODEL_PATHS)
)


@pytest.mark.django_db
@pytest.mark.parametrize("case", _cases(JOB_VALUES))
def test_jobs_submit_never_crashes_on_a_hostile_value(case: Case, team, tmp_path: Path) -> None:
    path = case.write(tmp_path)
    _check_gap(case, _run(["jobs", "submit", "--team", team.slug, "--spec", path], path, may_succeed=True))


@pytest.mark.django_db
def test_a_memory_the_database_would_round_to_zero_is_refused_without_the_env(team, tmp_path: Path) -> None:
    """0.001 GiB is 0.00 in the column, which a constraint refuses; it was a traceback printing the env."""
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps({**MEMORY_JOB, "memory_gib": 0.001, "env": {"TOKEN": "s3cr3t"}}))
    said = _run(["jobs", "submit", "--team", team.slug, "--spec", str(path)], str(path))
    assert "s3cr3t" not in said
    assert not Job.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("error", [IntegrityError, DataError])
def test_a_database_refusal_is_one_line_without_the_row(error, team, tmp_path: Path, monkeypatch) -> None:
    """The last resort, should validation miss a column's limit: PostgreSQL's message repeats the whole row
    (the env too) after DETAIL; only its first line is shown."""
    message = 'new row for relation "jobs_job" violates check constraint "x"\nDETAIL: Failing row contains (s3cr3t)'

    def refuse(**kwargs: object) -> None:
        raise error(message)

    monkeypatch.setattr(jobs_command, "job_submit", refuse)
    path = tmp_path / "job.json"
    path.write_text(json.dumps({**JOB, "env": {"TOKEN": "s3cr3t"}}))

    said = _run(["jobs", "submit", "--team", team.slug, "--spec", str(path)], str(path))

    assert (
        said == f'{path}: the database refused the job: new row for relation "jobs_job" violates check constraint "x"'
    )


# --------------------------------------------------------------------------------------------- teams apply

TEAM_READING = (
    hostile.json_cases("org.json", ORG, "teams")
    + hostile.yaml_cases("org.yaml", ORG_YAML)
    + _extra(hostile.nul_in_path("org.yaml"), hostile.unreadable("org.yaml", ORG_YAML.encode()))
)


@pytest.mark.django_db
@pytest.mark.parametrize("case", _cases(TEAM_READING))
def test_teams_apply_refuses_an_unreadable_file(case: Case, tmp_path: Path) -> None:
    path = case.write(tmp_path)
    said = _run(["teams", "apply", path], path, may_succeed=case.id == "yaml-timestamp-as-name")
    if case.id.startswith("yaml-billion-laughs"):
        assert "more than 1,000,000 values once its aliases are expanded" in said


@pytest.mark.django_db
@pytest.mark.parametrize("case", _cases(hostile.value_cases("org.json", ORG, ORG_PATHS)))
def test_teams_apply_never_crashes_on_a_hostile_value(case: Case, tmp_path: Path) -> None:
    path = case.write(tmp_path)
    _check_gap(case, _run(["teams", "apply", path, "--dry-run"], path, may_succeed=True))


# -------------------------------------------------------------------------------------------- scenario run

SCENARIO_READING = hostile.json_cases("scenario.json", SCENARIO, "until") + _extra(hostile.nul_in_path("scenario.json"))
RUNAWAY = [
    Case(
        "cycle_s-0.001-until-1e7",
        hostile.file_of("runaway.json", hostile.dumps({**SCENARIO, "cycle_s": 0.001, "until": 1e7})),
    ),
    Case("until-1e7", hostile.file_of("runaway.json", hostile.dumps({**SCENARIO, "until": 1e7}))),
    Case("until-1e300", hostile.file_of("runaway.json", hostile.dumps({**SCENARIO, "until": 1e300}))),
    Case(
        "no-until-long-job",
        hostile.file_of(
            "runaway.json",
            hostile.dumps(
                {
                    **{k: v for k, v in SCENARIO.items() if k != "until"},
                    "cycle_s": 1,
                    "events": [{"t": 0, "submit": {**SCENARIO["events"][0]["submit"], "duration_s": 10**7}}],
                }
            ),
        ),
    ),
]


@pytest.mark.parametrize("case", _cases(SCENARIO_READING, RUNAWAY))
def test_scenario_run_refuses_an_unreadable_or_runaway_file(case: Case, tmp_path: Path) -> None:
    path = case.write(tmp_path)
    said = _run(["scenario", "run", path], path)
    if case in RUNAWAY[1:]:
        assert "above the bound of" in said


@pytest.mark.parametrize("case", _cases(hostile.value_cases("scenario.json", SCENARIO, SCENARIO_PATHS)))
def test_scenario_run_never_crashes_on_a_hostile_value(case: Case, tmp_path: Path) -> None:
    path = case.write(tmp_path)
    _check_gap(case, _run(["scenario", "run", path, "--json"], path, may_succeed=True))


def test_the_work_bound_names_the_flag_that_lifts_it(tmp_path: Path) -> None:
    path = tmp_path / "long.json"
    path.write_text(json.dumps({**SCENARIO, "until": 2_000_000}))  # 200,001 cycles × 1 job

    said = _run(["scenario", "run", str(path), "--max-work", "200000"], str(path))

    assert said.splitlines()[0] == (
        f"{path}: until: this scenario asks for 200,001 cycles × 1 job = 200,001 cycle-jobs (until 2e+06 s / "
        "cycle_s 10 s), above the bound of 200,000; raise it with --max-work 200001, or lengthen cycle_s or "
        "shorten until"
    )


def test_a_scenario_within_a_raised_bound_runs(tmp_path: Path) -> None:
    path = tmp_path / "ok.json"
    path.write_text(json.dumps(SCENARIO))  # 61 cycles × 1 job
    out = StringIO()
    call_command("scenario", "run", str(path), "--max-work", "61", "--max-cycles", "61", "--json", stdout=out)
    assert json.loads(out.getvalue())["final"]["t"] == 600
    with pytest.raises(CommandError, match="1 error"):
        call_command("scenario", "run", str(path), "--max-cycles", "60", stdout=StringIO(), stderr=StringIO())


# --------------------------------------------------------------------------------------------------- bench


@pytest.fixture
def small_trace_cap(monkeypatch: pytest.MonkeyPatch) -> int:
    """The trace cap lowered to 1 MiB, so the oversized cases stay small on disk."""
    monkeypatch.setattr(rows, "MAX_TRACE_BYTES", 2**20)
    return 2**20


PHILLY_CASES = hostile.csv_cases("philly.csv", PHILLY, oversize_bytes=2**20 + 1) + _extra(
    hostile.nul_in_path("philly.csv")
)
ACCEPTED_TRACES = {"crlf-and-bare-cr"}  # valid, odd line ends: the bench runs


SAMPLE = {"binary-garbage", "latin-1", "directory", "header-only", "number-nan"}
PHILLY_RUNS = [("mixed", case) for case in PHILLY_CASES]
# cost and topology read the trace with mixed's reader: a sample of the cases shows they use it.
PHILLY_RUNS += [(benchmark, case) for benchmark in ("cost", "topology") for case in PHILLY_CASES if case.id in SAMPLE]


@pytest.mark.parametrize(
    ("benchmark", "case"), PHILLY_RUNS, ids=[f"{benchmark}-{case.id}" for benchmark, case in PHILLY_RUNS]
)
def test_bench_refuses_an_unreadable_philly_trace(benchmark: str, case: Case, tmp_path: Path, small_trace_cap) -> None:
    path = case.write(tmp_path)
    short = {"mixed": ["--hours", "0.05", "--warmup-hours", "0", "--policies", "naive"]}.get(benchmark, [])
    _run(["bench", benchmark, "--trace", path, *short], path, may_succeed=case.id in ACCEPTED_TRACES)


def _openb_files(tmp_path: Path) -> tuple[Path, Path]:
    """The first rows of the real openb pod and node lists (the loaders' own tests use the same slices)."""
    folder = SHARED_TRACES / "alibaba-openb-2023"
    if not folder.is_dir():
        pytest.skip("the openb trace is not checked out beside the project")
    pods, nodes = tmp_path / "openb_pod_list_default.csv", tmp_path / "nodes.csv"
    for source, target, lines in (
        ("openb_pod_list_default.csv", pods, 60),
        ("openb_node_list_gpu_node.csv", nodes, 20),
    ):
        target.write_text("".join((folder / source).open(encoding="utf-8").readlines()[:lines]), encoding="utf-8")
    return pods, nodes


OPENB_POD_CASES = hostile.csv_cases(
    "pods.csv",
    b"name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1000,10,1,500\n",
    oversize_bytes=2**20 + 1,
    integer_column=1,
)
OPENB_NODE_CASES = hostile.csv_cases(
    "nodes-x.csv",
    b"sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,8,V100M32\n",
    oversize_bytes=2**20 + 1,
    integer_column=3,
)


@pytest.mark.parametrize("case", _cases(OPENB_POD_CASES))
def test_bench_openb_refuses_an_unreadable_pod_list(case: Case, tmp_path: Path, small_trace_cap) -> None:
    _, nodes = _openb_files(tmp_path)
    path = case.write(tmp_path)
    args = [
        "bench",
        "openb",
        "--trace",
        path,
        "--nodes",
        str(nodes),
        "--seeds",
        "42",
        "--policies",
        "fgd",
        "--jobs",
        "1",
    ]
    _run(args, path, may_succeed=case.id in ACCEPTED_TRACES)


@pytest.mark.parametrize("case", _cases(OPENB_NODE_CASES))
def test_bench_openb_refuses_an_unreadable_node_list(case: Case, tmp_path: Path, small_trace_cap) -> None:
    pods, _ = _openb_files(tmp_path)
    path = case.write(tmp_path)
    args = [
        "bench",
        "openb",
        "--trace",
        str(pods),
        "--nodes",
        path,
        "--seeds",
        "42",
        "--policies",
        "fgd",
        "--jobs",
        "1",
    ]
    _run(args, path, may_succeed=case.id in ACCEPTED_TRACES)


# Only files that are not text: an --output that reads (even empty) would start every benchmark.
NOT_TEXT = {"directory", "latin-1", "utf-16-bom", "utf-16-no-bom", "binary-garbage", "gzip", "nul-appended"}
OUTPUT_CASES = [case for case in hostile.file_cases("BENCHMARKS.md", b"# Benchmarks\n") if case.id in NOT_TEXT]


@pytest.mark.parametrize("case", _cases(OUTPUT_CASES))
def test_bench_all_refuses_an_unreadable_output_before_running(
    case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_run() -> None:
        raise AssertionError("bench all started its runs with an unreadable --output")

    monkeypatch.setattr(all_cli, "machine", no_run)
    path = case.write(tmp_path)
    _run(["bench", "all", "--write", "--output", path], path)


def test_bench_openb_refuses_an_unreadable_published_table(tmp_path: Path) -> None:
    pods, nodes = _openb_files(tmp_path)
    table = tmp_path / "published" / "analysis_allo_discrete.csv"
    table.parent.mkdir()
    table.write_bytes(b"workload,sc_policy,seed,100\n\xff\xfe\n")
    args = ["bench", "openb", "--trace", str(pods), "--nodes", str(nodes), "--published", str(table.parent)]
    _run([*args, "--seeds", "42", "--policies", "fgd", "--jobs", "1"], str(table))


# ------------------------------------------------------------------------------------- as a real process

PROCESS_CASES: list[tuple[str, Callable[[Path], tuple[list[str], str]]]] = []


def _process_case(name: str) -> Callable[[Callable[[Path], tuple[list[str], str]]], None]:
    def register(build: Callable[[Path], tuple[list[str], str]]) -> None:
        PROCESS_CASES.append((name, build))

    return register


@_process_case("jobs submit")
def _(folder: Path) -> tuple[list[str], str]:
    path = folder / "job.json"
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    return ["jobs", "submit", "--team", "nlp", "--spec", str(path)], str(path)


@_process_case("teams apply")
def _(folder: Path) -> tuple[list[str], str]:
    laughs = next(case for case in hostile.yaml_cases("org.yaml", ORG_YAML) if case.id == "yaml-billion-laughs")
    path = laughs.write(folder)
    return ["teams", "apply", path], path


@_process_case("scenario run")
def _(folder: Path) -> tuple[list[str], str]:
    path = folder / "runaway.json"
    path.write_text(json.dumps({**SCENARIO, "cycle_s": 0.001, "until": 1e7}))
    return ["scenario", "run", str(path)], str(path)


@_process_case("bench mixed")
def _(folder: Path) -> tuple[list[str], str]:
    path = folder / "philly.csv"
    path.write_bytes(b"runtime\n" + b"1" * 5000 + b"\n")
    return ["bench", "mixed", "--trace", str(path)], str(path)


@pytest.mark.parametrize(("name", "build"), PROCESS_CASES, ids=[name for name, _ in PROCESS_CASES])
def test_the_process_exits_non_zero_without_a_traceback(name: str, build, tmp_path: Path) -> None:
    args, path = build(tmp_path)
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "DEBUG": "1"}
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    said = [line for line in done.stderr.splitlines() if not line.startswith("AXES:")]
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    # bench says its one problem as the CommandError itself, which Django prefixes with the class name.
    assert said and said[0].removeprefix("CommandError: ").startswith(f"{path}:"), done.stderr
    assert said[-1].startswith("CommandError: ")
