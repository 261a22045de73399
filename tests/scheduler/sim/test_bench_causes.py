"""``bench causes`` on a tiny B2 replay (15 min after a 3 min warm-up): the run is ``bench mixed``'s run, the
production waits are wholly labelled, idle_while_pending split job by job is the metric's own figure (and the
metric's figure is what it was before the split), and command-line mistakes give one line a person can act
on. No figures are asserted: benchmarks are never timed or tuned tests."""

from __future__ import annotations

import json
from collections.abc import Mapping
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Node
from scheduler.sim.bench import all_cli, causes_cli
from scheduler.sim.bench.causes_run import CauseRun, run_causes
from scheduler.sim.bench.causes_summary import flat
from scheduler.sim.bench.mixed_matrix import Setup, workload_of
from scheduler.sim.bench.mixed_run import run_planner
from scheduler.sim.bench.registry import benchmarks
from scheduler.sim.causes.kinds import BETWEEN_CYCLES
from scheduler.sim.idle_pending import held_s, idle_while_pending
from scheduler.sim.metrics import capacity_gpu_s
from scheduler.sim.planners import microcosm
from scheduler.sim.records import CycleLog, CycleSample
from scheduler.sim.replay import replay
from scheduler.sim.topology_model import topology_speed
from scheduler.sim.workload.mixed import Workload
from tests.scheduler.sim.test_causes import reference_cycle_gap
from tests.untraced import untraced

RUNTIMES = (60.0, 120.0, 900.0, 3600.0, 7200.0)
# serving, seed 2 on this window has production waits blocked by capacity, reconfiguring, not-ready and held
TINY = Setup(cluster="mixed-64", load=1.2, hours=0.25, warmup_s=180.0, runtimes=RUNTIMES)


@pytest.fixture(scope="module")
def workload() -> Workload:
    return workload_of(TINY, "serving", 2)


@pytest.fixture(scope="module")
def causes(workload: Workload) -> CauseRun:
    return run_causes(workload, "serving", 2)


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "philly_runtime.csv"
    path.write_text("runtime\n" + "\n".join(f"{r:g}" for r in RUNTIMES) + "\n", encoding="utf-8")
    return path


# -- the tiny replay ------------------------------------------------------------------------------------------------


def test_the_run_is_bench_mixeds_run_the_recorder_only_observes(workload: Workload, causes: CauseRun) -> None:
    assert causes.error is None and causes.metrics is not None
    assert causes.metrics == run_planner(workload, "microcosm", cycles=True).metrics


def test_every_second_of_the_production_waits_is_labelled(causes: CauseRun) -> None:
    waits = causes.waits
    assert waits is not None and waits.jobs > 0
    assert sum(waits.by_kind.values()) == pytest.approx(waits.wait_s)
    assert {"capacity", "reconfiguring"} <= set(waits.by_kind)
    assert waits.by_kind.get(BETWEEN_CYCLES, 0.0) <= 10.0 * waits.jobs  # at most one cycle per wait here
    assert sum(waits.capacity.values()) == pytest.approx(waits.by_kind["capacity"])
    assert waits.room_s <= sum(waits.capacity.values()) + 1e-9 and waits.lower_s <= waits.by_kind["capacity"] + 1e-9
    assert all(step[1] > 0 for wait in waits.longest for step in wait.sequence)
    assert all(wait.last_reason.startswith("waiting for") for wait in waits.longest)


def test_the_production_wait_splits_into_avoidable_and_an_unavoidable_rest_by_cause() -> None:
    causes = run_causes(workload_of(TINY, "serving", 3), "serving", 3)  # a seed whose production also waits in vain
    metrics = causes.metrics
    assert metrics is not None
    avoidable, total = metrics["production_avoidable_wait_s"], metrics["production_inference_wait_s"]
    assert avoidable["max"] is not None and avoidable["max"] <= total["max"]
    row = flat(causes)
    assert row is not None and row.figures["production.avoidable_max_s"] == avoidable["max"]
    shares = row.groups["production.unavoidable"]
    assert shares, "production waited where no placement existed"
    assert sum(shares.values()) == pytest.approx(1.0)
    assert all(label.split("/")[0] in ("burst", "held") for label in shares)


def test_idle_while_pending_split_job_by_job_is_the_metrics_figure(causes: CauseRun) -> None:
    idle = causes.idle
    assert idle is not None and causes.metrics is not None and idle.gap_gpu_s > 0
    assert idle.share == causes.metrics["idle_while_pending"]
    for parts in idle.by.values():
        assert sum(parts.values()) == pytest.approx(idle.gap_gpu_s)


def reference_idle_while_pending(
    samples: list[CycleSample], nodes: Mapping[str, Node], policy: Policy, capacity: tuple, window: tuple
) -> float:
    """``idle_pending.idle_while_pending`` as it was before ``cycle_matches`` and ``held_s`` were drawn out of it,
    verbatim, over the verbatim ``cycle_gap`` of test_causes."""

    total = capacity_gpu_s(capacity, window)
    gap_s = 0.0
    for i, sample in enumerate(samples):
        until = samples[i + 1].t if i + 1 < len(samples) else sample.t + policy.cycle_s
        held = max(0.0, min(until, window[1]) - max(sample.t, window[0]))
        if held > 0:
            gap_s += reference_cycle_gap(sample, nodes, policy) * held
    return round(gap_s / total, 6)


@pytest.mark.parametrize("mix", ["balanced", "serving"])
def test_the_metrics_figure_is_identical_to_the_one_before_the_split(mix: str) -> None:
    workload = workload_of(TINY, mix, 42)
    scenario, window = workload.scenario, workload.config.window
    log = CycleLog(window=window)
    result = replay(scenario, microcosm, speed=topology_speed(workload.cluster.fabric), cycles=log)
    nodes = {node.name: node for node in scenario.nodes}
    figure = idle_while_pending(log.samples, nodes, scenario.policy, result.capacity, window)
    assert figure > 0
    assert figure == reference_idle_while_pending(log.samples, nodes, scenario.policy, result.capacity, window)
    assert len(held_s(log.samples, window, scenario.policy.cycle_s)) == len(log.samples)


# -- the command ----------------------------------------------------------------------------------------------------


def bench(*args: str) -> str:
    out = StringIO()
    call_command("bench", "causes", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_registered_and_left_out_of_the_default_sweep() -> None:
    assert benchmarks()["causes"] is causes_cli
    runs = {run.key: run.slow for run in all_cli.runs()}
    assert runs["causes"] is True


@untraced
def test_the_table_and_the_json_name_the_command(trace: Path) -> None:
    options = {"hours": 0.25, "warmup_hours": 0.05, "seeds": "2", "mix": ["serving"], "trace": trace, "jobs": 1}
    outcome = causes_cli.run(options)
    lines = outcome.table.splitlines()
    assert lines[0].startswith("Causes (B2): microcosm on mixed-64 at load 1.2, mixes serving, seeds 2")
    assert lines[1] == f"command: python manage.py bench causes --mix serving --seeds 2 --trace {trace}"
    for row in ("  share of that wait by the engine's blocker:", "    capacity", "idle while pending"):
        assert any(line.startswith(row) for line in lines), row
    assert any(line.startswith("  seed 2: svc-") for line in lines)
    payload = json.loads(json.dumps(causes_cli.run({**options, "json": True}).payload))
    assert payload["command"].endswith("--json") and payload["policy"] == "microcosm"
    serving = payload["mixes"]["serving"]
    assert serving["median"]["production.kind.capacity"]["median"] > 0
    assert serving["seeds"]["2"]["status"] == "ok"


def test_another_load_of_the_headline_is_named_in_the_title_and_the_command(trace: Path) -> None:
    options = {"hours": 0.1, "warmup_hours": 0.05, "seeds": "2", "mix": ["balanced"], "trace": trace, "load": 1.6}
    outcome = causes_cli.run(options)
    lines = outcome.table.splitlines()
    assert lines[0].startswith("Causes (B2): microcosm on mixed-64 at load 1.6, mixes balanced, seeds 2")
    assert lines[1] == f"command: python manage.py bench causes --mix balanced --seeds 2 --load 1.6 --trace {trace}"
    assert outcome.payload["load"] == 1.6


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--load", "0"], "0 must be greater than 0"),
        (["--mix", "busy"], "unknown mix busy; known: balanced, serving or both"),
        (["--seeds", "46-42"], "--seeds '46-42': range '46-42' must go up"),
        (["--seeds", "x"], "--seeds 'x': 'x' is not a seed"),
        (["--jobs", "0"], "0 must be at least 1"),
        (["--trace", "/nonexistent/philly_runtime.csv"], "/nonexistent/philly_runtime.csv: no such file"),
        (["--hours", "1"], "unrecognized arguments: --hours 1"),
    ],
)
def test_a_mistake_on_the_command_line_is_one_clear_line(args: list[str], message: str) -> None:
    with pytest.raises(CommandError) as error:
        bench(*args)
    assert message in str(error.value) and "\n" not in str(error.value)
