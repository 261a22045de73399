"""``bench topology [--gpus 64,128,256,512] [--seed N] [--load L] [--hours H] [--warmup-hours W]
[--oversubscription X] [--tcp-leaves K] [--policies ...] [--trace PATH] [--strict] [--json]`` (spec/benchmarks.md
B3).

Distributed training only (jobs of 2–64 GPUs, Philly run times; :mod:`scheduler.sim.workload.mixed` with
``inference_share`` 0) on ``topology-N`` clusters of H100 NVSwitch servers, 4 per leaf, one spine
(:mod:`scheduler.sim.workload.clusters`). Every policy replays the same workload per size; a run's speed
follows :mod:`scheduler.sim.topology_model`. Reported per size and policy: ``training_throughput`` (GPU-hours
of training at ideal speed per hour), the mean speed of the distributed runs, the allocation ratio; and
microcosm ÷ k8s-default; and the multi-node runs on nodes without a fabric (``without_fabric``: runs, GPU-hours,
mean speed — none on B3's all-InfiniBand clusters; ``--tcp-leaves K`` takes the fabric off the servers of the
last K leaves, to see what a policy that ignores fabrics pays). Cycles are 30 s here (placement quality is
measured, not queueing delay) so the four sizes run in a few minutes.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import plotly.graph_objects as go

from scheduler.sim.bench.machine import RunRecord, started_line, with_flags
from scheduler.sim.bench.mixed_cli import load_runtimes, non_negative_float, planner_list, positive_float
from scheduler.sim.bench.mixed_run import PLANNER_ORDER, PlannerResult, check_planners, run_planner
from scheduler.sim.bench.registry import BenchUsageError, Claim, Outcome
from scheduler.sim.workload.clusters import MIXED_OVERSUBSCRIPTION, topology_cluster
from scheduler.sim.workload.mixed import TRAINING_GPUS_TOPOLOGY, WorkloadConfig, describe, generate

NAME = "topology"
HELP = "Distributed-training throughput by placement policy on 64–512 GPUs (spec B3)."
DEFAULT_SIZES = (64, 128, 256, 512)
DEFAULT_SEED = 42
DEFAULT_LOAD = 1.2
DEFAULT_HOURS = 6.0
DEFAULT_WARMUP_HOURS = 2.0
CYCLE_S = 30.0
TARGET_GAIN = 0.20
CLAIM_MIN_GPUS = 64


def gpu_sizes(text: str) -> list[int]:
    sizes = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            value = int(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part!r} is not a whole number of GPUs") from None
        if value < 8 or value % 8:
            raise argparse.ArgumentTypeError(f"{value} is not a positive multiple of 8 (whole 8-GPU servers)")
        sizes.append(value)
    if not sizes:
        raise argparse.ArgumentTypeError("name at least one cluster size, e.g. 64,128")
    return sizes


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative; give 0 or more leaves")
    return value


def oversubscription(text: str) -> float:
    value = positive_float(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value:g} is below 1; oversubscription is a ratio ≥ 1 (1 = non-blocking)")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--gpus", type=gpu_sizes, default=list(DEFAULT_SIZES), help="Cluster sizes (default 64,128,256,512)."
    )
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"Workload seed (default {DEFAULT_SEED}).")
    parser.add_argument("--load", type=positive_float, default=DEFAULT_LOAD, help="Offered load (default 1.2).")
    parser.add_argument("--hours", type=positive_float, default=DEFAULT_HOURS, help="Measured hours (default 6).")
    parser.add_argument(
        "--warmup-hours", type=non_negative_float, default=DEFAULT_WARMUP_HOURS, help="Excluded warm-up (default 2)."
    )
    parser.add_argument(
        "--oversubscription",
        type=oversubscription,
        default=MIXED_OVERSUBSCRIPTION,
        help="Spine oversubscription, ≥ 1 (default 2; 1 = non-blocking).",
    )
    parser.add_argument(
        "--tcp-leaves",
        type=non_negative_int,
        default=0,
        help="Leaves whose servers have no fabric, TCP only (default 0: all InfiniBand, B3's protocol).",
    )
    parser.add_argument(
        "--policies", type=planner_list, default=list(PLANNER_ORDER), help="Comma-separated (default: all five)."
    )
    parser.add_argument("--trace", type=Path, help="Philly run times (default ../shared/traces/philly/...).")
    parser.add_argument("--strict", action="store_true", help="Stop a policy at its first plan violation.")


def run(options: dict[str, Any]) -> Outcome:
    warmup_h = options.get("warmup_hours")
    if warmup_h is None:
        warmup_h = 2.0
    try:
        policies = check_planners(options.get("policies") or list(PLANNER_ORDER))
        config = WorkloadConfig(
            seed=options.get("seed", DEFAULT_SEED),
            load=options.get("load") or DEFAULT_LOAD,
            hours=options.get("hours") or DEFAULT_HOURS,
            warmup_s=3600.0 * warmup_h,
            inference_share=0.0,
            training_gpus=TRAINING_GPUS_TOPOLOGY,
            cycle_s=CYCLE_S,
        )
    except ValueError as error:
        raise BenchUsageError(str(error)) from None
    sizes = list(dict.fromkeys(options.get("gpus") or DEFAULT_SIZES))
    ratio = options.get("oversubscription") or MIXED_OVERSUBSCRIPTION
    tcp_leaves = int(options.get("tcp_leaves") or 0)
    try:
        clusters_def = [topology_cluster(gpus, ratio, tcp_leaves) for gpus in sizes]
    except ValueError as error:
        raise BenchUsageError(str(error)) from None
    trace, runtimes = load_runtimes(options.get("trace"))
    command = (
        f"python manage.py bench topology --gpus {','.join(str(s) for s in sizes)} --seed {config.seed} "
        f"--load {config.load:g} --hours {config.hours:g} --warmup-hours {config.warmup_s / 3600:g} "
        f"--oversubscription {ratio:g}{f' --tcp-leaves {tcp_leaves}' if tcp_leaves else ''} "
        f"--policies {','.join(policies)}"
    )
    record = RunRecord(NAME, with_flags(command, options, "strict", "json"))
    per_size: list[tuple[int, str, list[PlannerResult]]] = []
    for gpus, cluster in zip(sizes, clusters_def, strict=True):
        workload = generate(cluster, config, runtimes)
        results = [run_planner(workload, name, strict=bool(options.get("strict"))) for name in policies]
        per_size.append((gpus, describe(workload), results))
    head = record.head()
    clusters = {}
    for gpus, description, results in per_size:
        entry: dict[str, Any] = {
            "workload": description,
            "policies": {result.name: _planner_json(result) for result in results},
        }
        entry["microcosm_vs_k8s_default"] = _ratio(results)
        clusters[str(gpus)] = entry
    payload = {
        **head,
        "seed": config.seed,
        "load": config.load,
        "oversubscription": ratio,
        "tcp_leaves": tcp_leaves,
        "cycle_s": CYCLE_S,
        "window_s": list(config.window),
        "trace": str(trace),
        "clusters": clusters,
    }
    claims = _claims(per_size)
    payload["claims"] = [{"claim": c.claim, "measured": c.measured, "reproduced": c.reproduced} for c in claims]
    return Outcome(
        payload=payload, table=_table(payload, per_size, policies), figures=(_figure(per_size),), claims=claims
    )


def _planner_json(result: PlannerResult) -> dict[str, Any]:
    full = result.as_dict()
    keep = (
        "status",
        "error",
        "training_throughput",
        "distributed_speed",
        "allocation_ratio",
        "completed",
        "evictions",
        "lost_gpu_hours",
        "without_fabric",
        "plan_repairs",
        "wall_s",
    )
    return {key: full[key] for key in keep if key in full}


def _throughput(results: Sequence[PlannerResult], name: str) -> float | None:
    for result in results:
        if result.name == name and result.metrics is not None:
            return float(result.metrics["training_throughput"])
    return None


def _ratio(results: Sequence[PlannerResult]) -> float | None:
    ours, base = _throughput(results, "microcosm"), _throughput(results, "k8s-default")
    if ours is None or base is None or base == 0:
        return None
    return round(ours / base, 4)


def _claims(per_size: Sequence[tuple[int, str, list[PlannerResult]]]) -> tuple[Claim, ...]:
    claims = []
    for gpus, _, results in per_size:
        if gpus < CLAIM_MIN_GPUS:
            continue
        ratio = _ratio(results)
        claims.append(
            Claim(
                f"B3: microcosm ≥ 20 % more training throughput than k8s-default on {gpus} GPUs",
                "not measured (a policy failed or k8s-default did no work)" if ratio is None else f"{ratio:.2f}×",
                None if ratio is None else ratio >= 1 + TARGET_GAIN,
            )
        )
    return tuple(claims)


def _table(
    payload: dict[str, Any], per_size: Sequence[tuple[int, str, list[PlannerResult]]], policies: Sequence[str]
) -> str:
    head = [
        f"Topology (B3): distributed training on {', '.join(str(g) for g, _, _ in per_size)} GPUs, "
        f"load {payload['load']:g}, seed {payload['seed']}, spine {payload['oversubscription']:g}:1",
        f"command: {payload['command']}",
        started_line(payload),
        "",
    ]
    width = max(len(p) for p in policies) + 2
    lines = [
        f"{'GPUs':>5}  {'policy':<{width}}{'throughput GPU-h/h':>20}{'dist. speed':>13}{'allocated':>11}"
        f"{'completed':>11}{'evictions':>11}{'no-fabric runs (speed)':>24}{'repairs':>9}{'wall':>7}"
    ]
    for gpus, description, results in per_size:
        for result in results:
            m = result.metrics
            if m is None:
                lines.append(f"{gpus:>5}  {result.name:<{width}}FAILED: {result.error}")
                continue
            speed = "-" if m["distributed_speed"] is None else f"{m['distributed_speed']:.3f}"
            lines.append(
                f"{gpus:>5}  {result.name:<{width}}{m['training_throughput']:>20.2f}{speed:>13}"
                f"{m['allocation_ratio']:>11.1%}{m['completed']:>11}{m['evictions']:>11}"
                f"{_no_fabric(m.get('without_fabric')):>24}{result.plan_repairs:>9}{result.wall_s:>6.0f}s"
            )
        ratio = _ratio(results)
        lines.append(f"{'':>5}  microcosm ÷ k8s-default: {'-' if ratio is None else f'{ratio:.2f}×'}   ({description})")
    notes = [
        "",
        "throughput: GPU-hours of training at ideal speed per hour of the window (topology model: step = compute + "
        "ring all-reduce over the slowest link), lost work taken out; dist. speed: mean speed of multi-GPU runs; "
        "no-fabric runs: multi-node runs on nodes without a common fabric (TCP, about 4 GB/s) and their mean speed.",
    ]
    return "\n".join(head + lines + notes)


def _no_fabric(figures: Any) -> str:
    if not isinstance(figures, dict) or not figures.get("runs"):
        return "0"
    speed = figures.get("speed")
    return f"{figures['runs']} ({'-' if speed is None else f'{speed:.3f}'})"


def _figure(per_size: Sequence[tuple[int, str, list[PlannerResult]]]) -> go.Figure:
    figure = go.Figure()
    names = list(dict.fromkeys(r.name for _, _, results in per_size for r in results))
    sizes = [str(g) for g, _, _ in per_size]
    for name in names:
        values = [_throughput(results, name) for _, _, results in per_size]
        figure.add_trace(go.Bar(x=sizes, y=values, name=name))
    figure.update_layout(
        title="Training throughput by cluster size",
        xaxis_title="GPUs",
        yaxis_title="GPU-hours at ideal speed / hour",
        barmode="group",
    )
    return figure
