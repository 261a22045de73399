"""What the loop's :class:`~scheduler.models.CycleStats` row holds and under which names: the loop adds to it
each cycle (:mod:`scheduler.loop.stats`) and ``/metrics`` reads it (:mod:`portal.metrics.loop`), so both take the
row's name, phases, histogram bounds and decision kinds from here.
"""

from __future__ import annotations

STATS_NAME = "cycle"
PHASES = ("observe", "reconcile", "plan", "record", "apply")
# A cycle of a small fleet takes milliseconds, one of 5,000 nodes seconds (BENCHMARKS.md, B5): both ends covered.
PHASE_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# The report's decision lists (scheduler.loop.record) and the name each is counted under.
DECISION_KINDS = {
    "binds": "bind",
    "evictions": "eviction",
    "reconfigurations": "reconfiguration",
    "rejections": "rejection",
    "moves": "move",
    # On-demand capacity (scheduler.loop.provisioning): node requests asked, given up, autoscaled nodes given back.
    "provisions": "provision",
    "withdrawals": "withdrawal",
    "releases": "release",
}
MIG_OUTCOMES = ("success", "failed")
ETA_ERROR_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0)
