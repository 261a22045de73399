"""Plotly figures for the finance pages, as plain ``{"data": [...], "layout": {...}}`` dicts.

The page embeds them with ``json_script`` and ``static/billing/charts.js`` draws them with the plotly.js the
project serves itself (``static/vendor/plotly.min.js``): no CDN, and no plotly import on the server.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from billing.advisor import Breakeven, MixAdvice
from billing.report import Report
from billing.selectors import MonthFigures

Figure = dict[str, Any]
_TIER_COLORS = {"reserved": "#2f6fdf", "on-demand": "#b54708", "spot": "#067647"}


def _layout(title: str, **extra: Any) -> dict[str, Any]:
    return {
        "title": {"text": title, "font": {"size": 15}},
        "margin": {"l": 60, "r": 20, "t": 40, "b": 50},
        "legend": {"orientation": "h", "y": -0.2},
        "height": 340,
        **extra,
    }


def with_no_data_state(figure: Figure, *, message: str) -> Figure:
    """``figure`` unchanged when a trace has a point to draw; otherwise no traces, hidden axes and ``message``
    in the middle, so an empty period reads as "nothing yet" rather than as bare axes."""
    if any(any(y not in (None, 0, 0.0) for y in trace.get("y", ())) for trace in figure["data"]):
        return figure
    hidden = {"visible": False}
    layout = {
        **figure["layout"],
        "xaxis": hidden,
        "yaxis": hidden,
        "annotations": [
            {
                "text": message,
                "xref": "paper",
                "yref": "paper",
                "x": 0.5,
                "y": 0.5,
                "showarrow": False,
                "font": {"size": 14, "color": "#667085"},
            }
        ],
    }
    layout.pop("yaxis2", None)
    return {"data": [], "layout": layout, "empty": message}


def _f(value: Decimal | float) -> float:
    return round(float(value), 2)


def cost_per_team_over_months(history: Sequence[MonthFigures], *, finance: bool) -> Figure:
    months = [month.label for month in history]
    teams = sorted({slug for month in history for slug in month.by_team})
    data: list[dict[str, Any]] = [
        {"type": "bar", "name": slug, "x": months, "y": [_f(m.by_team.get(slug, 0)) for m in history]} for slug in teams
    ]
    if finance:
        data.append(
            {
                "type": "bar",
                "name": "idle capacity",
                "x": months,
                "y": [_f(m.idle) for m in history],
                "marker": {"color": "#98a2b3"},
            }
        )
        data.append(
            {
                "type": "bar",
                "name": "unused commitments",
                "x": months,
                "y": [_f(m.unused_commitments) for m in history],
                "marker": {"color": "#d0d5dd"},
            }
        )
    layout = _layout(
        "Cost per team by month (USD)", barmode="stack", yaxis={"title": "USD"}, xaxis={"type": "category"}
    )
    return with_no_data_state({"data": data, "layout": layout}, message="No costs in these months yet")


def gpu_hours_by_tier(report: Report) -> Figure:
    tiers = report.by_tier()
    names = sorted(set(tiers) | ({line.tier for line in report.capacity} if report.scope_all else set()))
    data: list[dict[str, Any]] = [
        {
            "type": "bar",
            "name": "used",
            "x": names,
            "y": [_f(tiers[t].gpu_hours) if t in tiers else 0 for t in names],
            "marker": {"color": [_TIER_COLORS.get(t, "#667085") for t in names]},
        }
    ]
    if report.scope_all:
        idle: dict[str, Decimal] = {}
        for line in report.capacity:
            idle[line.tier] = idle.get(line.tier, Decimal(0)) + line.idle_gpu_hours
        data.append(
            {
                "type": "bar",
                "name": "idle",
                "x": names,
                "y": [_f(idle.get(t, 0)) for t in names],
                "marker": {"color": "#d0d5dd"},
            }
        )
    figure = {"data": data, "layout": _layout("GPU-hours by tier", barmode="stack", yaxis={"title": "GPU-hours"})}
    return with_no_data_state(figure, message="No GPU-hours in this period yet")


def guaranteed_vs_borrowed(report: Report) -> Figure:
    teams = report.teams()
    names = [team.slug for team in teams]
    figure = {
        "data": [
            {
                "type": "bar",
                "name": "within guarantee",
                "x": names,
                "y": [_f(team.guaranteed_gpu_hours) for team in teams],
                "marker": {"color": "#2f6fdf"},
            },
            {
                "type": "bar",
                "name": "borrowed",
                "x": names,
                "y": [_f(team.borrowed_gpu_hours) for team in teams],
                "marker": {"color": "#f79009"},
            },
        ],
        "layout": _layout("Guaranteed vs borrowed GPU-hours", barmode="stack", yaxis={"title": "GPU-hours"}),
    }
    return with_no_data_state(figure, message="No GPU-hours in this period yet")


def tier_mix(advice: MixAdvice, *, start: datetime) -> Figure:
    hours = [(start + timedelta(hours=i)).strftime("%Y-%m-%d %H:%M") for i in range(advice.hours)]
    series = (
        ("reserved", advice.hourly_reserved),
        ("spot", advice.hourly_spot),
        ("on-demand", advice.hourly_on_demand),
    )
    data = [
        {
            "type": "scatter",
            "mode": "lines",
            "stackgroup": "demand",
            "name": name,
            "x": hours,
            "y": [round(v, 3) for v in values],
            "line": {"width": 0.5, "color": _TIER_COLORS[name]},
        }
        for name, values in series
    ]
    figure = {"data": data, "layout": _layout("Hourly demand served by each tier (GPUs)", yaxis={"title": "GPUs"})}
    return with_no_data_state(figure, message="No demand in this history")


def _months_cap(curve: Sequence[Breakeven]) -> float:
    months = [p.months for p in curve if p.months is not None]
    return min(max(months, default=36.0) * 1.05, 60.0)


def breakeven_over_utilization(curve: Sequence[Breakeven]) -> Figure:
    x = [round(point.utilization * 100) for point in curve]
    return {
        "data": [
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": "break-even (months)",
                "x": x,
                "y": [round(p.months, 2) if p.months is not None else None for p in curve],
            },
            {
                "type": "scatter",
                "mode": "lines",
                "name": "own $/used GPU-hour",
                "x": x,
                "yaxis": "y2",
                "y": [round(p.own_usd_per_used_gpu_hour, 3) for p in curve],
                "line": {"dash": "dot"},
            },
            {
                "type": "scatter",
                "mode": "lines",
                "name": "cloud $/used GPU-hour",
                "x": x,
                "yaxis": "y2",
                "y": [round(p.cloud_usd_per_used_gpu_hour, 3) for p in curve],
                "line": {"dash": "dash"},
            },
        ],
        "layout": _layout(
            "Colocation break-even over utilization",
            xaxis={"title": "utilization (%)"},
            # Near zero utilization break-even runs to hundreds of months: show the decision range.
            yaxis={"title": "months to break even", "range": [0, _months_cap(curve)]},
            yaxis2={"title": "USD per used GPU-hour", "overlaying": "y", "side": "right", "rangemode": "tozero"},
        ),
    }
