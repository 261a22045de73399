"""``--report FILE.html``: one self-contained page per benchmark run — the table, the command, the charts.

The page embeds plotly.js itself (no CDN: it opens offline, attached to a ticket or mailed), so it weighs a few
megabytes whatever the number of charts. Figures come from the benchmark as plotly figures; the page only lays
them out under the benchmark's table.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path

import plotly.graph_objects as go
import plotly.io as pio


def render_report(*, title: str, table: str, figures: Sequence[go.Figure]) -> str:
    """The whole page as text; plotly.js is embedded once, before the first chart."""
    charts = [
        pio.to_html(figure, full_html=False, include_plotlyjs=(index == 0), default_width="100%")
        for index, figure in enumerate(figures)
    ]
    body = "\n".join(f'<section class="chart">{chart}</section>' for chart in charts)
    return (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title>"
        "<style>body{font-family:system-ui,sans-serif;margin:2rem auto;max-width:70rem;padding:0 1rem;color:#222}"
        "pre{background:#f6f6f6;padding:1rem;overflow-x:auto;font-size:.85rem}"
        ".chart{margin:2rem 0}</style></head><body>"
        f"<h1>{html.escape(title)}</h1><pre>{html.escape(table)}</pre>{body}</body></html>\n"
    )


def write_report(path: Path, *, title: str, table: str, figures: Sequence[go.Figure]) -> None:
    """Write the page to ``path`` (through a temporary file, so a failed run never leaves half a page)."""
    text = render_report(title=title, table=table, figures=figures)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text, encoding="utf-8")
    partial.replace(path)
