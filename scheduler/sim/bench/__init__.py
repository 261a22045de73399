"""Benchmark drivers (spec/benchmarks.md): seeded synthetic inputs and the measurements over them.

Pure Python like the rest of :mod:`scheduler.sim`; ``manage.py bench`` is the thin edge that prints them.
"""

from scheduler.sim.bench.synthetic import ClusterShape, synthetic_snapshot

__all__ = ["ClusterShape", "synthetic_snapshot"]
