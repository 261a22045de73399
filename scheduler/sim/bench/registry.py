"""The benchmarks ``manage.py bench`` knows, one module each.

A benchmark module (pure: no Django) provides:

- ``NAME`` (the subcommand) and ``HELP`` (one line);
- ``add_arguments(parser: argparse.ArgumentParser) -> None`` for its options (``--json`` is added for it);
- ``run(options: dict[str, Any]) -> Outcome``: run it and return the JSON payload, the printed table and the
  plotly figures of its ``--report`` page. Bad option combinations raise :class:`BenchUsageError` with a
  message a person can act on.

The management command is a thin edge over this registry; ``bench all`` walks it in order.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import plotly.graph_objects as go

# In the order ``bench all`` runs them and BENCHMARKS.md lists them: the spec's B1 … B5, the B2 diagnostic
# ``causes``, then ``all``.
MODULES: tuple[str, ...] = (
    "scheduler.sim.bench.openb_cli",
    "scheduler.sim.bench.mixed_cli",
    "scheduler.sim.bench.topology_cli",
    "scheduler.sim.bench.cost_cli",
    "scheduler.sim.bench.scale_cli",
    "scheduler.sim.bench.causes_cli",
    "scheduler.sim.bench.all_cli",
)


class BenchUsageError(ValueError):
    """Options that cannot run together; the message says what to change."""


@dataclass(frozen=True)
class Claim:
    """A target figure (the spec's or the project's), checked against what the run measured."""

    claim: str  # e.g. "one cycle on 1,000 × 8 GPUs with 10,000 pending in ≤ 1 s"
    measured: str  # the figure, with its unit
    reproduced: bool | None  # None: this run did not measure it


@dataclass(frozen=True)
class Outcome:
    payload: dict[str, Any]  # what ``--json`` prints; always has "benchmark" and "command"
    table: str  # what is printed otherwise; its head names the command that reproduces it
    title: str = ""  # the --report page's title (default: the table's first line)
    figures: tuple[go.Figure, ...] = field(default=())  # the --report page's charts, in order
    claims: tuple[Claim, ...] = field(default=())  # what BENCHMARKS.md marks reproduced or not


def benchmarks() -> dict[str, ModuleType]:
    """Every registered benchmark module by its ``NAME``."""
    loaded = [importlib.import_module(path) for path in MODULES]
    return {module.NAME: module for module in loaded}


def whole_number(minimum: int) -> Callable[[str], int]:
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


positive = whole_number(1)
