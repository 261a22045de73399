"""Prometheus histograms from counts the database gives: cumulative counts per upper bound, a count and a sum."""

from __future__ import annotations

from collections.abc import Sequence


def histogram_buckets(bounds: Sequence[float], cumulative: Sequence[int], count: int) -> list[tuple[str, float]]:
    """The ``(le, count)`` pairs of a histogram: one per bound, then ``+Inf`` holding every observation."""
    return [*((_le(bound), float(n)) for bound, n in zip(bounds, cumulative, strict=True)), ("+Inf", float(count))]


def _le(bound: float) -> str:
    # The text format writes bounds as floats ("0.5", "10.0"); prometheus_client does the same for its own.
    return repr(float(bound))
