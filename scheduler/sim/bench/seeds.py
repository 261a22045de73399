"""Seeds of a multi-seed benchmark: the ``--seeds`` parser, its text, and a figure's median and spread.

One seed is an anecdote (spec/benchmarks.md: heavy-tailed run times move single-seed figures by 10+ points), so
B1, B2 and B4 run several seeds and report each figure as its median with the spread (min–max) over them;
claims are judged on the median unless a target says "every seed" or names the worst seed, the seed whose figure
is worst in the figure's own direction (:func:`worst`).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence

from scheduler.sim.bench.registry import BenchUsageError

Spread = dict[str, float | None]  # {"median", "min", "max"} (None when no seed measured the figure)
# and, from seed_spread, "worst" and "worst_seed"


def parse_seeds(text: str) -> list[int]:
    """``"42-44,50"`` → [42, 43, 44, 50]; raises BenchUsageError on anything else."""
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        low, dash, high = part.partition("-")
        try:
            first, last = (int(low), int(high)) if dash else (int(part), int(part))
        except ValueError:
            raise BenchUsageError(f"--seeds {text!r}: {part!r} is not a seed or a range like 42-51") from None
        if first > last or first < 0:
            raise BenchUsageError(f"--seeds {text!r}: range {part!r} must go up from a non-negative seed")
        seeds.extend(seed for seed in range(first, last + 1) if seed not in seeds)
    return seeds


def seed_text(seeds: Sequence[int]) -> str:
    """``[42, 43, 44]`` → ``"42–44"``; anything not one run of consecutive seeds as a list."""
    if len(seeds) > 1 and list(seeds) == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}–{seeds[-1]}"
    return ", ".join(str(seed) for seed in seeds)


def spread(values: Iterable[float | None]) -> Spread:
    """Median, min and max of the measured values; seeds that did not measure the figure (None) are left out.

    The median of an even count is the mean of the middle two (``statistics.median``).
    """
    measured = [float(value) for value in values if value is not None]
    if not measured:
        return {"median": None, "min": None, "max": None}
    return {
        "median": round(statistics.median(measured), 6),
        "min": round(min(measured), 6),
        "max": round(max(measured), 6),
    }


def worst(values: Mapping[int, float | None], *, higher_is_better: bool) -> tuple[int, float] | None:
    """The seed whose figure is worst and that figure: the lowest when higher is better (utilization), the highest
    otherwise (a wait); seeds that did not measure it are left out, a tie goes to the lowest seed so the same runs
    always name the same seed. None when no seed measured it."""
    measured = sorted((seed, float(value)) for seed, value in values.items() if value is not None)
    if not measured:
        return None
    pick = min if higher_is_better else max
    return pick(measured, key=lambda item: item[1])  # min and max keep the first of equals: the lowest seed


def seed_spread(values: Mapping[int, float | None], *, higher_is_better: bool) -> Spread:
    """:func:`spread` of the values by seed, with the worst seed and its figure beside it (``worst``,
    ``worst_seed``; None when no seed measured the figure)."""
    figure = spread(values.values())
    found = worst(values, higher_is_better=higher_is_better)
    figure["worst"] = None if found is None else round(found[1], 6)
    figure["worst_seed"] = None if found is None else found[0]
    return figure


def spread_text(figure: Spread, render: str = "{:g}") -> str:
    """``"71.0 % (68.2–74.1)"``-style text: the median, then the spread when the seeds disagree."""
    if figure["median"] is None:
        return "-"
    median = render.format(figure["median"])
    if figure["min"] == figure["max"]:
        return median
    return f"{median} ({render.format(figure['min'])}–{render.format(figure['max'])})"
