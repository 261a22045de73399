"""``manage.py scenario run FILE.json [--json] [--policy NAME] [--max-work N] [--max-cycles N]``: replay a
scenario file (spec/scenario.md).

A thin edge over :mod:`scheduler.sim`: it needs no database and no cluster. With ``--json`` the result is
one JSON object on stdout in the spec's output shape; otherwise a readable timeline. A file with errors
prints every error (``FILE: key path: reason``, or ``FILE:line:column: reason`` when it cannot be read) to
stderr and exits non-zero, as does an unknown ``--policy`` or a plan the simulator cannot apply. So does a
file asking for more replay than the bound of :mod:`scheduler.sim.scenario_work` (cycles × jobs, and
cycles), refused before anything runs; ``--max-work``/``--max-cycles`` raise it.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduler.sim import (
    PLANNERS,
    PlanViolation,
    ScenarioError,
    UnknownPlanner,
    load_scenario,
    planner_named,
    render_timeline,
    replay,
)
from scheduler.sim.planners import DEFAULT_PLANNER
from scheduler.sim.scenario_work import DEFAULT_MAX_CYCLES, DEFAULT_MAX_WORK, check_work


def _positive_int(text: str) -> int:
    try:
        value = int(text.replace("_", "").replace(",", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number such as 20000000, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


class Command(BaseCommand):
    help = "Replay a scenario file in virtual time through the scheduling engine and report what happened."
    requires_system_checks: list[str] = []  # pure simulation: no database, no cluster
    requires_migrations_checks = False

    def add_arguments(self, parser: CommandParser) -> None:
        subcommands = parser.add_subparsers(dest="subcommand", required=True, metavar="{run}")
        run = subcommands.add_parser("run", help="Replay FILE.json and print the timeline (or JSON with --json).")
        run.add_argument("file", help="Scenario file (JSON, spec/scenario.md).")
        run.add_argument("--json", action="store_true", help="Print the result as one JSON object.")
        run.add_argument(
            "--policy",
            default=DEFAULT_PLANNER,
            help=f"Scheduling policy to replay with (default {DEFAULT_PLANNER}; known: {', '.join(sorted(PLANNERS))}).",
        )
        run.add_argument(
            "--max-work",
            type=_positive_int,
            default=DEFAULT_MAX_WORK,
            metavar="N",
            help=f"Refuse a file asking for more than N cycles × jobs (default {DEFAULT_MAX_WORK:,}: minutes).",
        )
        run.add_argument(
            "--max-cycles",
            type=_positive_int,
            default=DEFAULT_MAX_CYCLES,
            metavar="N",
            help=f"Refuse a file asking for more than N cycles, until / cycle_s (default {DEFAULT_MAX_CYCLES:,}).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        path = options["file"]
        try:
            planner = planner_named(options["policy"])
        except UnknownPlanner as exc:
            raise CommandError(str(exc)) from exc
        try:
            scenario = load_scenario(path)
            check_work(scenario, max_work=options["max_work"], max_cycles=options["max_cycles"])
        except ScenarioError as exc:
            for error in exc.errors:
                self.stderr.write(error)
            raise CommandError(f"{len(exc.errors)} error(s) in {path}; nothing was replayed.") from exc
        try:
            result = replay(scenario, planner).as_dict()
        except PlanViolation as exc:
            raise CommandError(f"{path}: the replay stopped: {exc}") from exc
        except ArithmeticError as exc:
            # A value the loader should have refused (an overflow, say) broke the engine: name the file and
            # say it is a bug of the checks, rather than print a traceback.
            self.stderr.write(
                f"{path}: the replay failed on a value the scenario checks let through ({type(exc).__name__}: "
                f"{exc}); this is a bug of the checks, please report it with the file"
            )
            raise CommandError(f"the replay of {path} failed; nothing was printed.") from None
        if options["json"]:
            self.stdout.write(json.dumps(result, indent=2, ensure_ascii=False))
        else:
            self.stdout.write(render_timeline(result))
