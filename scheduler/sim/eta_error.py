"""``eta_error``: how far the start time a waiting job was shown was from when it really started (spec B2).

For every job submitted in the window that **waited** — its first start came more than one scheduling cycle
after its submission — and then started:

- its wait W = first start − submission;
- the prediction: the predicted start in effect when it had waited W / 4 (the last cycle at or before
  submission + W / 4 that planned it; :attr:`scheduler.sim.records.CycleLog.etas`: the plan's
  ``Waiting.eta_s`` + that cycle's time);
- its error: |prediction − first start| / W (0 = exact; 1 = off by its whole wait).

A job that had no predicted start at that moment (the engine gave no estimate, or a baseline that gives none)
is counted in ``without_eta``, not in the percentiles: the percentiles judge the estimates given, and
``with_eta`` / ``waited`` says how often one was.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping, Sequence

from scheduler.core.model.snapshot import Job
from scheduler.sim.metrics import percentile


def prediction_at(history: Sequence[tuple[float, float | None]], t: float) -> float | None:
    """The predicted start in effect at ``t``: the last change at or before it (None: none yet, or none given)."""
    index = bisect.bisect_right([when for when, _ in history], t) - 1
    return history[index][1] if index >= 0 else None


def eta_errors(
    jobs: Iterable[Job],
    first_start: Mapping[str, float],
    etas: Mapping[str, Sequence[tuple[float, float | None]]],
    window: tuple[float, float],
    cycle_s: float,
) -> tuple[list[float], int]:
    """(the errors of the jobs that waited and had a prediction, how many waited without one)."""
    errors: list[float] = []
    without = 0
    for job in jobs:
        if not window[0] <= job.submitted_at < window[1]:
            continue
        started = first_start.get(job.id, math.inf)
        wait = started - job.submitted_at
        if not math.isfinite(wait) or wait <= cycle_s:
            continue
        predicted = prediction_at(etas.get(job.id, ()), job.submitted_at + wait / 4)
        if predicted is None:
            without += 1
            continue
        errors.append(abs(predicted - started) / wait)
    return errors, without


def eta_error_summary(errors: Sequence[float], without: int) -> dict[str, float | int | None]:
    """p50 and p90 of the errors, with how many jobs waited and how many had a predicted start."""
    return {
        "p50": round(percentile(errors, 50), 4) if errors else None,
        "p90": round(percentile(errors, 90), 4) if errors else None,
        "waited": len(errors) + without,
        "with_eta": len(errors),
    }
