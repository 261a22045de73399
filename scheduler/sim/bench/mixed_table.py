"""``bench mixed``'s table and charts: per load and mix, one row per figure and two columns per policy — the
median over the seeds with the spread (min–max) when the seeds disagree, and beside it the worst seed's figure
and that seed (worst in the figure's direction: :func:`scheduler.sim.bench.mixed_summary.higher_is_better`)."""

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


def _figure(summary: PlannerSummary, key: str) -> Spread:
    return summary.figures.get(key, {"median": None, "min": None, "max": None, "worst": None, "worst_seed": None})


def _cell(summary: PlannerSummary, key: str, render: Callable[[float], str]) -> str:
    if not summary.ok:
        return "FAILED"
    figure = _figure(summary, key)
    if figure["median"] is None:
        return "-"
    median = render(figure["median"])
    assert figure["min"] is not None and figure["max"] is not None
    low, high = render(figure["min"]), render(figure["max"])
    return median if low == high else f"{median} ({low}–{high})"


def _worst_cell(summary: PlannerSummary, key: str, render: Callable[[float], str]) -> str:
    """The worst seed's figure and the seed; blank when every seed measured the same (no seed is worse)."""
    figure = _figure(summary, key)
    if not summary.ok or figure["worst"] is None or figure["worst_seed"] is None:
        return ""
    assert figure["min"] is not None and figure["max"] is not None
    if render(figure["min"]) == render(figure["max"]):
        return ""
    return f"{render(figure['worst'])} (seed {figure['worst_seed']:g})"


def mix_table(label: str, policies: Mapping[str, PlannerSummary]) -> list[str]:
    """The rows of one mix at one load, headed by ``label``."""
    names = [column for name in policies for column in (name, "worst")]
    cells = [
        [
            cell
            for summary in policies.values()
            for cell in (_cell(summary, key, render), _worst_cell(summary, key, render))
        ]
        for _, key, render in ROWS
    ]
    label_width = max(len(label), *(len(row_label) for row_label, _, _ in ROWS))
    widths = [max(len(name), *(len(row[i]) for row in cells)) for i, name in enumerate(names)]
    rows = [(label, names), *((row_label, row) for (row_label, _, _), row in zip(ROWS, cells, strict=True))]
    return [
        (f"{text:<{label_width}}  " + "  ".join(f"{c:>{w}}" for c, w in zip(row, widths, strict=True))).rstrip()
        for text, row in rows
    ]


def _label(mix: str, load: float, loads: Sequence[float]) -> str:
    """A mix's name, with its load when the run has several."""
    return mix if len(loads) == 1 else f"{mix} at load {load:g}"


def table(payload: dict[str, Any], summaries: Mapping[float, Mapping[str, Mapping[str, PlannerSummary]]]) -> str:
    """The whole text: the head (command, machine, workloads), a block per load and mix, then the notes."""
    seeds, loads = payload["seeds"], payload["loads"]
    mixes = list(next(iter(summaries.values())))
    at = f"load {loads[0]:g}" if len(loads) == 1 else f"loads {', '.join(f'{x:g}' for x in loads)}"
    head = [
        f"Mixed (B2): {payload['cluster']['name']} at {at}, mixes {', '.join(mixes)}, "
        f"seeds {seed_text(seeds)}, window {payload['window_s'][0] / 3600:g}–{payload['window_s'][1] / 3600:g} h",
        f"command: {payload['command']}",
        started_line(payload),
        f"cluster: {payload['cluster']['description']}",
    ]
    for load in loads:
        for mix, entry in payload["by_load"][f"{load:g}"]["mixes"].items():
            head.append(
                f"workload {_label(mix, load, loads)} (inference {entry['inference_share']:.0%} of the offered "
                "demand): "
            )
            for seed, workload in entry["workloads"].items():
                head[-1] += f"seed {seed}: {workload['jobs']} jobs, realised load {workload['realised_load']:.2f}; "
            head[-1] = head[-1].rstrip("; ")
    head.append(
        "each cell: median over the seeds (min–max when they differ); worst: the worst seed's figure and the seed "
        "(lowest utilization, throughput or completed; highest of the others), blank when the seeds agree"
    )
    lines: list[str] = []
    for load, by_mix in summaries.items():
        for mix, policies in by_mix.items():
            lines += ["", *mix_table(_label(mix, load, loads), policies)]
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
    for load, by_mix in summaries.items():
        for mix, policies in by_mix.items():
            for name, summary in policies.items():
                for seed, result in summary.seeds.items():
                    where = f"{_label(mix, load, loads)} seed {seed}"
                    if result.error is not None:
                        notes.append(f"{where}: {name} FAILED: {result.error}")
                    elif result.plan_repairs:
                        notes.append(
                            f"{where}: {name}: {result.plan_repairs} bind(s) on a node being reconfigured were "
                            f"dropped and re-planned (first: {result.first_repair}); --strict stops at the first "
                            "instead."
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
