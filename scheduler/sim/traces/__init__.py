"""Loaders for the external traces in ``../shared/traces/`` that validate every row.

Each loader returns frozen records in file order or raises :class:`TraceError` listing every problem as
``file:line: what is wrong`` (at most 50 listed, the rest counted). Pure Python: no Django.
"""

from scheduler.sim.traces.openb import TraceNode, TracePod, load_openb_nodes, load_openb_pods
from scheduler.sim.traces.philly import load_philly_runtimes
from scheduler.sim.traces.rows import TraceError

__all__ = [
    "TraceError",
    "TraceNode",
    "TracePod",
    "load_openb_nodes",
    "load_openb_pods",
    "load_philly_runtimes",
]
