"""``bench mixed``'s table and charts: per mix, one row per figure and one column per policy, each cell the
median over the seeds with the spread (min–max) when the seeds disagree."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import plotly.graph_objects as go

from scheduler.core.model.vocabulary import Priority
from scheduler.sim.bench.machine import started_line
from scheduler.sim.bench.mixed_summary import PlannerSummary
from scheduler.sim.bench.seeds import Spread, seed_text
from scheduler.sim.evictions import CAUSES


def _pct(value: float) -> str:
    return f"{value:.1%}"


def _s(value: float) -> str:
    return f"{value:,.0f} s"


def _n(value: float) -> str:
    return f"{value:g}"


ROWS: tuple[tuple[str, str, Callable[[float], str]], ...] = (
    ("effective utilization", "effective_utilization", _pct),
    ("allocation ratio", "allocation_ratio", _pct),
    ("idle while pending", "idle_while_pending", _pct),
    ("training throughput (GPU-h/h)", "training_throughput", lambda v: f"{v:.2f}"),
    ("completed", "completed", _n),
    ("evictions per 8 h", "evictions_per_8h", _n),
    *((f"  by {cause}", f"evictions.{cause}", _n) for cause in CAUSES),
    ("moves per 8 h", "moves_per_8h", _n),
    ("lost GPU-hours", "lost_gpu_hours", lambda v: f"{v:.1f}"),
    ("prod. inference wait p50", "production_inference_wait_s.p50", _s),
    ("prod. inference wait p95", "production_inference_wait_s.p95", _s),
    ("prod. inference wait max", "production_inference_wait_s.max", _s),
    ("production wait avoidable p95", "production_avoidable_wait_s.p95", _s),
    ("production wait avoidable max", "production_avoidable_wait_s.max", _s),
    *(
        row
        for cls in Priority
        for row in (
            (f"{cls.value} wait p50", f"queue_wait_s.{cls.value}.p50", _s),
            (f"{cls.value} wait p95", f"queue_wait_s.{cls.value}.p95", _s),
            (f"{cls.value} wait max", f"queue_wait_s.{cls.value}.max", _s),
            (f"{cls.value} still waiting", f"queue_wait_s.{cls.value}.still_waiting", _n),
        )
    ),
    ("eta_error p50", "eta_error.p50", lambda v: f"{v:.0%}"),
    ("eta_error p90", "eta_error.p90", lambda v: f"{v:.0%}"),
    ("waited (had an ETA)", "eta_error.with_eta", _n),
    ("waited (all)", "eta_error.waited", _n),
    ("rejected", "rejected", _n),
    ("plan repairs", "plan_repairs", _n),
    ("wall time per seed", "wall_s", lambda v: f"{v:.0f} s"),
)


def _cell(summary: PlannerSummary, key: str, render: Callable[[float], str]) -> str:
    if not summary.ok:
        return "FAILED"
    figure: Spread = summary.figures.get(key, {"median": None, "min": None, "max": None})
    if figure["median"] is None:
        return "-"
    median = render(figure["median"])
    assert figure["min"] is not None and figure["max"] is not None
    low, high = render(figure["min"]), render(figure["max"])
    return median if low == high else f"{median} ({low}–{high})"


def mix_table(mix: str, policies: Mapping[str, PlannerSummary]) -> list[str]:
    """The rows of one mix."""
    names = list(policies)
    cells = [[_cell(policies[name], key, render) for name in names] for _, key, render in ROWS]
    label_width = max(len(label) for label, _, _ in ROWS)
    widths = [max(len(name), *(len(row[i]) for row in cells)) for i, name in enumerate(names)]
    lines = [f"{mix:<{label_width}}  " + "  ".join(f"{n:>{w}}" for n, w in zip(names, widths, strict=True))]
    for (label, _, _), row in zip(ROWS, cells, strict=True):
        lines.append(f"{label:<{label_width}}  " + "  ".join(f"{c:>{w}}" for c, w in zip(row, widths, strict=True)))
    return lines


def table(payload: dict[str, Any], summaries: Mapping[str, Mapping[str, PlannerSummary]]) -> str:
    seeds = payload["seeds"]
    head = [
        f"Mixed (B2): {payload['cluster']['name']} at load {payload['load']:g}, mixes {', '.join(summaries)}, "
        f"seeds {seed_text(seeds)}, window {payload['window_s'][0] / 3600:g}–{payload['window_s'][1] / 3600:g} h",
        f"command: {payload['command']}",
        started_line(payload),
        f"cluster: {payload['cluster']['description']}",
    ]
    for mix, entry in payload["mixes"].items():
        head.append(f"workload {mix} (inference {entry['inference_share']:.0%} of the offered demand): ")
        for seed, workload in entry["workloads"].items():
            head[-1] += f"seed {seed}: {workload['jobs']} jobs, realised load {workload['realised_load']:.2f}; "
        head[-1] = head[-1].rstrip("; ")
    head.append("each cell: median over the seeds (min–max when they differ)")
    lines: list[str] = []
    for mix, policies in summaries.items():
        lines += ["", *mix_table(mix, policies)]
    notes = [
        "",
        "effective utilization: time-average of the true need of running work (an inference service: the smallest "
        "MIG profile holding its memory, /7) over capacity, work lost to evictions taken out.",
        "idle while pending: time-average share of capacity idle while pending jobs could have used it (first fit "
        "of the queue into the idle GPUs and free shares of open nodes, by true need, ignoring quotas).",
        "production wait avoidable: per production job, its waiting cycles at which a placement existed within its "
        "burst limit on free capacity and lower-priority work (a whole GPU serving any MIG profile, a larger "
        "instance a smaller one; scheduler/sim/avoidable.py), one cycle each.",
        "eta_error: |predicted − actual start| / wait for jobs that waited over one cycle, the prediction taken at a "
        "quarter of the wait; over the jobs that had one (baselines give none).",
        "Waits of jobs still waiting at the end count as their wait so far.",
    ]
    for mix, policies in summaries.items():
        for name, summary in policies.items():
            for seed, result in summary.seeds.items():
                if result.error is not None:
                    notes.append(f"{mix} seed {seed}: {name} FAILED: {result.error}")
                elif result.plan_repairs:
                    notes.append(
                        f"{mix} seed {seed}: {name}: {result.plan_repairs} bind(s) on a node being reconfigured were "
                        f"dropped and re-planned (first: {result.first_repair}); --strict stops at the first instead."
                    )
    return "\n".join(head + lines + notes)


def utilization_figure(mix: str, seed: int, results: Sequence[tuple[str, Any]]) -> go.Figure:
    figure = go.Figure()
    for name, result in results:
        if not result.series:
            continue
        hours = [t / 3600 for t, _, _ in result.series]
        figure.add_trace(go.Scatter(x=hours, y=[e for _, e, _ in result.series], name=f"{name} effective"))
        figure.add_trace(
            go.Scatter(
                x=hours,
                y=[a for _, _, a in result.series],
                name=f"{name} allocated",
                line={"dash": "dot"},
                visible="legendonly",
            )
        )
    figure.update_layout(
        title=f"Utilization over time (10-minute buckets), {mix}, seed {seed}",
        xaxis_title="hours",
        yaxis_title="share of capacity",
    )
    return figure


def wait_figure(summaries: Mapping[str, Mapping[str, PlannerSummary]]) -> go.Figure:
    figure = go.Figure()
    classes = [p.value for p in Priority]
    for mix, policies in summaries.items():
        for name, summary in policies.items():
            if not summary.ok:
                continue
            y = [summary.median(f"queue_wait_s.{c}.p95") for c in classes]
            figure.add_trace(go.Bar(x=classes, y=y, name=f"{mix} {name}"))
    figure.update_layout(
        title="Queueing delay by priority class (p95, median over seeds)",
        yaxis_title="seconds",
        yaxis_type="log",
        barmode="group",
    )
    return figure
