"""``manage.py bench <benchmark> [...] [--json]``: the benchmarks of spec/benchmarks.md.

A thin edge over :mod:`scheduler.sim.bench.registry`; it needs no database and no cluster. Each benchmark is
a subcommand with its own options (``manage.py bench <name> --help``): it prints a table, or with ``--json``
one JSON object, and always the exact command that reproduces it; ``--report FILE.html`` also writes a
self-contained page with the table and the benchmark's plotly charts.

Beside the registry's pure simulations, ``bench portal`` (:mod:`benchmarks.portal_bench`) times the portal
itself; it needs a migrated database, and so does ``bench all``, which runs it too. ``bench loop``
(:mod:`benchmarks.loop_bench`) times whole live cycles in a scratch database of its own. ``bench kube``
(:mod:`benchmarks.kube_bench`) measures the Kubernetes gateway's API traffic and memory against the test emulator.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from benchmarks import kube_bench, loop_bench, portal_bench
from scheduler.sim.bench.html import write_report
from scheduler.sim.bench.registry import BenchUsageError, benchmarks


def _known() -> dict[str, ModuleType]:
    """The registry's benchmarks with ``portal``, ``loop`` and ``kube`` placed before ``all``."""
    known = benchmarks()
    last = known.pop("all")
    return {
        **known,
        portal_bench.NAME: portal_bench,
        loop_bench.NAME: loop_bench,
        kube_bench.NAME: kube_bench,
        "all": last,
    }


class Command(BaseCommand):
    help = "Run a benchmark of spec/benchmarks.md and print its table (or one JSON object with --json)."
    requires_system_checks: list[str] = []  # pure simulation: no database, no cluster
    requires_migrations_checks = False

    def add_arguments(self, parser: CommandParser) -> None:
        known = _known()
        subcommands = parser.add_subparsers(dest="benchmark", required=True, metavar="{" + ",".join(known) + "}")
        for name, module in known.items():
            sub = subcommands.add_parser(name, help=module.HELP)
            module.add_arguments(sub)
            sub.add_argument("--json", action="store_true", help="Print the result as one JSON object.")
            sub.add_argument("--report", type=Path, metavar="FILE.html", help="Also write a page with charts.")

    def handle(self, *args: Any, **options: Any) -> None:
        known = _known()
        module = known[options["benchmark"]]
        report: Path | None = options["report"]
        if report is not None and not report.parent.is_dir():
            raise CommandError(f"--report {report}: folder {report.parent} does not exist; create it or pick another")
        try:
            outcome = module.run({**options, "modules": known})
        except BenchUsageError as error:
            raise CommandError(str(error)) from None
        if options["json"]:
            self.stdout.write(json.dumps(outcome.payload, indent=2, ensure_ascii=False))
        else:
            self.stdout.write(outcome.table)
        if report is not None:
            title = outcome.title or outcome.table.splitlines()[0]
            write_report(report, title=title, table=outcome.table, figures=outcome.figures)
            self.stderr.write(f"report written to {report}")
