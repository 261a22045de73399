"""``bench scale`` on tiny sizes: the synthetic cluster is deterministic and valid, the
measurement reports every figure, and the command's JSON and table have their shape. No timing assertions:
benchmarks are never timed tests (DESIGN.md §4)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from scheduler.core import Policy
from scheduler.core.gpus.catalog import GPU_MODEL_BY_NAME, validate_layout
from scheduler.core.gpus.units import FULL_GPU_MILLI
from scheduler.core.model.cluster_state import ClusterState
from scheduler.core.model.plan import Bind, Plan, Reject, Waiting
from scheduler.core.model.snapshot import Slot, Snapshot
from scheduler.core.model.vocabulary import JobKind
from scheduler.core.sizing.layouts import named_layout
from scheduler.sim.bench import ClusterShape, scale, synthetic_snapshot
from scheduler.sim.bench.scale import ScaleResult, busy_fraction, measure, plan_problem, target_s

ROOT = Path(__file__).resolve().parents[3]
SMALL = ClusterShape(nodes=12, pending=60, seed=7, nodes_per_leaf=4)
MEDIUM = ClusterShape(nodes=200, pending=2_000, seed=3, nodes_per_leaf=8)


def _run(*args: str) -> str:
    out = StringIO()
    call_command("bench", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


# -- the generator ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [SMALL, MEDIUM])
def test_same_shape_and_seed_give_the_same_snapshot(shape: ClusterShape) -> None:
    assert synthetic_snapshot(shape) == synthetic_snapshot(shape)


def test_the_snapshot_does_not_depend_on_string_hashing() -> None:
    """Two processes with different hash seeds build the same snapshot (str hashing is salted per process)."""
    code = (
        "import hashlib; from scheduler.sim.bench import ClusterShape, synthetic_snapshot; "
        "print(hashlib.sha256(repr(synthetic_snapshot(ClusterShape(nodes=40, pending=300, seed=9))).encode())"
        ".hexdigest())"
    )
    digests = {
        subprocess.run(
            [sys.executable, "-c", code],
            cwd=ROOT,
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2")
    }
    assert len(digests) == 1


def test_another_seed_gives_another_snapshot() -> None:
    other = ClusterShape(nodes=SMALL.nodes, pending=SMALL.pending, seed=SMALL.seed + 1, nodes_per_leaf=4)
    assert synthetic_snapshot(SMALL) != synthetic_snapshot(other)


@pytest.mark.parametrize("shape", [SMALL, MEDIUM, ClusterShape(nodes=5, pending=10, gpus_per_node=3, seed=1)])
def test_the_snapshot_is_valid(shape: ClusterShape) -> None:
    """Every MIG layout is legal, and every running slot is free when placed job after job onto an empty
    cluster with the engine's own rules (:meth:`ClusterState.place` raises on a conflict)."""
    snapshot = synthetic_snapshot(shape)
    assert len(snapshot.nodes) == shape.nodes
    assert all(node.gpu_count == shape.gpus_per_node for node in snapshot.nodes)
    for node in snapshot.nodes:
        for layout in node.mig:
            if layout:
                assert list(layout) == validate_layout(node.gpu_model, layout)
                assert layout == named_layout(node.gpu_model, "all-balanced")
        assert not (node.sharing and any(node.mig)), "time-slicing is for GPUs with MIG off"
    state = ClusterState(Snapshot(nodes=snapshot.nodes, teams=snapshot.teams))
    seen: set[tuple[str, int, int | None]] = set()
    for running in snapshot.running:
        assert running.job.replicas == len(running.slots)
        state.place(running.job, running.slots)  # raises if any slot is held already
        for slot in (s for replica in running.slots for s in replica):
            if slot.milli == FULL_GPU_MILLI:
                key = (slot.node, slot.gpu, slot.mig_start)
                assert key not in seen, f"{key} held twice within one job"
                seen.add(key)
            else:
                assert state.nodes[slot.node].sharing
    assert len({r.job.id for r in snapshot.running}) == len(snapshot.running)


def test_the_backlog_has_its_size_ids_and_teams() -> None:
    snapshot = synthetic_snapshot(MEDIUM)
    ids = [job.id for job in snapshot.pending]
    assert len(ids) == MEDIUM.pending == len(set(ids))
    assert not set(ids) & {r.job.id for r in snapshot.running}
    teams = {team.name for team in snapshot.teams}
    assert len(teams) == MEDIUM.teams
    assert {job.team for job in snapshot.pending} <= teams
    assert {r.job.team for r in snapshot.running} <= teams


def test_the_cluster_and_backlog_mix_every_kind_of_work() -> None:
    snapshot = synthetic_snapshot(MEDIUM)
    assert {node.gpu_model for node in snapshot.nodes} == {"A100-SXM4-80GB", "H100-SXM5-80GB", "A100-PCIE-40GB"}
    assert {str(node.tier) for node in snapshot.nodes} == {"reserved", "on-demand", "spot"}
    assert any(node.mig for node in snapshot.nodes) and any(node.sharing for node in snapshot.nodes)
    assert len({node.leaf for node in snapshot.nodes}) == MEDIUM.nodes // MEDIUM.nodes_per_leaf
    assert 0.35 < busy_fraction(snapshot) < 0.65
    assert any(r.job.replicas > 1 for r in snapshot.running), "multi-node gangs run"
    running_ways = Counter(_way(r.job.request) for r in snapshot.running)
    assert set(running_ways) == {"gpus", "mig_profile", "gpu_milli"}
    pending_ways = Counter(_way(job.request) for job in snapshot.pending)
    assert set(pending_ways) == {"gpus", "mig_profile", "memory_gib", "model", "gpu_milli"}
    assert {job.kind for job in snapshot.pending} == set(JobKind)
    assert any(job.replicas > 1 for job in snapshot.pending)
    assert {job.preemptible for job in snapshot.pending} == {True, False}
    assert not any(job.preemptible for job in snapshot.pending if job.priority == "production")


def test_non_preemptible_running_work_stays_within_every_guarantee() -> None:
    snapshot = synthetic_snapshot(MEDIUM)
    state = ClusterState(Snapshot(nodes=snapshot.nodes, teams=snapshot.teams))
    for running in snapshot.running:
        if not running.job.preemptible:
            state.place(running.job, running.slots)
    for team in snapshot.teams:
        held = state.team_units(team.name)
        for key, gpus in team.guaranteed:
            assert held.get(key, 0) <= round(gpus * 7000), (team.name, key)


def test_a_shape_needs_nodes_gpus_and_teams() -> None:
    with pytest.raises(ValueError, match="at least one node"):
        ClusterShape(nodes=0, pending=1)


def _way(request: object) -> str:
    for name in ("gpus", "mig_profile", "memory_gib", "model", "gpu_milli"):
        if getattr(request, name) is not None:
            return name
    raise AssertionError(request)  # pragma: no cover - Request refuses this


# -- the measurement -------------------------------------------------------------------------------------


def test_measure_reports_every_figure_with_a_fake_clock() -> None:
    ticks = iter(range(100))
    result = measure(SMALL, repeat=2, clock=lambda: float(next(ticks)))
    assert result.snapshot_build_s == 1.0 and result.wall_s == (1.0, 1.0)
    assert result.median_s == result.max_s == 1.0
    assert set(result.counts) == {"binds", "evictions", "rejections", "reconfigurations", "waiting"}
    assert result.decisions == sum(result.counts.values()) == result.decisions_per_s
    assert result.counts["binds"] + result.counts["rejections"] + result.counts["waiting"] == SMALL.pending
    assert result.deterministic and result.plan_problem is None
    assert result.tracemalloc_peak_mib > 0 and result.max_rss_mib > 0
    assert result.target_s is None and result.target_met is None


def test_measure_notices_a_plan_that_changes_between_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    plans = iter([Plan(), Plan(rejections=(Reject("x", "no"),)), Plan()])
    monkeypatch.setattr(scale, "plan_cycle", lambda snapshot, policy, now: next(plans))
    result = measure(SMALL, repeat=2, clock=lambda: 0.0)
    assert not result.deterministic
    assert "neither bound" in str(result.plan_problem)
    assert result.decisions_per_s == float("inf")  # a clock that never moves


def test_measure_needs_a_run() -> None:
    with pytest.raises(ValueError, match="repeat"):
        measure(SMALL, repeat=0)


@pytest.mark.parametrize(
    ("nodes", "gpus", "pending", "target", "walls", "met"),
    [
        (1_000, 8, 10_000, 0.5, (0.4, 0.45), True),
        (1_000, 8, 10_000, 0.5, (0.4, 0.6), False),
        (5_000, 8, 50_000, 2.3, (2.2,), True),
        (1_000, 4, 10_000, None, (0.5,), None),
        (1_000, 8, 9_999, None, (0.5,), None),
    ],
)
def test_targets_are_the_issues_sizes_and_every_run_must_meet_them(
    nodes: int, gpus: int, pending: int, target: float | None, walls: tuple[float, ...], met: bool | None
) -> None:
    shape = ClusterShape(nodes=nodes, pending=pending, gpus_per_node=gpus)
    assert target_s(shape) == target
    result = ScaleResult(shape, 0, 0.5, 0.1, walls, 1.0, 1.0, {"binds": 1})
    assert result.target_met is met


def test_plan_problem_finds_a_double_booked_slot_and_an_unanswered_job() -> None:
    snapshot = synthetic_snapshot(SMALL)
    held = next(r.slots for r in snapshot.running if r.job.request.gpus is not None)
    first = snapshot.pending[0].id
    assert plan_problem(snapshot, Plan(binds=(Bind(first, held),))).startswith("ValueError")
    assert "neither bound" in str(plan_problem(snapshot, Plan()))
    nowhere = Plan(binds=(Bind(first, ((Slot("nowhere", 0),),)),))
    assert str(plan_problem(snapshot, nowhere)).startswith("ValueError")


def test_plan_problem_finds_a_job_answered_twice() -> None:
    snapshot = synthetic_snapshot(SMALL)
    answers = [Waiting(job.id, i + 1, 1, "waits") for i, job in enumerate(snapshot.pending)]
    plan = Plan(rejections=(Reject(snapshot.pending[0].id, "no"),), waiting=tuple(answers))
    assert "more than once" in str(plan_problem(snapshot, plan))
    assert plan_problem(snapshot, Plan(waiting=tuple(answers))) is None


# -- the command -----------------------------------------------------------------------------------------


def test_bench_scale_json_shape() -> None:
    payload = json.loads(_run("scale", "--json", "--nodes", "10", "--pending", "50", "--repeat", "1"))
    assert payload["benchmark"] == "scale"
    assert payload["command"] == (
        "python manage.py bench scale --nodes 10 --gpus-per-node 8 --pending 50 --seed 42 --repeat 1 --json"
    )
    assert set(payload) == {
        "benchmark", "command", "date", "machine", "seed", "repeat", "preemption_search_per_team", "engine", "sizes"
    }  # fmt: skip
    assert payload["engine"] == "pure Python"  # the suite runs the engine as source (test_engine.py)
    assert payload["preemption_search_per_team"] == Policy().preemption_search_per_team == 100
    assert set(payload["machine"]) == {"nproc", "cpu_model", "python", "load_average_at_start", "load_average_at_end"}
    (size,) = payload["sizes"]
    assert (size["nodes"], size["gpus_per_node"], size["gpus"], size["pending"]) == (10, 8, 80, 50)
    assert set(size["wall_s"]) == {"median", "max", "runs"} and len(size["wall_s"]["runs"]) == 1
    assert set(size["decisions"]) == {"binds", "evictions", "rejections", "reconfigurations", "waiting", "total"}
    assert size["decisions"]["total"] == sum(v for k, v in size["decisions"].items() if k != "total")
    for key in ("snapshot_build_s", "tracemalloc_peak_mib", "max_rss_mib", "decisions_per_s", "busy_gpu_fraction"):
        assert isinstance(size[key], int | float)
    assert size["target_s"] is None and size["target_met"] is None
    assert size["deterministic"] is True and size["plan_valid"] is True and size["plan_problem"] is None


def test_bench_scale_table_prints_the_command_and_the_figures() -> None:
    text = _run("scale", "--nodes", "6", "--gpus-per-node", "4", "--seed", "5", "--repeat", "1")
    assert (
        "command: python manage.py bench scale --nodes 6 --gpus-per-node 4 --pending 60 --seed 5 --repeat 1\n" in text
    )
    for label in ("cycle wall, median", "tracemalloc peak", "process max RSS", "decisions / s", "evictions"):
        assert label in text
    assert "6 × 4" in text
    assert "\nengine: pure Python\n" in text


def test_bench_scale_plans_with_the_preemption_search_bound_it_is_given() -> None:
    args = ("scale", "--json", "--nodes", "10", "--pending", "50", "--repeat", "1")
    payload = json.loads(_run(*args, "--preemption-search-per-team", "0"))
    assert payload["command"].endswith("--repeat 1 --preemption-search-per-team 0 --json")
    assert payload["preemption_search_per_team"] == 0
    unbounded = json.loads(_run(*args, "--preemption-search-per-team", "none"))
    assert unbounded["command"].endswith("--repeat 1 --preemption-search-per-team none --json")
    assert unbounded["preemption_search_per_team"] is None
    # Bound 0: no non-production job tries a preemption, so there are at most as many evictions.
    assert payload["sizes"][0]["decisions"]["evictions"] <= unbounded["sizes"][0]["decisions"]["evictions"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("scale", "--nodes", "3", "--preemption-search-per-team", "-1"), "must be at least 0"),
        (("scale", "--nodes", "3", "--preemption-search-per-team", "all"), "'all' is not a whole number"),
        (("scale", "--pending", "10"), "--pending needs --nodes"),
        (("scale", "--nodes", "0"), "must be at least 1"),
        (("scale", "--nodes", "x"), "not a whole number"),
        (("scale", "--nodes", "3", "--pending", "-1"), "must be at least 0"),
    ],
)
def test_bench_scale_refuses_bad_arguments(args: tuple[str, ...], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        _run(*args)


def test_bench_needs_a_benchmark() -> None:
    with pytest.raises(CommandError):
        _run()


def test_every_catalog_model_of_the_mix_has_a_balanced_layout() -> None:
    for model in ("A100-SXM4-80GB", "H100-SXM5-80GB", "A100-PCIE-40GB"):
        assert GPU_MODEL_BY_NAME[model].mig_capable and named_layout(model, "all-balanced")
