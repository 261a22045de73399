"""``bench mixed [--mix balanced|serving|both] [--seeds 42-46] [--load L] [--cluster mixed-64] [--hours H]
[--warmup-hours W] [--policies ...] [--jobs N] [--trace PATH] [--strict] [--json]`` (spec/benchmarks.md B2).

A seeded mixed inference + training workload (:mod:`scheduler.sim.workload.mixed`) on ``mixed-64``, replayed
by every policy side by side; figures over the window after the warm-up (:mod:`scheduler.sim.metrics`), for
each mix and seed, then each figure's median and spread (min–max) over the seeds
(:mod:`scheduler.sim.bench.mixed_summary`, which judges the claims on the medians).

Both mixes are run unless ``--mix`` names one (``both`` says it explicitly): the spec reports both, and a claim
about the engine that holds on one mix only is not a claim about the engine. The runs (mix × seed × policy)
share ``--jobs`` worker processes (default 2). The defaults — 2 mixes × 5 seeds × 5 policies, 8 h measured after
2 h of warm-up, 10 s cycles — took 588 s on 2 cores (2026-12-01).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from scheduler.sim.bench.machine import RunRecord, with_flags
from scheduler.sim.bench.mixed_matrix import Setup, Task, run_tasks, workload_of
from scheduler.sim.bench.mixed_run import PLANNER_ORDER, check_planners
from scheduler.sim.bench.mixed_summary import PlannerSummary
from scheduler.sim.bench.mixed_summary import claims as mix_claims
from scheduler.sim.bench.mixed_table import table, utilization_figure, wait_figure
from scheduler.sim.bench.registry import BenchUsageError, Claim, Outcome, positive
from scheduler.sim.bench.seeds import parse_seeds
from scheduler.sim.traces import TraceError
from scheduler.sim.traces.philly import load_philly_runtimes
from scheduler.sim.workload.clusters import CLUSTERS, cluster_named
from scheduler.sim.workload.mixed import MIXES, WorkloadConfig, default_philly_path, describe, realised_load

NAME = "mixed"
HELP = "Mixed inference + training cluster over time, every policy side by side (spec B2)."
DEFAULT_SEEDS = "42-46"
DEFAULT_LOAD = 1.2
DEFAULT_HOURS = 8.0
DEFAULT_WARMUP_HOURS = 2.0
DEFAULT_JOBS = min(2, os.cpu_count() or 1)


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


def planner_list(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


def mix_list(text: str) -> list[str]:
    """``balanced``, ``serving``, ``both`` or a comma list of mixes."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    if names == ["both"]:
        return list(MIXES)
    unknown = [name for name in names if name not in MIXES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown mix {', '.join(unknown) or '(none given)'}; known: {', '.join(MIXES)} or both"
        )
    return list(dict.fromkeys(names))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mix", type=mix_list, default=list(MIXES), help="balanced, serving or both (default: both).")
    parser.add_argument("--seeds", default=DEFAULT_SEEDS, help=f"Seeds, e.g. 42-46 or 42,45 (default {DEFAULT_SEEDS}).")
    parser.add_argument("--load", type=positive_float, default=DEFAULT_LOAD, help="Offered load (default 1.2).")
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
        "--policies", type=planner_list, default=list(PLANNER_ORDER), help="Comma-separated (default: all five)."
    )
    parser.add_argument("--jobs", type=positive, default=DEFAULT_JOBS, help="Worker processes (default 2).")
    parser.add_argument("--trace", type=Path, help="Philly run times (default ../shared/traces/philly/...).")
    parser.add_argument(
        "--strict", action="store_true", help="Stop a policy at its first plan violation instead of repairing it."
    )


def load_runtimes(path: Path | None) -> tuple[Path, tuple[float, ...]]:
    """The Philly sample; BenchUsageError says what to fix when the file is missing or malformed."""
    trace = path or default_philly_path()
    if not trace.exists():  # anything else (a folder, a device, bytes that are not text) the reader names
        raise BenchUsageError(
            f"{trace}: no such file; pass the Philly run-time sample (philly_runtime.csv) with --trace"
        )
    try:
        return trace, load_philly_runtimes(trace)
    except TraceError as error:
        raise BenchUsageError(str(error)) from None


def run(options: dict[str, Any]) -> Outcome:
    seeds = parse_seeds(str(options.get("seeds") or DEFAULT_SEEDS))
    mixes = options.get("mix") or list(MIXES)
    try:
        policies = check_planners(options.get("policies") or list(PLANNER_ORDER))
        cluster = cluster_named(options.get("cluster") or "mixed-64")
        warmup_h = options.get("warmup_hours")
        if warmup_h is None:
            warmup_h = DEFAULT_WARMUP_HOURS
        WorkloadConfig(load=options.get("load") or DEFAULT_LOAD, hours=options.get("hours") or DEFAULT_HOURS)
    except ValueError as error:
        raise BenchUsageError(str(error)) from None
    trace, runtimes = load_runtimes(options.get("trace"))
    setup = Setup(
        cluster=cluster.name,
        load=options.get("load") or DEFAULT_LOAD,
        hours=options.get("hours") or DEFAULT_HOURS,
        warmup_s=3600.0 * warmup_h,
        runtimes=runtimes,
        strict=bool(options.get("strict")),
    )
    command = (
        f"python manage.py bench mixed --mix {','.join(mixes)} --seeds {options.get('seeds') or DEFAULT_SEEDS} "
        f"--load {setup.load:g} --cluster {cluster.name} --hours {setup.hours:g} --warmup-hours {warmup_h:g} "
        f"--policies {','.join(policies)}"
    )
    record = RunRecord(NAME, with_flags(command, options, "strict", "json"))
    tasks = [Task(mix, seed, policy) for mix in mixes for seed in seeds for policy in policies]
    results = dict(zip(tasks, run_tasks(setup, tasks, workers=int(options.get("jobs") or DEFAULT_JOBS)), strict=True))
    summaries = {
        mix: {p: PlannerSummary(p, {seed: results[Task(mix, seed, p)] for seed in seeds}) for p in policies}
        for mix in mixes
    }
    window = setup.config(mixes[0], seeds[0]).window
    payload: dict[str, Any] = {
        **record.head(),
        "seeds": seeds,
        "load": setup.load,
        "cluster": {"name": cluster.name, "gpus": cluster.gpus, "description": cluster.description},
        "trace": str(trace),
        "window_s": list(window),
        "cycle_s": setup.config(mixes[0], seeds[0]).cycle_s,
        "mixes": {},
    }
    claims: list[Claim] = []
    for mix in mixes:
        workloads = {}
        for seed in seeds:
            workload = workload_of(setup, mix, seed)
            workloads[str(seed)] = {
                "description": describe(workload),
                "jobs": len(workload.jobs),
                "arrivals_per_hour": round(workload.arrivals_per_hour, 3),
                "inference_probability": round(workload.inference_probability, 4),
                "realised_load": round(realised_load(workload), 4),
            }
        payload["mixes"][mix] = {
            "inference_share": MIXES[mix],
            "workloads": workloads,
            "policies": {name: summary.as_dict() for name, summary in summaries[mix].items()},
        }
        claims += mix_claims(mix, summaries[mix], seeds)
    payload["claims"] = [{"claim": c.claim, "measured": c.measured, "reproduced": c.reproduced} for c in claims]
    first = [(name, results[Task(mixes[0], seeds[0], name)]) for name in policies]
    return Outcome(
        payload=payload,
        table=table(payload, summaries),
        figures=(utilization_figure(mixes[0], seeds[0], first), wait_figure(summaries)),
        claims=tuple(claims),
    )
