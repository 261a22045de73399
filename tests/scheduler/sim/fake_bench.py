"""A benchmark module for the ``bench all`` tests: instant, with a claim that holds and one that does not."""

from __future__ import annotations

import argparse
from typing import Any

from scheduler.sim.bench.registry import Claim, Outcome

NAME = "fake"
HELP = "A test double."
ALL_RUNS = {"fake": ["--size", "2"], "fake-big": ["--size", "3"]}
SLOW_RUNS = {"fake-slow": ["--size", "9"]}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--size", type=int, default=1)


def run(options: dict[str, Any]) -> Outcome:
    size = options["size"]
    return Outcome(
        payload={"benchmark": NAME, "command": f"python manage.py bench fake --size {size}", "size": size},
        table=f"Fake benchmark of size {size}\nsquare {size * size}",
        claims=(Claim("size is even", f"{size}", size % 2 == 0),),
    )
