"""The policy's preemption search bound as a command-line option of ``bench scale`` and ``bench mixed``.

``--preemption-search-per-team N`` plans with ``Policy(preemption_search_per_team=N)``
(``scheduler/core/rules/search_bound.py``): only each team's first N non-production pending jobs search for work
to evict; ``--preemption-search-per-team none`` lets every job search. Without it the policy's default holds.
"""

from __future__ import annotations

import argparse
from typing import Any

from scheduler.core import Policy
from scheduler.sim.bench.registry import whole_number

DEFAULT = Policy().preemption_search_per_team
UNBOUNDED = "none"
_whole = whole_number(0)


def _bound(text: str) -> int | None:
    return None if text == UNBOUNDED else _whole(text)


def add_search_bound(parser: argparse.ArgumentParser) -> None:
    """The policy's ``preemption_search_per_team`` as an option (``bench scale`` and ``bench mixed``)."""
    parser.add_argument(
        "--preemption-search-per-team",
        type=_bound,
        default=DEFAULT,
        help=(
            "Only each team's first N non-production pending jobs search for work to evict "
            f"(default: the policy's, {DEFAULT}; {UNBOUNDED}: every job)."
        ),
    )


def search_bound(options: dict[str, Any]) -> int | None:
    """The bound a run plans with: the option's, or the policy's default when the caller gave none."""
    return options.get("preemption_search_per_team", DEFAULT)


def search_bound_flag(bound: int | None) -> str:
    """The option as the run's command line repeats it: empty at the policy's default."""
    if bound == DEFAULT:
        return ""
    return f" --preemption-search-per-team {UNBOUNDED if bound is None else bound}"
