"""``bench <name> --report FILE.html``: a self-contained page with the table and the charts; bad paths refused."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

import plotly.graph_objects as go
import pytest
from django.core.management import CommandError, call_command

from scheduler.sim.bench.html import render_report, write_report
from scheduler.sim.bench.registry import benchmarks


def test_the_page_embeds_plotly_once_and_escapes_the_table() -> None:
    figures = [go.Figure(go.Bar(x=["a"], y=[1])), go.Figure(go.Bar(x=["b"], y=[2]))]
    page = render_report(title="T <1>", table="a < b & c", figures=figures)
    assert page.startswith("<!doctype html>")
    assert "<title>T &lt;1&gt;</title>" in page
    assert "a &lt; b &amp; c" in page
    assert page.count('class="chart"') == 2
    assert "<script src=" not in page  # offline: plotly.js is in the page, nothing is fetched
    assert page.count("Plotly.newPlot") == 2


def test_write_report_leaves_no_partial_file(tmp_path: Path) -> None:
    target = tmp_path / "r.html"
    write_report(target, title="t", table="x", figures=[])
    assert target.read_text(encoding="utf-8").endswith("</html>\n")
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]


def test_every_benchmark_has_a_name_help_and_options() -> None:
    for name, module in benchmarks().items():
        assert name == module.NAME
        assert module.HELP
        assert callable(module.add_arguments) and callable(module.run)


def test_bench_scale_writes_its_report(tmp_path: Path) -> None:
    target = tmp_path / "scale.html"
    out, err = StringIO(), StringIO()
    call_command(
        "bench", "scale", "--nodes", "4", "--pending", "8", "--repeat", "1", "--report", str(target),
        stdout=out, stderr=err,
    )  # fmt: skip
    page = target.read_text(encoding="utf-8")
    assert "python manage.py bench scale --nodes 4" in page
    assert "One scheduling cycle" in page
    assert str(target) in err.getvalue()


def test_a_report_into_a_missing_folder_is_refused_before_running(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="does not exist"):
        call_command("bench", "scale", "--nodes", "2", "--report", str(tmp_path / "no" / "r.html"), stdout=StringIO())
