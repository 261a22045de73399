"""``bench causes [--mix balanced|serving|both] [--seeds 42-46] [--load L] [--jobs N] [--trace PATH] [--json]``: where
production inference waits and idle-while-pending come from, for the engine on B2.

Only ``microcosm`` runs, on exactly ``bench mixed``'s protocol (:mod:`scheduler.sim.bench.mixed_cli`: the
``mixed-64`` cluster at load 1.2 — ``--load`` for another of the headline's loads —, 8 h measured after 2 h of
warm-up, 10 s cycles, seeds 42–46 by default), replayed as ``bench mixed`` replays it
(:mod:`scheduler.sim.bench.causes_run`); the attribution is
:mod:`scheduler.sim.causes`. Per mix and seed, and as the median (min–max) over the seeds: the production
inference wait split by the engine's own ``Waiting.blocker``, the capacity-blocked part split by whether the
cluster had room (a rule) or lower-priority work where the job could run, the longest waits with their
sequence of blockers, and ``idle_while_pending`` split by blocker, job class and where its first fit put the
work. Not part of ``bench all``'s default sweep (a diagnostic, not a claim): ``bench all --only causes``.

One worker by default (``--jobs``): the runs are independent; the default 10 took 4 minutes on one core (2026-12-02).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from scheduler.sim.bench.causes_run import POLICY, run_all
from scheduler.sim.bench.causes_summary import payload_of
from scheduler.sim.bench.causes_table import table
from scheduler.sim.bench.machine import RunRecord, with_flags
from scheduler.sim.bench.mixed_cli import (
    DEFAULT_HOURS,
    DEFAULT_LOAD,
    DEFAULT_SEEDS,
    DEFAULT_WARMUP_HOURS,
    load_runtimes,
    mix_list,
    positive_float,
)
from scheduler.sim.bench.mixed_matrix import Setup
from scheduler.sim.bench.registry import Outcome, positive
from scheduler.sim.bench.seeds import parse_seeds
from scheduler.sim.workload.clusters import cluster_named
from scheduler.sim.workload.mixed import MIXES

NAME = "causes"
HELP = "Where production inference waits and idle-while-pending come from: the engine on B2, by its own blockers."
CLUSTER = "mixed-64"
ALL_RUNS: dict[str, tuple[str, ...]] = {}  # a diagnostic: not in bench all's default sweep
SLOW_RUNS: dict[str, tuple[str, ...]] = {NAME: ()}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mix", type=mix_list, default=list(MIXES), help="balanced, serving or both (default: both).")
    parser.add_argument("--seeds", default=DEFAULT_SEEDS, help=f"Seeds, e.g. 42-46 or 42,45 (default {DEFAULT_SEEDS}).")
    parser.add_argument("--load", type=positive_float, help=f"Offered load (default {DEFAULT_LOAD:g}).")
    parser.add_argument("--jobs", type=positive, default=1, help="Worker processes (default 1).")
    parser.add_argument("--trace", type=Path, help="Philly run times (default ../shared/traces/philly/...).")


def run(options: dict[str, Any]) -> Outcome:
    """Run the attribution (module doc). ``options["hours"]`` and ``["warmup_hours"]`` shorten the window for
    tests only; the command line always runs ``bench mixed``'s."""
    seeds_text = str(options.get("seeds") or DEFAULT_SEEDS)
    seeds = parse_seeds(seeds_text)
    mixes = options.get("mix") or list(MIXES)
    trace, runtimes = load_runtimes(options.get("trace"))
    hours = options.get("hours") or DEFAULT_HOURS
    warmup_h = options.get("warmup_hours")
    if warmup_h is None:
        warmup_h = DEFAULT_WARMUP_HOURS
    cluster = cluster_named(CLUSTER)
    load = float(options.get("load") or DEFAULT_LOAD)
    setup = Setup(cluster=cluster.name, load=load, hours=hours, warmup_s=3600.0 * warmup_h, runtimes=runtimes)
    command = f"python manage.py bench causes --mix {','.join(mixes)} --seeds {seeds_text}"
    if load != DEFAULT_LOAD:
        command += f" --load {load:g}"
    if options.get("trace"):
        command += f" --trace {trace}"
    record = RunRecord(NAME, with_flags(command, options, "json"))
    order = [(mix, seed) for mix in mixes for seed in seeds]
    results = run_all(setup, order, workers=int(options.get("jobs") or 1))
    runs = {mix: [r for r in results if r.mix == mix] for mix in mixes}
    config = setup.config(mixes[0], seeds[0])
    payload: dict[str, Any] = {
        **record.head(),
        "policy": POLICY,
        "seeds": seeds,
        "load": setup.load,
        "cluster": {"name": cluster.name, "gpus": cluster.gpus, "description": cluster.description},
        "trace": str(trace),
        "window_s": list(config.window),
        "cycle_s": config.cycle_s,
        "mixes": {mix: payload_of(mix_runs) for mix, mix_runs in runs.items()},
    }
    return Outcome(payload=payload, table=table(payload, runs))
