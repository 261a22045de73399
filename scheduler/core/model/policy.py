"""The engine's tunables: one frozen value per cycle, built from settings.SCHEDULER or a scenario's policy."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True, slots=True)
class Policy:
    cycle_s: float = 10.0
    # Node drain + MIG Manager + device-plugin restart: minutes (docs/gpu-facts.md, MIG Manager reconfiguration flow).
    mig_reconfigure_s: float = 300.0
    min_runtime_s: float = 300.0  # freshly started preemptible work is safe from preemption this long
    ping_pong_window_s: float = 1800.0  # a victim may not preempt its preemptor back within this window
    reconfiguration_hysteresis_cycles: int = 3  # MIG demand must persist this many cycles before a reconfiguration
    memory_safety_margin: float = 0.10  # added to every memory estimate before right-sizing
    fairness: bool = True  # False: plain priority/FIFO order (baselines)
    mig: bool = True  # False: MIG layouts are left alone and MIG requests cannot be served (baselines)
    reservation_depth: int = 4  # the first N capacity-blocked whole-GPU jobs in order get a reservation (0: none)
    default_runtime_s: float = 3600.0  # run-time estimate of a job with no duration_s and no team history
    # Consolidation (docs/scheduling-rules.md, Place now, consolidate later): production placed on larger capacity
    # than its right size is moved to a right-sized slice once one is free, within these bounds.
    consolidation_hysteresis_cycles: int = 3  # it has run oversized at least this many cycles before a move
    consolidation_interval_s: float = 3600.0  # and has not moved in the last this many seconds
    moves_per_cycle: int = 2  # at most this many moves start per cycle (0: consolidation off)
    moves_per_job_per_day: int = 3  # and at most this many per job in any 24 hours
    # Count such production as demand for its right-sized profile when idle MIG GPUs are reconfigured. Off: on B2 it
    # closed nodes for the change's minutes and raised production's wait p95 from 10 s to 300 s
    # (docs/benchmarks/consolidation.md).
    consolidation_reconfigures: bool = False
    # Only the first N non-production pending jobs of each team, in the cycle's order, search for work to evict;
    # the rest take free capacity only (scheduler/core/rules/search_bound.py). None: unbounded. 100 kept every
    # scenario's plans and B2's, and took a 5,000-node cycle to a third of its time (docs/benchmarks/scale.md).
    preemption_search_per_team: int | None = 100
    # On-demand capacity for peaks (docs/scheduling-rules.md §9; only where the snapshot offers autoscaled pools): a
    # waiting job that may use on-demand and would otherwise wait longer than provision_wait_s gets nodes asked for;
    # after a request of its fails it asks again provision_retry_s later; an autoscaled node empty for
    # release_idle_s is given back.
    provision_wait_s: float = 300.0
    provision_retry_s: float = 900.0
    release_idle_s: float = 600.0

    def __post_init__(self) -> None:
        bound = self.preemption_search_per_team
        if bound is not None and (isinstance(bound, bool) or not isinstance(bound, int) or bound < 0):
            raise ValueError(f"preemption_search_per_team must be None or a whole number >= 0, got {bound!r}")

    @classmethod
    def from_mapping(cls, values: dict[str, Any]) -> Policy:
        """Build from a settings or scenario mapping; unknown keys are an error that names them."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown policy keys: {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**values)
