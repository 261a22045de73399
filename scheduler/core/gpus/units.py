"""Units of GPU capacity: one definition for the engine, the ledger and the pages.

A GPU is shared two ways: cut into MIG compute slices (7 on a MIG-capable GPU) or time-shared in thousandths
("milli"). Usage is counted in integer units of 1/7000 GPU, in which both are exact — a slice is 1000 units
and a milli share 7 — so adding and removing thousands of slots in a cycle, or summing a month of ledger
intervals, never drifts.
"""

from __future__ import annotations

from scheduler.core.gpus.catalog import COMPUTE_SLICES

FULL_GPU_MILLI = 1000  # a whole GPU, in the thousandths a time-shared slot asks for
UNITS_PER_GPU = COMPUTE_SLICES * FULL_GPU_MILLI
UNITS_PER_SLICE = UNITS_PER_GPU // COMPUTE_SLICES  # one MIG compute slice
UNITS_PER_MILLI = UNITS_PER_GPU // FULL_GPU_MILLI  # one thousandth of a time-shared GPU


def to_units(gpus: float) -> int:
    """``gpus`` GPU-equivalents (a quota, a guarantee) in units, rounded to the nearest."""
    return round(gpus * UNITS_PER_GPU)


def gpus_text(units: int) -> str:
    """GPU-equivalents for a person: ``4``, ``2.43``."""
    return f"{round(units / UNITS_PER_GPU, 2):g}"
