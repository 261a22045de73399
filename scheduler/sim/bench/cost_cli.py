"""``bench cost [--load L] [--seed N] [--hours H] [--warmup-hours W] [--pool-factor K]
[--interruptions-per-node-day R] [--stress-interruptions-per-node-day R] [--trace PATH] [--json]`` (spec B4).

The B2 workload bought three ways — on-demand only, Microcosm's tiers, and the tiers with spot stressed —
protocol and billing rules in :mod:`scheduler.sim.bench.cost`. The defaults (4 h measured after 1 h of warm-up)
run in about five minutes on 2 cores.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import plotly.graph_objects as go

from scheduler.sim.bench.cost import (
    FACTS_INTERRUPTIONS_PER_NODE_DAY,
    STRESS_INTERRUPTIONS_PER_NODE_DAY,
    CostConfig,
    CostResult,
    TierRun,
    run_cost,
)
from scheduler.sim.bench.machine import RunRecord, started_line, with_flags
from scheduler.sim.bench.mixed_cli import load_runtimes, non_negative_float, positive_float
from scheduler.sim.bench.registry import BenchUsageError, Claim, Outcome, positive
from scheduler.sim.prices import PRICES_AS_OF
from scheduler.sim.workload.clusters import cluster_named
from scheduler.sim.workload.mixed import WorkloadConfig, describe, generate

NAME = "cost"
HELP = "On-demand only vs Microcosm's reserved/spot/on-demand tiers on the B2 workload (spec B4)."
DEFAULT_SEED = 42
DEFAULT_LOAD = 1.2
DEFAULT_HOURS = 4.0
DEFAULT_WARMUP_HOURS = 1.0
TARGET_SAVINGS = 0.40


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--load", type=positive_float, default=DEFAULT_LOAD, help="Offered load on mixed-64 (1.2).")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"Workload seed (default {DEFAULT_SEED}).")
    parser.add_argument("--hours", type=positive_float, default=DEFAULT_HOURS, help="Measured hours (default 4).")
    parser.add_argument(
        "--warmup-hours", type=non_negative_float, default=DEFAULT_WARMUP_HOURS, help="Excluded warm-up (default 1)."
    )
    parser.add_argument(
        "--pool-factor", type=positive, default=2, help="Copies of mixed-64's servers in the elastic pool (2)."
    )
    parser.add_argument(
        "--interruptions-per-node-day",
        type=non_negative_float,
        default=FACTS_INTERRUPTIONS_PER_NODE_DAY,
        help=f"Spot interruptions per server-day in run B (default {FACTS_INTERRUPTIONS_PER_NODE_DAY}: > 20 %%/month).",
    )
    parser.add_argument(
        "--stress-interruptions-per-node-day",
        type=non_negative_float,
        default=STRESS_INTERRUPTIONS_PER_NODE_DAY,
        help=f"Spot interruptions per server-day in run C (default {STRESS_INTERRUPTIONS_PER_NODE_DAY:g}).",
    )
    parser.add_argument("--trace", type=Path, help="Philly run times (default ../shared/traces/philly/...).")


def run(options: dict[str, Any]) -> Outcome:
    try:
        config = WorkloadConfig(
            seed=options.get("seed", DEFAULT_SEED),
            load=options.get("load") or DEFAULT_LOAD,
            hours=options.get("hours") or DEFAULT_HOURS,
            warmup_s=3600.0 * _or(options.get("warmup_hours"), DEFAULT_WARMUP_HOURS),
        )
        cost = CostConfig(
            pool_factor=options.get("pool_factor") or 2,
            interruptions_per_node_day=_or(options.get("interruptions_per_node_day"), FACTS_INTERRUPTIONS_PER_NODE_DAY),
            stress_interruptions_per_node_day=_or(
                options.get("stress_interruptions_per_node_day"), STRESS_INTERRUPTIONS_PER_NODE_DAY
            ),
        )
    except ValueError as error:
        raise BenchUsageError(str(error)) from None
    trace, runtimes = load_runtimes(options.get("trace"))
    cluster = cluster_named("mixed-64")
    workload = generate(cluster, config, runtimes)
    command = (
        f"python manage.py bench cost --load {config.load:g} --seed {config.seed} --hours {config.hours:g} "
        f"--warmup-hours {config.warmup_s / 3600:g} --pool-factor {cost.pool_factor} "
        f"--interruptions-per-node-day {cost.interruptions_per_node_day:g} "
        f"--stress-interruptions-per-node-day {cost.stress_interruptions_per_node_day:g}"
    )
    record = RunRecord(NAME, with_flags(command, options, "json"))
    result = run_cost(workload, cost)
    claims = _claims(result)
    payload = {
        **record.head(),
        "seed": config.seed,
        "load": config.load,
        "prices": PRICES_AS_OF,
        "workload": {"description": describe(workload), "trace": str(trace)},
        "pool_gpus": cluster.gpus * cost.pool_factor,
        "window_s": list(config.window),
        "reserved_servers": result.reserved_servers,
        "runs": {run.name: {**run.as_dict(), "savings": round(result.savings(run), 4)} for run in result.runs},
        "claims": [{"claim": c.claim, "measured": c.measured, "reproduced": c.reproduced} for c in claims],
    }
    return Outcome(
        payload=payload,
        table=_table(payload, result),
        title="Cost (B4): on-demand only vs capacity tiers",
        figures=(_figure(result),),
        claims=claims,
    )


def _or(value: float | None, default: float) -> float:
    return default if value is None else value


def _claims(result: CostResult) -> tuple[Claim, ...]:
    tiered = result.runs[1]
    savings = result.savings(tiered)
    misses = sum(run.slo_misses for run in result.runs[1:])
    return (
        Claim(
            "B4: tiers cost ≥ 40 % less than on-demand only",
            f"{savings:.1%} less (${tiered.total_cost:,.2f} vs ${result.runs[0].total_cost:,.2f})",
            savings >= TARGET_SAVINGS,
        ),
        Claim(
            "B4: no production-inference SLO miss with tiers (start within one cycle)",
            f"{misses} misses in the tiered runs (on-demand only: {result.runs[0].slo_misses})",
            misses == 0,
        ),
    )


def _table(payload: dict[str, Any], result: CostResult) -> str:
    head = [
        f"Cost (B4): seed {payload['seed']}, load {payload['load']:g} on mixed-64, elastic pool of "
        f"{payload['pool_gpus']} GPUs, window {payload['window_s'][0] / 3600:g}–{payload['window_s'][1] / 3600:g} h",
        f"command: {payload['command']}",
        started_line(payload),
        f"prices: {payload['prices']}; workload: {payload['workload']['description']}",
        "reserved servers: " + ", ".join(f"{m} × {n}" for m, n in result.reserved_servers.items()),
        "",
    ]
    rows: list[tuple[str, Any]] = [
        ("total cost", lambda r: f"${r.total_cost:,.2f}"),
        ("  reserved (whole window)", lambda r: f"${r.reserved_cost:,.2f}"),
        ("  metered spot + on-demand", lambda r: f"${r.metered_cost:,.2f}"),
        ("savings vs on-demand only", lambda r: f"{result.savings(r):.1%}"),
        ("useful GPU-hours", lambda r: f"{r.useful_gpu_hours:,.1f}"),
        ("cost per useful GPU-hour", lambda r: f"${r.cost_per_useful_gpu_hour:,.3f}"),
        ("lost GPU-hours (preemption)", lambda r: f"{r.lost_gpu_hours:,.2f}"),
        ("spot interruptions", lambda r: f"{r.interruptions}"),
        ("production SLO misses", lambda r: f"{r.slo_misses} of {r.production_services}"),
        ("production wait p95", lambda r: "-" if r.production_wait_p95_s is None else f"{r.production_wait_p95_s:g} s"),
        ("completed jobs", lambda r: f"{r.completed}"),
        ("plan repairs", lambda r: f"{r.plan_repairs}"),
        ("replay wall time", lambda r: f"{r.wall_s:.0f} s"),
    ]
    names = [run.name for run in result.runs]
    cells = [[render(run) for run in result.runs] for _, render in rows]
    label_width = max(len(label) for label, _ in rows)
    widths = [max(len(name), *(len(row[i]) for row in cells)) for i, name in enumerate(names)]
    lines = [" " * label_width + "  " + "  ".join(f"{n:>{w}}" for n, w in zip(names, widths, strict=True))]
    lines += [
        f"{label:<{label_width}}  " + "  ".join(f"{c:>{w}}" for c, w in zip(row, widths, strict=True))
        for (label, _), row in zip(rows, cells, strict=True)
    ]
    return "\n".join(head + lines)


def _figure(result: CostResult) -> go.Figure:
    """Cost by tier, one bar per way of buying."""
    runs: list[TierRun] = list(result.runs)
    figure = go.Figure(
        [
            go.Bar(name="reserved", x=[r.name for r in runs], y=[r.reserved_cost for r in runs]),
            go.Bar(name="spot + on-demand (metered)", x=[r.name for r in runs], y=[r.metered_cost for r in runs]),
        ]
    )
    figure.update_layout(barmode="stack", title="Cost of the same work by tier", yaxis_title="USD over the window")
    return figure
