"""``manage.py bench loop`` (B6): its options, a small run end to end, and its scratch database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import nullcontext
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from benchmarks import loop_bench
from scheduler.sim.bench.all_cli import runs
from scheduler.sim.bench.synthetic import ClusterShape

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nodes", "0"], "argument --nodes: 0 must be at least 1"),
        (["--pending", "many"], "argument --pending: 'many' is not a whole number"),
        (["--cycles", "0"], "argument --cycles: 0 must be at least 1"),
        (["--database", "other"], "unrecognized arguments: --database other"),
    ],
)
def test_bad_options_are_refused_with_what_to_change(args: list[str], message: str) -> None:
    with pytest.raises(CommandError) as error:
        call_command("bench", "loop", *args, stdout=StringIO())
    assert message in str(error.value)


def test_bench_all_runs_1000_nodes_and_keeps_5000_for_when_it_is_asked() -> None:
    from benchmarks.management.commands.bench import _known

    found = {run.key: run for run in runs(_known())}
    assert found["loop"].args == () and not found["loop"].slow
    assert found["loop-5000"].args == ("--nodes", "5000") and found["loop-5000"].slow


@pytest.mark.django_db(transaction=True)
def test_a_small_run_times_every_phase_and_counts_the_queries_of_each_cycle(monkeypatch: pytest.MonkeyPatch) -> None:
    # The test database is empty and the bench's own: run in it instead of a scratch database beside it.
    monkeypatch.setattr(loop_bench, "scratch_database", lambda alias: nullcontext(alias))
    out = StringIO()
    call_command("bench", "loop", "--nodes", "20", "--pending", "100", "--cycles", "1", "--json", stdout=out)
    payload = json.loads(out.getvalue())
    assert payload["command"] == "python manage.py bench loop --nodes 20 --pending 100 --cycles 1 --seed 42"
    seeded = payload["seeded"]
    assert seeded["nodes"] == 20 and seeded["teams"] == 20
    assert seeded["jobs"] + sum(seeded["left_out"].values()) == 100 + len(
        loop_bench.synthetic_snapshot(ClusterShape(nodes=20, pending=100)).running
    )
    first, steady = payload["cycles"]
    assert (first["label"], steady["label"]) == ("first", "steady 1")
    assert first["running"] == 0 and first["decided"]["binds"] > 0 and first["pending"] == seeded["jobs"]
    assert steady["running"] == first["decided"]["binds"]
    for cycle in (first, steady):
        assert set(cycle["phases_s"]) == set(loop_bench.COLUMNS)
        assert all(seconds >= 0 for seconds in cycle["phases_s"].values())
        assert sum(cycle["phases_s"].values()) == pytest.approx(cycle["wall_s"], abs=0.05)
        assert cycle["queries"] > 0 and not cycle["failed"]
        assert cycle["peak_rss_mib"] > 10  # a Django process with the cycle's state: tens of MiB at least
    assert payload["database_mib"] > 0  # the seeded jobs and nodes, and what the cycles wrote
    assert payload["claims"] == []  # 20 nodes: no target at this size
    assert payload["engine"] == "pure Python"  # named, as B5 names it: the suite runs the engine as source


def test_the_table_judges_the_targets_of_the_target_sizes() -> None:
    zero = dict.fromkeys(loop_bench.COLUMNS, 0.0)
    figures = [
        loop_bench.CycleFigures("first", 31.0, 30.0, zero, 9, 14_000, 0, {"binds": 6}),
        loop_bench.CycleFigures("steady 1", 1.2, 1.1, zero, 9, 8_000, 6, {}),
    ]
    result = loop_bench.LoopResult(
        shape=ClusterShape(nodes=1_000, pending=10_000), database="sqlite", seeded=loop_bench.Seeded(), cycles=figures
    )
    steady, first = loop_bench._claims(result)
    assert steady.reproduced is True and "≤ 1.5 s" in steady.claim and "slowest 1.20 s" in steady.measured
    assert first.reproduced is False and "≤ 30 s" in first.claim and "31.0 s" in first.measured


@pytest.mark.slow
def test_it_runs_in_a_scratch_database_and_leaves_the_configured_one_alone(tmp_path: Path) -> None:
    configured = tmp_path / "configured.sqlite3"
    env = {**os.environ, "DEBUG": "1", "DATABASE_URL": f"sqlite:///{configured}"}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    done = subprocess.run(
        [sys.executable, "manage.py", "bench", "loop", "--nodes", "3", "--pending", "10", "--cycles", "1", "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    payload = json.loads(done.stdout)
    assert payload["database"] == "sqlite" and payload["seeded"]["nodes"] == 3
    assert not configured.exists()  # never created, read or written: the run had a database of its own
