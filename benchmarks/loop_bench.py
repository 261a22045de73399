"""``manage.py bench loop`` (B6): the whole live cycle, as production runs it, on a B5 cluster in the database.

Protocol (``../shared/spec/benchmarks.md``, B6; notes in ``docs/benchmarks/loop.md``):

1. A scratch database beside the configured one (:mod:`benchmarks.scratch_db`: the embedded SQLite by default,
   PostgreSQL when ``DATABASE_URL`` names one), migrated, dropped at the end; the configured database is never
   read or written.
2. The B5 cluster and queue of ``--nodes`` × 8 GPUs and ``--pending`` jobs (:mod:`scheduler.sim.bench.synthetic`,
   seed ``--seed``) written through the project's services (:mod:`benchmarks.loop_seed`): B5's running work is
   submitted too, so the cluster starts empty. Seeding is timed apart; it is no part of a cycle.
3. The simulated fleet (:class:`~scheduler.gateways.simulated.SimulatedFleet`) in real time (speed 1, spot
   notices at the configured rate, drawn from ``--seed``) on a clock the benchmark moves by hand: one cycle period
   (``SCHEDULER["cycle_s"]``) between cycles, none while one runs.
4. :func:`scheduler.loop.cycle.cycle_run` once on the empty cluster (the first cycle: thousands of binds), then
   ``--cycles`` steady cycles. Each is timed whole (wall clock around the call) and by phase as the loop times
   itself: the phase durations it adds to :class:`~scheduler.models.CycleStats` (the difference of each
   phase's histogram sum), its plan's engine time (``CycleReport.plan_ms``; the rest of its ``plan`` phase is the
   snapshot built from the rows), and what follows the phases (its stats record). Every SQL statement the
   cycle sends is counted (``connection.execute_wrapper``).

Targets (``TARGETS_S``): a steady cycle ≤ 1.5 s at 1,000 nodes / 10,000 pending and ≤ 6 s at 5,000 / 50,000, the
first cycle ≤ 30 s at 1,000 nodes; judged on the slowest steady cycle.

Same interface as the modules of ``scheduler.sim.bench.registry`` (``NAME``, ``HELP``, ``add_arguments``, ``run``,
``ALL_RUNS``/``SLOW_RUNS``); it lives beside ``bench portal`` because it needs the database.
"""

from __future__ import annotations

import argparse
import gc
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection
from django.test.utils import override_settings
from django.utils import timezone

from benchmarks.footprint import database_mib, peak_reset, peak_rss_mib
from benchmarks.loop_seed import Seeded, seed
from benchmarks.query_count import QueryCounter
from benchmarks.scratch_db import scratch_database
from scheduler.bridge.cycle_stats import PHASES, STATS_NAME
from scheduler.engine import engine_label
from scheduler.gateways.simulated import FleetSettings, SimulatedFleet
from scheduler.loop.cycle import cycle_run
from scheduler.models import CycleStats
from scheduler.sim.bench.machine import RunRecord, started_line
from scheduler.sim.bench.registry import Claim, Outcome, positive, whole_number
from scheduler.sim.bench.synthetic import ClusterShape, synthetic_snapshot

NAME = "loop"
HELP = "Time whole live cycles (observe … apply) on a B5 cluster seeded into a scratch database (B6)."
DEFAULT_NODES = 1_000
PENDING_PER_NODE = 10
DEFAULT_CYCLES = 3
DEFAULT_SEED = 42
ALL_RUNS: dict[str, tuple[str, ...]] = {"loop": ()}
SLOW_RUNS: dict[str, tuple[str, ...]] = {"loop-5000": ("--nodes", "5000")}
# (nodes, pending) → seconds: the targets for a steady cycle and for the first one.
STEADY_TARGETS_S: dict[tuple[int, int], float] = {(1_000, 10_000): 1.5, (5_000, 50_000): 6.0}
FIRST_TARGETS_S: dict[int, float] = {1_000: 30.0}
# What the loop adds after its timed phases (its stats record), and the engine apart from the snapshot.
COLUMNS = ("observe", "reconcile", "snapshot", "engine", "record", "apply", "stats")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=positive, default=DEFAULT_NODES, help="Nodes of 8 GPUs (default 1000).")
    parser.add_argument(
        "--pending", type=whole_number(1), help=f"Pending jobs of the B5 queue (default {PENDING_PER_NODE} per node)."
    )
    parser.add_argument(
        "--cycles",
        type=positive,
        default=DEFAULT_CYCLES,
        help=f"Steady cycles after the first (default {DEFAULT_CYCLES}).",
    )
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"Workload seed (default {DEFAULT_SEED}).")


@dataclass
class CycleFigures:
    """One cycle: wall time, time per column of :data:`COLUMNS`, SQL statements, and what it decided."""

    label: str
    wall_s: float
    cpu_s: float  # this process's CPU time: what the cycle costs, whoever else wants the cores (SQLite's included)
    phases_s: dict[str, float]
    queries: int
    pending: int
    running: int
    decided: dict[str, int] = field(default_factory=dict)
    applied: int = 0
    failed: int = 0
    peak_rss_mib: float = 0.0  # the process's resident high-water mark over the cycle (benchmarks/footprint.py)

    def as_json(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "wall_s": round(self.wall_s, 3),
            "cpu_s": round(self.cpu_s, 3),
            "phases_s": {k: round(v, 3) for k, v in self.phases_s.items()},
            "queries": self.queries,
            "pending": self.pending,
            "running": self.running,
            "decided": self.decided,
            "applied": self.applied,
            "failed": self.failed,
            "peak_rss_mib": round(self.peak_rss_mib, 1),
        }


@dataclass
class LoopResult:
    shape: ClusterShape
    database: str
    seeded: Seeded
    cycles: list[CycleFigures]
    setup_s: float = 0.0  # creating and migrating the scratch database
    database_mib: float = 0.0  # the scratch database's size after the last cycle


def run(options: dict[str, Any]) -> Outcome:
    nodes: int = options.get("nodes") or DEFAULT_NODES
    pending: int = options.get("pending") or PENDING_PER_NODE * nodes
    cycles: int = options.get("cycles") or DEFAULT_CYCLES
    seed_value: int = options.get("seed", DEFAULT_SEED)
    # The loop reads and writes through Django's default database, so the scratch database sits on its server:
    # DATABASE_URL chooses PostgreSQL, as for the portal.
    command = f"python manage.py bench loop --nodes {nodes} --pending {pending} --cycles {cycles} --seed {seed_value}"
    record = RunRecord(NAME, command)
    shape = ClusterShape(nodes=nodes, pending=pending, seed=seed_value)
    began = time.perf_counter()
    with scratch_database(DEFAULT_DB_ALIAS), _limits_lifted():
        setup_s = time.perf_counter() - began
        result = measure(shape, cycles)
    result.setup_s = setup_s
    return _outcome(record, result)


def _limits_lifted() -> Any:
    """The queue is seeded by the system, as a platform admin raising the pending caps would let it be."""
    return override_settings(JOBS={**settings.JOBS, "pending_limit_team": 10**9, "pending_limit_user": 10**9})


def measure(shape: ClusterShape, cycles: int, *, one_by_one: int = 20) -> LoopResult:
    """Seed ``shape`` into the current database and run the first cycle and ``cycles`` steady ones (module doc).
    The database must hold no nodes or jobs of its own (the scratch database of :func:`run`, or a test's)."""
    start = timezone.now().replace(microsecond=0)
    seeded = seed(synthetic_snapshot(shape), start=start, one_by_one=one_by_one)
    gc.collect()  # the synthetic snapshot is garbage now: a worker holds no such thing
    clock = _Clock(start)
    fleet = SimulatedFleet(FleetSettings(speed=1.0, seed=shape.seed, **_fleet_rates()), clock=clock)
    period = float(settings.SCHEDULER["cycle_s"])
    figures = [_cycle("first", fleet)]
    for n in range(cycles):
        clock.now += timedelta(seconds=period)
        figures.append(_cycle(f"steady {n + 1}", fleet))
    return LoopResult(
        shape=shape, database=connection.vendor, seeded=seeded, cycles=figures, database_mib=database_mib()
    )


def _fleet_rates() -> dict[str, float]:
    """The configured simulated fleet's rates (spot notices, MIG delays …), its speed aside."""
    rates = FleetSettings.from_mapping(settings.SCHEDULER)
    return {name: getattr(rates, name) for name in FleetSettings.__slots__ if name not in ("speed", "seed")}


class _Clock:
    """The fleet's clock, moved by hand between cycles."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def _phase_sums() -> dict[str, float]:
    stats = CycleStats.objects.filter(name=STATS_NAME).first()
    phases = stats.phases if stats is not None else {}
    return {phase: float(phases.get(phase, {}).get("sum", 0.0)) for phase in PHASES}


def _cycle(label: str, fleet: SimulatedFleet) -> CycleFigures:
    before = _phase_sums()
    counter = QueryCounter()
    peak_reset()
    with connection.execute_wrapper(counter):
        began, began_cpu = time.perf_counter(), time.process_time()
        report = cycle_run(gateway=fleet)
        wall, cpu = time.perf_counter() - began, time.process_time() - began_cpu
    after = _phase_sums()
    spent = {phase: after[phase] - before[phase] for phase in PHASES}
    engine = report.plan_ms / 1000
    phases = {
        "observe": spent["observe"],
        "reconcile": spent["reconcile"],
        "snapshot": spent["plan"] - engine,
        "engine": engine,
        "record": spent["record"],
        "apply": spent["apply"],
        "stats": wall - report.total_ms / 1000,
    }
    decided = {
        key: len(value) if isinstance(value, list) else int(value)
        for key, value in report.decisions.items()
        if isinstance(value, list | int)
    }
    return CycleFigures(
        label=label,
        wall_s=wall,
        cpu_s=cpu,
        phases_s=phases,
        queries=counter.count,
        pending=report.pending,
        running=report.running,
        decided=decided,
        applied=len(report.applied),
        failed=len(report.failed),
        peak_rss_mib=peak_rss_mib(),
    )


def _claims(result: LoopResult) -> tuple[Claim, ...]:
    shape = result.shape
    claims = []
    steady = [c for c in result.cycles if c.label != "first"]
    target = STEADY_TARGETS_S.get((shape.nodes, shape.pending))
    if target is not None and steady:
        slowest = max(c.wall_s for c in steady)
        claims.append(
            Claim(
                claim=f"a steady live cycle at {shape.nodes:,} nodes / {shape.pending:,} pending in ≤ {target:g} s",
                measured=f"slowest {slowest:.2f} s of {len(steady)} steady cycles on {result.database}",
                reproduced=slowest <= target,
            )
        )
    first_target = FIRST_TARGETS_S.get(shape.nodes)
    first = result.cycles[0]
    if first_target is not None:
        claims.append(
            Claim(
                claim=f"the first live cycle on an empty {shape.nodes:,}-node cluster in ≤ {first_target:g} s",
                measured=f"{first.wall_s:.1f} s ({first.decided.get('binds', 0):,} binds) on {result.database}",
                reproduced=first.wall_s <= first_target,
            )
        )
    return tuple(claims)


def _outcome(record: RunRecord, result: LoopResult) -> Outcome:
    claims = _claims(result)
    payload = {
        **record.head(),
        "database": result.database,
        "engine": engine_label(),
        "nodes": result.shape.nodes,
        "pending": result.shape.pending,
        "seed": result.shape.seed,
        "setup_s": round(result.setup_s, 2),
        "database_mib": round(result.database_mib, 1),
        "seeded": result.seeded.as_json(),
        "cycles": [c.as_json() for c in result.cycles],
        "claims": [c.__dict__ for c in claims],
    }
    title = f"Live loop (B6): whole cycles at {result.shape.nodes:,} nodes / {result.shape.pending:,} pending"
    return Outcome(payload=payload, table=_table(payload, result, title), title=title, claims=claims)


def _table(payload: dict[str, Any], result: LoopResult, title: str) -> str:
    seeded = result.seeded
    left_out = ", ".join(f"{n:,} {why}" for why, n in seeded.left_out.items()) or "none"
    one = f"{seeded.submit_one_ms:.0f} ms per job one by one" if seeded.submit_one_ms is not None else "no sample"
    lines = [
        f"{title} ({result.database})",
        f"command: {payload['command']}",
        started_line(payload),
        f"engine: {payload['engine']}",
        f"scratch database created and migrated in {result.setup_s:.1f} s; seeded through the services: "
        f"{seeded.nodes:,} nodes ({seeded.cordoned} cordoned) in {seeded.seconds.get('nodes', 0):.1f} s, "
        f"{seeded.teams} teams in {seeded.seconds.get('teams', 0):.1f} s, {seeded.jobs:,} jobs in "
        f"{seeded.seconds.get('jobs', 0):.1f} s (bulk submit; {one}); left out: {left_out}",
        "",
        f"{'cycle':10} {'pending':>7} {'running':>7} {'binds':>6} {'evict':>5} {'SQL':>6} "
        + " ".join(f"{c:>9}" for c in COLUMNS)
        + f" {'total':>8} {'CPU':>8} {'RSS':>9}",
    ]
    for c in result.cycles:
        lines.append(
            f"{c.label:10} {c.pending:>7,} {c.running:>7,} {c.decided.get('binds', 0):>6,} "
            f"{c.decided.get('evictions', 0):>5,} {c.queries:>6,} "
            + " ".join(f"{c.phases_s[col]:>8.2f}s" for col in COLUMNS)
            + f" {c.wall_s:>7.2f}s {c.cpu_s:>7.2f}s {c.peak_rss_mib:>5,.0f} MiB"
        )
    lines.append("")
    lines.append(
        "snapshot: the plan phase less the engine; stats: the cycle's record of itself after its timed phases; "
        "total: wall clock around cycle_run; CPU: this process's (with SQLite, the database's too); "
        "RSS: the process's resident peak in the cycle"
    )
    lines.append(f"database after the cycles: {result.database_mib:,.0f} MiB ({result.database})")
    for claim in _claims(result):
        verdict = "reproduced" if claim.reproduced else "NOT reproduced"
        lines.append(f"target: {claim.claim}: {verdict} ({claim.measured})")
    return "\n".join(lines)
