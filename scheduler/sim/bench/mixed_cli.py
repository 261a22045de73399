"""``bench mixed [--load L] [--seed N] [--cluster mixed-64] [--hours H] [--warmup-hours W] [--policies ...]
[--trace PATH] [--strict] [--json]`` (spec/benchmarks.md B2).

A seeded mixed inference + training workload (:mod:`scheduler.sim.workload.mixed`) on ``mixed-64``, replayed
by every policy side by side; figures over the window after the warm-up (:mod:`scheduler.sim.metrics`). The
defaults (8 h measured after 2 h of warm-up, 10 s cycles) run in about 3–4 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import plotly.graph_objects as go

from scheduler.core.vocabulary import Priority
from scheduler.sim.bench.machine import RunRecord, started_line, with_flags
from scheduler.sim.bench.mixed_run import POLICY_ORDER, PolicyResult, check_policies, run_policy
from scheduler.sim.bench.registry import BenchUsageError, Claim, Outcome
from scheduler.sim.traces import TraceError
from scheduler.sim.traces.philly import load_philly_runtimes
from scheduler.sim.workload.clusters import CLUSTERS, cluster_named
from scheduler.sim.workload.mixed import WorkloadConfig, default_philly_path, describe, generate, realised_load

NAME = "mixed"
HELP = "Mixed inference + training cluster over time, every policy side by side (spec B2)."
DEFAULT_SEED = 42
DEFAULT_LOAD = 1.2
DEFAULT_HOURS = 8.0
DEFAULT_WARMUP_HOURS = 2.0
TARGET_EFFECTIVE = 0.80
TARGET_OVER_NAIVE = 2.0


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{value:g} must be greater than 0")
    return value


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value:g} must not be negative")
    return value


def policy_list(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--load", type=positive_float, default=DEFAULT_LOAD, help="Offered load (default 1.2).")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"Workload seed (default {DEFAULT_SEED}).")
    parser.add_argument(
        "--cluster", default="mixed-64", help=f"Cluster (default mixed-64; known: {', '.join(CLUSTERS)})."
    )
    parser.add_argument(
        "--hours", type=positive_float, default=DEFAULT_HOURS, help="Measured hours after the warm-up (default 8)."
    )
    parser.add_argument(
        "--warmup-hours", type=non_negative_float, default=DEFAULT_WARMUP_HOURS, help="Excluded warm-up (default 2)."
    )
    parser.add_argument(
        "--policies", type=policy_list, default=list(POLICY_ORDER), help="Comma-separated (default: all five)."
    )
    parser.add_argument("--trace", type=Path, help="Philly run times (default ../shared/traces/philly/...).")
    parser.add_argument(
        "--strict", action="store_true", help="Stop a policy at its first plan violation instead of repairing it."
    )


def load_runtimes(path: Path | None) -> tuple[Path, tuple[float, ...]]:
    """The Philly sample; BenchUsageError says what to fix when the file is missing or malformed."""
    trace = path or default_philly_path()
    if not trace.is_file():
        raise BenchUsageError(
            f"--trace {trace}: no such file; pass the Philly run-time sample (philly_runtime.csv) with --trace"
        )
    try:
        return trace, load_philly_runtimes(trace)
    except TraceError as error:
        raise BenchUsageError(str(error)) from None


def run(options: dict[str, Any]) -> Outcome:
    try:
        policies = check_policies(options.get("policies") or list(POLICY_ORDER))
        cluster = cluster_named(options.get("cluster") or "mixed-64")
        config = WorkloadConfig(
            seed=options.get("seed", DEFAULT_SEED),
            load=options.get("load") or DEFAULT_LOAD,
            hours=options.get("hours") or DEFAULT_HOURS,
            warmup_s=3600.0 * (options.get("warmup_hours") if options.get("warmup_hours") is not None else 2.0),
        )
    except ValueError as error:
        raise BenchUsageError(str(error)) from None
    trace, runtimes = load_runtimes(options.get("trace"))
    workload = generate(cluster, config, runtimes)
    command = (
        f"python manage.py bench mixed --load {config.load:g} --seed {config.seed} --cluster {cluster.name} "
        f"--hours {config.hours:g} --warmup-hours {config.warmup_s / 3600:g} --policies {','.join(policies)}"
    )
    record = RunRecord(NAME, with_flags(command, options, "strict", "json"))
    results = [run_policy(workload, name, strict=bool(options.get("strict"))) for name in policies]
    payload = {
        **record.head(),
        "seed": config.seed,
        "load": config.load,
        "cluster": {"name": cluster.name, "gpus": cluster.gpus, "description": cluster.description},
        "workload": {
            "description": describe(workload),
            "jobs": len(workload.jobs),
            "arrivals_per_hour": round(workload.arrivals_per_hour, 3),
            "inference_probability": round(workload.inference_probability, 4),
            "realised_load": round(realised_load(workload), 4),
            "trace": str(trace),
        },
        "window_s": list(config.window),
        "cycle_s": workload.scenario.policy.cycle_s,
        "policies": {result.name: result.as_dict() for result in results},
    }
    claims = _claims(results, workload.scenario.policy.cycle_s)
    payload["claims"] = [{"claim": c.claim, "measured": c.measured, "reproduced": c.reproduced} for c in claims]
    return Outcome(
        payload=payload,
        table=_table(payload, results),
        figures=(_utilization_figure(results), _wait_figure(results)),
        claims=claims,
    )


def _by_name(results: Sequence[PolicyResult]) -> dict[str, PolicyResult]:
    return {result.name: result for result in results if result.metrics is not None}


def _claims(results: Sequence[PolicyResult], cycle_s: float) -> tuple[Claim, ...]:
    ok = _by_name(results)
    ours, naive = ok.get("microcosm"), ok.get("naive")
    claims = []
    if ours is not None:
        assert ours.metrics is not None
        effective = ours.metrics["effective_utilization"]
        claims.append(
            Claim("B2: microcosm effective utilization ≥ 80 % at this load", f"{effective:.1%}", effective >= 0.8)
        )
        if naive is not None:
            assert naive.metrics is not None
            base = naive.metrics["effective_utilization"]
            ratio = effective / base if base else float("inf")
            claims.append(
                Claim(
                    "B2: microcosm effective utilization ≥ 2× naive",
                    f"{ratio:.2f}× ({effective:.1%} vs {base:.1%})",
                    ratio >= TARGET_OVER_NAIVE,
                )
            )
        p95 = ours.metrics["production_inference_wait_s"]["p95"]
        claims.append(
            Claim(
                f"B2: production inference p95 wait within one scheduling cycle ({cycle_s:g} s)",
                "no production inference submitted in the window" if p95 is None else f"{p95:g} s",
                None if p95 is None else p95 <= cycle_s,
            )
        )
    return tuple(claims)


def _pct(value: float) -> str:
    return f"{value:.1%}"


def _wait(metrics: dict[str, Any], cls: str, key: str) -> str:
    stats = metrics["queue_wait_s"].get(cls)
    if stats is None or stats[key] is None:
        return "-"
    return f"{stats[key]:,.0f} s"


def _table(payload: dict[str, Any], results: Sequence[PolicyResult]) -> str:
    workload = payload["workload"]
    head = [
        f"Mixed (B2): {payload['cluster']['name']} at load {payload['load']:g}, seed {payload['seed']}, "
        f"window {payload['window_s'][0] / 3600:g}–{payload['window_s'][1] / 3600:g} h",
        f"command: {payload['command']}",
        started_line(payload),
        f"cluster: {payload['cluster']['description']}",
        f"workload: {workload['description']}",
        "",
    ]
    rows: list[tuple[str, Any]] = [
        ("effective utilization", lambda m: _pct(m["effective_utilization"])),
        ("allocation ratio", lambda m: _pct(m["allocation_ratio"])),
        ("training throughput (GPU-h/h)", lambda m: f"{m['training_throughput']:.2f}"),
        ("completed", lambda m: str(m["completed"])),
        ("evictions", lambda m: str(m["evictions"])),
        ("lost GPU-hours", lambda m: f"{m['lost_gpu_hours']:.1f}"),
        ("prod. inference wait p95", lambda m: _fmt_s(m["production_inference_wait_s"]["p95"])),
        ("prod. inference wait max", lambda m: _fmt_s(m["production_inference_wait_s"]["max"])),
    ]
    for cls in Priority:
        rows.append(
            (f"{cls.value} wait p50 / p95", lambda m, c=cls.value: f"{_wait(m, c, 'p50')} / {_wait(m, c, 'p95')}")
        )
        rows.append(
            (
                f"{cls.value} still waiting",
                lambda m, c=cls.value: str(m["queue_wait_s"].get(c, {}).get("still_waiting", "-")),
            )
        )
    rows.append(("rejected", lambda m: str(m["rejected"])))
    label_width = max(len(label) for label, _ in [*rows, ("policy", None), ("plan repairs", None)])
    columns = [result.name for result in results]
    cells = []
    for _label, render in rows:
        cells.append([render(r.metrics) if r.metrics is not None else "FAILED" for r in results])
    cells.append([str(r.plan_repairs) for r in results])
    cells.append([f"{r.wall_s:.0f} s" for r in results])
    labels = [label for label, _ in rows] + ["plan repairs", "wall time"]
    widths = [max(len(columns[i]), *(len(row[i]) for row in cells)) for i in range(len(results))]
    lines = [f"{'policy':<{label_width}}  " + "  ".join(f"{c:>{w}}" for c, w in zip(columns, widths, strict=True))]
    for label, row in zip(labels, cells, strict=True):
        lines.append(f"{label:<{label_width}}  " + "  ".join(f"{c:>{w}}" for c, w in zip(row, widths, strict=True)))
    notes = [
        "",
        "effective utilization: time-average of the true need of running work (an inference service: the smallest "
        "MIG profile holding its memory, /7) over capacity, work lost to evictions taken out.",
        "training throughput: GPU-hours of training work at ideal speed done per hour (topology model), lost work "
        "taken out. Waits of jobs still waiting at the end count as their wait so far.",
    ]
    for result in results:
        if result.error is not None:
            notes.append(f"{result.name} FAILED: {result.error}")
        elif result.plan_repairs:
            notes.append(
                f"{result.name}: {result.plan_repairs} bind(s) on a node under a MIG change were dropped and "
                f"re-planned (first: {result.first_repair}); --strict stops at the first instead."
            )
    return "\n".join(head + lines + notes)


def _fmt_s(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f} s"


def _utilization_figure(results: Sequence[PolicyResult]) -> go.Figure:
    figure = go.Figure()
    for result in results:
        if not result.series:
            continue
        hours = [t / 3600 for t, _, _ in result.series]
        figure.add_trace(go.Scatter(x=hours, y=[e for _, e, _ in result.series], name=f"{result.name} effective"))
        figure.add_trace(
            go.Scatter(
                x=hours,
                y=[a for _, _, a in result.series],
                name=f"{result.name} allocated",
                line={"dash": "dot"},
                visible="legendonly",
            )
        )
    figure.update_layout(
        title="Utilization over time (10-minute buckets)", xaxis_title="hours", yaxis_title="share of capacity"
    )
    return figure


def _wait_figure(results: Sequence[PolicyResult]) -> go.Figure:
    figure = go.Figure()
    classes = [p.value for p in Priority]
    for result in results:
        if result.metrics is None:
            continue
        waits = result.metrics["queue_wait_s"]
        figure.add_trace(
            go.Bar(x=classes, y=[(waits.get(c) or {}).get("p95") for c in classes], name=f"{result.name} p95")
        )
    figure.update_layout(
        title="Queueing delay by priority class (p95)", yaxis_title="seconds", yaxis_type="log", barmode="group"
    )
    return figure
