"""``bench scale [--nodes N --gpus-per-node G --pending P --seed S --repeat R --preemption-search-per-team K] [--json]``
(B5).

One scheduling cycle of the real engine on a synthetic cluster. Without ``--nodes`` it runs the two target
sizes, 1,000 × 8 GPUs with 10,000 pending jobs and 5,000 × 8 with 50,000 (targets 0.5 s and 2.3 s,
``docs/benchmarks/scale.md``); ``--pending`` defaults to 10 per node. ``--preemption-search-per-team`` plans
with the policy's bound on preemption searches (``scheduler/core/rules/search_bound.py``; default unbounded).
The report names the engine that ran: pure Python, or compiled by mypyc (:mod:`scheduler.engine`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

import plotly.graph_objects as go

from scheduler.core import Policy
from scheduler.engine import engine_label
from scheduler.sim.bench.machine import RunRecord, started_line, with_flags
from scheduler.sim.bench.registry import BenchUsageError, Claim, Outcome, positive, whole_number
from scheduler.sim.bench.scale import DEFAULT_SIZES, PENDING_PER_NODE, ScaleResult, measure
from scheduler.sim.bench.search_bound_option import add_search_bound, search_bound, search_bound_flag
from scheduler.sim.bench.synthetic import ClusterShape

NAME = "scale"
HELP = "Time one scheduling cycle of the engine on a synthetic cluster (B5)."
DEFAULT_SEED = 42
DEFAULT_REPEAT = 3
DEFAULT_GPUS_PER_NODE = 8


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=positive, help="Nodes (default: the two target sizes, 1000 and 5000).")
    parser.add_argument(
        "--gpus-per-node", type=positive, default=DEFAULT_GPUS_PER_NODE, help="GPUs per node (default 8)."
    )
    parser.add_argument(
        "--pending", type=whole_number(0), help=f"Pending jobs (needs --nodes; default {PENDING_PER_NODE} per node)."
    )
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"Workload seed (default {DEFAULT_SEED}).")
    parser.add_argument(
        "--repeat", type=positive, default=DEFAULT_REPEAT, help=f"Timed cycles per size (default {DEFAULT_REPEAT})."
    )
    add_search_bound(parser)


def run(options: dict[str, Any]) -> Outcome:
    nodes, pending = options.get("nodes"), options.get("pending")
    if pending is not None and nodes is None:
        raise BenchUsageError("--pending needs --nodes (without --nodes the two target sizes run)")
    gpus = options.get("gpus_per_node") or DEFAULT_GPUS_PER_NODE
    seed = options.get("seed", DEFAULT_SEED)
    repeat = options.get("repeat") or DEFAULT_REPEAT
    bound = search_bound(options)
    policy = Policy(preemption_search_per_team=bound)
    if nodes is None:
        sizes: Sequence[tuple[int, int]] = DEFAULT_SIZES
        command = f"python manage.py bench scale --gpus-per-node {gpus} --seed {seed} --repeat {repeat}"
    else:
        pending = PENDING_PER_NODE * nodes if pending is None else pending
        sizes = ((nodes, pending),)
        command = (
            f"python manage.py bench scale --nodes {nodes} --gpus-per-node {gpus} --pending {pending} "
            f"--seed {seed} --repeat {repeat}"
        )
    record = RunRecord(NAME, with_flags(command + search_bound_flag(bound), options, "json"))
    results = [
        measure(
            ClusterShape(nodes=size_nodes, pending=size_pending, gpus_per_node=gpus, seed=seed),
            repeat=repeat,
            policy=policy,
        )
        for size_nodes, size_pending in sizes
    ]
    payload = {
        **record.head(),
        "seed": seed,
        "repeat": repeat,
        "preemption_search_per_team": bound,
        "engine": engine_label(),
        "sizes": [result.as_dict() for result in results],
    }
    return Outcome(
        payload=payload,
        table=_table(payload, results),
        title="Scale (B5): one scheduling cycle",
        figures=(_figure(results),),
        claims=tuple(_claim(r) for r in results if r.target_s is not None),
    )


def _claim(result: ScaleResult) -> Claim:
    shape = result.shape
    return Claim(
        claim=f"one cycle on {shape.nodes:,} nodes × {shape.gpus_per_node} GPUs with {shape.pending:,} pending jobs "
        f"in ≤ {result.target_s:g} s",
        # Judged on the slowest run (every cycle must be within the target), so the figure names it too.
        measured=f"slowest {result.max_s:.3f} s of {len(result.wall_s)} runs (median {result.median_s:.3f} s)",
        reproduced=result.target_met,
    )


def _figure(results: Sequence[ScaleResult]) -> go.Figure:
    """Median cycle time per size beside its target."""
    labels = [f"{r.shape.nodes:,} × {r.shape.gpus_per_node}, {r.shape.pending:,} pending" for r in results]
    figure = go.Figure(go.Bar(x=labels, y=[r.median_s for r in results], name="median cycle"))
    targets = [r.target_s for r in results]
    if any(t is not None for t in targets):
        figure.add_trace(go.Scatter(x=labels, y=targets, mode="markers", name="target", marker={"symbol": "line-ew"}))
    figure.update_layout(title="One scheduling cycle", yaxis_title="wall time (s)")
    return figure


def _table(payload: dict[str, Any], results: Sequence[ScaleResult]) -> str:
    head = [
        "Scale (B5): one plan_cycle of the engine on a synthetic cluster "
        f"(seed {payload['seed']}, {payload['repeat']} timed runs per size)",
        f"command: {payload['command']}",
        f"engine: {payload['engine']}",
        started_line(payload),
        "",
    ]

    def met(result: ScaleResult) -> str:
        return {None: "-", True: "yes", False: "NO"}[result.target_met]

    rows: list[tuple[str, Callable[[ScaleResult], str]]] = [
        ("size", lambda r: f"{r.shape.nodes:,} × {r.shape.gpus_per_node}"),
        ("pending jobs", lambda r: f"{r.shape.pending:,}"),
        ("running jobs", lambda r: f"{r.running_jobs:,}"),
        ("busy GPU capacity", lambda r: f"{r.busy_gpu_fraction:.1%}"),
        ("snapshot build (not timed)", lambda r: f"{r.snapshot_build_s:.2f} s"),
        ("cycle wall, median", lambda r: f"{r.median_s:.3f} s"),
        ("cycle wall, max", lambda r: f"{r.max_s:.3f} s"),
        ("target", lambda r: f"≤ {r.target_s:g} s" if r.target_s is not None else "-"),
        ("target met", met),
        ("tracemalloc peak (cycle)", lambda r: f"{r.tracemalloc_peak_mib:.1f} MiB"),
        ("process max RSS", lambda r: f"{r.max_rss_mib:.1f} MiB"),
        ("decisions / s", lambda r: f"{r.decisions_per_s:,.0f}"),
        ("binds", lambda r: f"{r.counts['binds']:,}"),
        ("evictions", lambda r: f"{r.counts['evictions']:,}"),
        ("rejections", lambda r: f"{r.counts['rejections']:,}"),
        ("reconfigurations", lambda r: f"{r.counts['reconfigurations']:,}"),
        ("waiting", lambda r: f"{r.counts['waiting']:,}"),
        ("same plan every run", lambda r: "yes" if r.deterministic else "NO"),
        ("plan applies cleanly", lambda r: "yes" if r.plan_problem is None else f"NO: {r.plan_problem}"),
    ]
    label_width = max(len(label) for label, _ in rows)
    cells = [[render(result) for result in results] for _, render in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(results))]
    lines = [
        f"{label:<{label_width}}  " + "  ".join(f"{cell:>{width}}" for cell, width in zip(row, widths, strict=True))
        for (label, _), row in zip(rows, cells, strict=True)
    ]
    return "\n".join(head + lines)
