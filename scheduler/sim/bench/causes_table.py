"""``bench causes``' table: per mix, one row per figure or share, the median (min–max) over the seeds and then
each seed's value; then the longest production waits of every seed."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from scheduler.sim.bench.causes_run import CauseRun
from scheduler.sim.bench.causes_summary import Flat, flat, group_labels, spreads
from scheduler.sim.bench.machine import started_line
from scheduler.sim.bench.seeds import seed_text
from scheduler.sim.causes.idle import GANG_SIZES
from scheduler.sim.causes.kinds import ordered
from scheduler.sim.causes.room import CATEGORIES, LABELS
from scheduler.sim.causes.waits import LONGEST, WAIT_THRESHOLD_S

LABEL_WIDTH = 54
MEDIAN_WIDTH = 24
SEED_WIDTH = 8
TOP_CELLS = 8  # blocker / class cells listed, the largest by median share
Render = Callable[[float], str]


def _pct(value: float) -> str:
    return f"{value:.1%}"


def _num(value: float) -> str:
    return f"{value:,.0f}"


def _hours(value: float) -> str:
    return f"{value:.2f}"


def _row(label: str, key: str, median: dict[str, Any], rows: dict[int, Flat | None], render: Render) -> str:
    cells = []
    for row in rows.values():
        if row is None:
            cells.append("failed")
            continue
        group, _, name = key.rpartition(".")
        if key in row.figures:
            value = row.figures[key]
        elif group in row.groups:
            shares = row.groups[group]
            value = None if shares is None else shares.get(name, 0.0)
        else:
            value = None
        cells.append("-" if value is None else render(value))
    figure = median.get(key)
    text = "-"
    if figure is not None and figure["median"] is not None:
        low, mid, high = (render(figure[k]) for k in ("min", "median", "max"))
        text = mid if low == high else f"{mid} ({low}–{high})"
    return f"{label:<{LABEL_WIDTH}}{text:<{MEDIAN_WIDTH}}" + "".join(f"{cell:>{SEED_WIDTH}}" for cell in cells)


def _mix_block(mix: str, runs: Sequence[CauseRun]) -> list[str]:
    rows = {run.seed: flat(run) for run in runs}
    ok = [row for row in rows.values() if row is not None]
    median = spreads(ok)
    head = f"{mix:<{LABEL_WIDTH}}{'median (min–max)':<{MEDIAN_WIDTH}}"
    lines = [head + "".join(f"{seed:>{SEED_WIDTH}}" for seed in rows)]

    def add(label: str, key: str, render: Render = _pct) -> None:
        lines.append(_row(label, key, median, rows, render))

    add("prod. inference wait p95 (bench mixed), s", "production.p95_s", _num)
    add(f"prod. inference jobs that waited > {WAIT_THRESHOLD_S:g} s", "production.jobs", _num)
    add("  their wait, hours", "production.wait_h", _hours)
    lines.append("  share of that wait by the engine's blocker:")
    for kind in ordered(group_labels(ok, "production.kind")):
        add(f"    {kind}", f"production.kind.{kind}")
    lines.append("  capacity-blocked wait, the cluster at that cycle:")
    present = group_labels(ok, "production.capacity")
    for category in [c for c in CATEGORIES if c in present] + [c for c in present if c not in CATEGORIES]:
        add(f"    {LABELS.get(category, category)}", f"production.capacity.{category}")
    add("    (a) room free, any tier, whatever (b)", "production.capacity.a_room")
    add("    (b) lower-priority work there, whatever (a)", "production.capacity.b_lower")
    add("      some of it preemptible", "production.capacity.b_preemptible")
    add("production wait avoidable, p95 (bench mixed), s", "production.avoidable_p95_s", _num)
    add("production wait avoidable, max (bench mixed), s", "production.avoidable_max_s", _num)
    add("  the unavoidable rest, hours", "production.unavoidable_h", _hours)
    lines.append("  share of that rest by why no placement existed (cause / GPU class):")
    for cell in sorted(group_labels(ok, "production.unavoidable")):
        add(f"    {cell}", f"production.unavoidable.{cell}")
    add("idle while pending (bench mixed's figure)", "idle.figure")
    add("  its GPU-hours", "idle.gap_gpu_h", _hours)
    for dimension, title, order in (
        ("blocker", "by the engine's blocker", ordered),
        ("priority", "by priority", None),
        ("kind", "by kind", None),
        ("gang", "by gang size (GPUs)", lambda found: [g for g in GANG_SIZES if g in found]),
        ("place", "by where the first fit put it", sorted),
    ):
        lines.append(f"  share of its GPU-time {title}:")
        found = group_labels(ok, f"idle.{dimension}")
        for label in order(found) if order else found:
            add(f"    {label}", f"idle.{dimension}.{label}")
    for cross, title in (("blocker_class", "blocker / class"), ("blocker_place", "blocker / where")):
        cells = group_labels(ok, f"idle.{cross}")

        def largest_first(cell: str, cross: str = cross) -> float:
            return -(median[f"idle.{cross}.{cell}"]["median"] or 0.0)

        cells.sort(key=largest_first)
        lines.append(f"  the {TOP_CELLS} largest {title} cells (by median):")
        for cell in cells[:TOP_CELLS]:
            add(f"    {cell}", f"idle.{cross}.{cell}")
    return lines


def _longest(mix: str, runs: Sequence[CauseRun]) -> list[str]:
    lines = [f"{mix}: the {LONGEST} longest production inference waits of each seed (kind × cycles, in order)"]
    for run in runs:
        if run.waits is None:
            lines.append(f"  seed {run.seed}: FAILED: {run.error}")
            continue
        if not run.waits.longest:
            lines.append(f"  seed {run.seed}: no production inference job waited more than {WAIT_THRESHOLD_S:g} s")
        for wait in run.waits.longest:
            steps = " → ".join(f"{kind} ×{cycles}" for kind, cycles in wait.sequence) or "-"
            still = ", still waiting" if wait.still_waiting else ""
            lines.append(f"  seed {run.seed}: {wait.job} {wait.wait_s:,.0f} s{still} ({wait.request}): {steps}")
            lines.append(f"      last reason: {wait.last_reason or '-'}")
    return lines


def table(payload: dict[str, Any], runs: dict[str, list[CauseRun]]) -> str:
    """The whole table (module doc); ``runs``: per mix, its runs in seed order."""
    seeds = payload["seeds"]
    window = payload["window_s"]
    lines = [
        f"Causes (B2): microcosm on {payload['cluster']['name']} at load {payload['load']:g}, mixes "
        f"{', '.join(runs)}, seeds {seed_text(seeds)}; {(window[1] - window[0]) / 3600:g} h measured after "
        f"{window[0] / 3600:g} h of warm-up, {payload['cycle_s']:g} s cycles",
        f"command: {payload['command']}",
        started_line(payload),
        "Production waits: every second a production inference job was pending in the window, labelled with the "
        "blocker the engine gave it in that cycle; idle while pending: the metric's GPU-time, job by job.",
    ]
    for mix, mix_runs in runs.items():
        lines += ["", *_mix_block(mix, mix_runs)]
    for mix, mix_runs in runs.items():
        lines += ["", *_longest(mix, mix_runs)]
    failed = [f"{run.mix} seed {run.seed}: FAILED: {run.error}" for rs in runs.values() for run in rs if run.error]
    if failed:
        lines += ["", *failed]
    return "\n".join(lines) + "\n"
