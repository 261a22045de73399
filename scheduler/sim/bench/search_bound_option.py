"""The policy's preemption search bound as a command-line option of ``bench scale`` and ``bench mixed``.

``--preemption-search-per-team N`` plans with ``Policy(preemption_search_per_team=N)``
(``scheduler/core/rules/search_bound.py``): only each team's first N non-production pending jobs search for work
to evict. Without it the policy's default (unbounded) holds.
"""

from __future__ import annotations

import argparse

from scheduler.sim.bench.registry import whole_number


def add_search_bound(parser: argparse.ArgumentParser) -> None:
    """The policy's ``preemption_search_per_team`` as an option (``bench scale`` and ``bench mixed``)."""
    parser.add_argument(
        "--preemption-search-per-team",
        type=whole_number(0),
        help="Only each team's first N non-production pending jobs search for work to evict (default: all).",
    )


def search_bound_flag(bound: int | None) -> str:
    """The option as the run's command line repeats it: empty when unbounded."""
    return "" if bound is None else f" --preemption-search-per-team {bound}"
