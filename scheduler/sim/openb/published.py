"""The FGD authors' published per-run results (``../shared/traces/fgd-atc23-expected-results/``).

``analysis_allo_discrete.csv`` has one row per (pod list, policy, seed) with the GPU allocation % per
arrived-workload bucket; the published headline is 100 − the value in bucket 100. This module reads those
rows for our policy names; it checks the columns it needs and says which file and line is wrong otherwise.
"""

from __future__ import annotations

import csv
import statistics
from dataclasses import dataclass
from pathlib import Path

from scheduler.sim.openb.curve import LAST_BUCKET
from scheduler.sim.traces import TraceError

ALLOCATION_FILE = "analysis_allo_discrete.csv"

#: Our policy name → the artifact's ``sc_policy`` label.
PUBLISHED_LABELS = {
    "random": "01-Random",
    "dotprod": "02-DotProd",
    "gpu-clustering": "03-GpuClustering",
    "gpu-packing": "04-GpuPacking",
    "bestfit": "05-BestFit",
    "fgd": "06-FGD",
}

#: The 17 pod lists of the paper's matrix (PROTOCOL.md step 8), default first.
PAPER_VARIANTS = (
    "default",
    "cpu050",
    "cpu100",
    "cpu200",
    "cpu250",
    "gpushare40",
    "gpushare60",
    "gpushare80",
    "gpushare100",
    "gpuspec10",
    "gpuspec20",
    "gpuspec25",
    "gpuspec33",
    "multigpu20",
    "multigpu30",
    "multigpu40",
    "multigpu50",
)


@dataclass(frozen=True, slots=True)
class Summary:
    """Unallocated GPU % at arrived = 100 % over seeds: median, mean, sample standard deviation."""

    median: float
    mean: float
    std: float
    per_seed: dict[int, float]

    @classmethod
    def of(cls, per_seed: dict[int, float]) -> Summary:
        values = list(per_seed.values())
        std = statistics.stdev(values) if len(values) > 1 else 0.0
        return cls(
            round(statistics.median(values), 2), round(statistics.mean(values), 2), round(std, 2), dict(per_seed)
        )

    def as_dict(self) -> dict[str, object]:
        return {
            "median": self.median,
            "mean": self.mean,
            "std": self.std,
            "per_seed": {str(seed): value for seed, value in sorted(self.per_seed.items())},
        }


@dataclass(frozen=True, slots=True)
class Published:
    """One (pod list, policy): the summary at arrived = 100 % and the mean unallocated % per bucket."""

    summary: Summary
    curve: tuple[tuple[int, float], ...]


def load_published(folder: Path) -> dict[tuple[str, str], Published]:
    """(pod-list stem, our policy name) → its published rows, summarised.

    ``folder`` holds :data:`ALLOCATION_FILE`. A missing file raises :class:`TraceError` naming it.
    """
    path = folder / ALLOCATION_FILE
    labels = {label: name for name, label in PUBLISHED_LABELS.items()}
    runs: dict[tuple[str, str], dict[int, float]] = {}
    buckets: dict[tuple[str, str], dict[int, list[float]]] = {}
    try:
        handle = path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise TraceError(str(path), [f"{path}:0: cannot open: {exc.strerror}"], 1) from exc
    with handle:
        reader = csv.DictReader(handle)
        missing = {"workload", "sc_policy", "seed", "100"} - set(reader.fieldnames or ())
        if missing:
            raise TraceError(str(path), [f"{path}:1: missing column(s) {', '.join(sorted(missing))}"], 1)
        for row in reader:
            policy = labels.get(row["sc_policy"])
            if policy is None or not row["100"]:
                continue
            try:
                seed = int(row["seed"])
                cells = {b: float(row[str(b)]) for b in range(LAST_BUCKET + 1) if row.get(str(b))}
            except ValueError:
                line = reader.line_num
                raise TraceError(str(path), [f"{path}:{line}: the seed or a bucket is not a number"], 1) from None
            key = (row["workload"], policy)
            runs.setdefault(key, {})[seed] = round(100.0 - cells[100], 2)
            by_bucket = buckets.setdefault(key, {})
            for bucket, allocation in cells.items():
                by_bucket.setdefault(bucket, []).append(100.0 - allocation)
    return {
        key: Published(
            Summary.of(per_seed),
            tuple((b, round(sum(v) / len(v), 2)) for b, v in sorted(buckets[key].items())),
        )
        for key, per_seed in runs.items()
    }
