"""Per-pod measurements bucketed by arrived workload, as the artifact's published tables are (step 7).

Each measurement is (arrived GPU milli, allocated GPU milli) after one pod. Its arrived ratio is rounded to a
whole percent (Python's ``round``, half to even) and its allocation ratio to two decimals; a bucket's value is
the mean of its measurements, rounded to two decimals. A bucket no measurement rounds to takes the mean of
the measurements whose rounded ratio is within one percent of it (the artifact's fallback), and stays empty
when there are none. Buckets run from 0 to 130 %.
"""

from __future__ import annotations

from collections.abc import Sequence

LAST_BUCKET = 130


def bucket_curve(samples: Sequence[tuple[int, int]], capacity_milli: int) -> tuple[tuple[int, float], ...]:
    """(arrived %, allocation %) per bucket with a value, ascending (module rules)."""
    gpus = capacity_milli / 1000
    by_bucket: dict[int, list[float]] = {}
    for arrived, allocated in samples:
        bucket = int(round(arrived / gpus / 10, 0))
        by_bucket.setdefault(bucket, []).append(round(allocated / gpus / 10, 2))
    curve: list[tuple[int, float]] = []
    for bucket in range(LAST_BUCKET + 1):
        values = by_bucket.get(bucket)
        if values is None:
            values = [v for near in (bucket - 1, bucket + 1) for v in by_bucket.get(near, [])]
        if values:
            curve.append((bucket, round(sum(values) / len(values), 2)))
    return tuple(curve)
