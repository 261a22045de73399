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

    @classmethod
    def from_mapping(cls, values: dict[str, Any]) -> Policy:
        """Build from a settings or scenario mapping; unknown keys are an error that names them."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown policy keys: {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**values)
