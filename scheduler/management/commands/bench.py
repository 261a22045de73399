"""``manage.py bench <benchmark> [...] [--json]``: the benchmarks of spec/benchmarks.md.

A thin edge over :mod:`scheduler.sim.bench`; it needs no database and no cluster. Each benchmark is a
subcommand (``scale`` now; issue 4 adds ``openb``, ``mixed``, ``topology``, ``cost`` and ``all`` beside it):
it prints a table, or with ``--json`` one JSON object, and always the exact command that reproduces it.

``bench scale [--nodes N --gpus-per-node G --pending P --seed S --repeat R] [--json]``: one scheduling cycle of
the real engine on a synthetic cluster (issue 3 §12). Without ``--nodes`` it runs the issue's two sizes,
1,000 × 8 GPUs with 10,000 pending jobs and 5,000 × 8 with 50,000; ``--pending`` defaults to 10 per node.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections.abc import Callable, Sequence
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduler.sim.bench.scale import DEFAULT_SIZES, PENDING_PER_NODE, ScaleResult, measure
from scheduler.sim.bench.synthetic import ClusterShape

DEFAULT_SEED = 42
DEFAULT_REPEAT = 3
DEFAULT_GPUS_PER_NODE = 8


def _whole_number(minimum: int) -> Callable[[str], int]:
    """An argparse ``type``: an integer of at least ``minimum``, with a message a person can act on."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} must be at least {minimum}")
        return value

    return parse


_positive = _whole_number(1)


class Command(BaseCommand):
    help = "Run a benchmark of spec/benchmarks.md and print its table (or one JSON object with --json)."
    requires_system_checks: list[str] = []  # pure simulation: no database, no cluster
    requires_migrations_checks = False

    def add_arguments(self, parser: CommandParser) -> None:
        subcommands = parser.add_subparsers(dest="benchmark", required=True, metavar="{scale}")
        scale = subcommands.add_parser(
            "scale", help="Time one scheduling cycle of the engine on a synthetic cluster (issue 3 §12, B5)."
        )
        scale.add_argument("--nodes", type=_positive, help="Nodes (default: the issue's two sizes, 1000 and 5000).")
        scale.add_argument(
            "--gpus-per-node", type=_positive, default=DEFAULT_GPUS_PER_NODE, help="GPUs per node (default 8)."
        )
        scale.add_argument(
            "--pending",
            type=_whole_number(0),
            help=f"Pending jobs (needs --nodes; default {PENDING_PER_NODE} per node).",
        )
        scale.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"Workload seed (default {DEFAULT_SEED}).")
        scale.add_argument(
            "--repeat",
            type=_positive,
            default=DEFAULT_REPEAT,
            help=f"Timed cycles per size (default {DEFAULT_REPEAT}).",
        )
        scale.add_argument("--json", action="store_true", help="Print the result as one JSON object.")

    def handle(self, *args: Any, **options: Any) -> None:
        benchmarks: dict[str, Callable[[dict[str, Any]], None]] = {"scale": self._scale}
        benchmarks[options["benchmark"]](options)

    # -- scale -------------------------------------------------------------------------------------------

    def _scale(self, options: dict[str, Any]) -> None:
        nodes, pending = options["nodes"], options["pending"]
        if pending is not None and nodes is None:
            raise CommandError("--pending needs --nodes (without --nodes the issue's two sizes run)")
        gpus, seed, repeat = options["gpus_per_node"], options["seed"], options["repeat"]
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
        if options["json"]:
            command += " --json"
        machine = _machine()
        date = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        results = []
        for size_nodes, size_pending in sizes:
            shape = ClusterShape(nodes=size_nodes, pending=size_pending, gpus_per_node=gpus, seed=seed)
            results.append(measure(shape, repeat=repeat))
        machine["load_average_at_end"] = _load_average()
        payload = {
            "benchmark": "scale",
            "command": command,
            "date": date,
            "machine": machine,
            "seed": seed,
            "repeat": repeat,
            "sizes": [result.as_dict() for result in results],
        }
        if options["json"]:
            self.stdout.write(json.dumps(payload, indent=2, ensure_ascii=False))
        else:
            self.stdout.write(_scale_table(payload, results))


def _machine() -> dict[str, Any]:
    """What the figures were measured on: CPUs usable by this process (``nproc``), CPU model, load."""
    cpu_model = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    cpu_model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "nproc": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu_model": cpu_model,
        "python": platform.python_version(),
        "load_average_at_start": _load_average(),
    }


def _load_average() -> list[float]:
    """1, 5 and 15 minute load averages: other work on the machine slows the figures down."""
    return [round(x, 2) for x in os.getloadavg()]


def _scale_table(payload: dict[str, Any], results: Sequence[ScaleResult]) -> str:
    machine = payload["machine"]
    start = " ".join(f"{x:.2f}" for x in machine["load_average_at_start"])
    end = " ".join(f"{x:.2f}" for x in machine["load_average_at_end"])
    head = [
        "Scale (issue 3 §12): one plan_cycle of the engine on a synthetic cluster "
        f"(seed {payload['seed']}, {payload['repeat']} timed runs per size)",
        f"command: {payload['command']}",
        f"machine: {machine['nproc']} CPUs ({machine['cpu_model']}), Python {machine['python']}, "
        f"load average {start} at start, {end} at end; started {payload['date']}",
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
