"""How often a job should checkpoint: the interval Microcosm proposes when a job does not set its own.

**The rule** (Young 1974, "A first order approximation to the optimum checkpoint interval"). A job that spends
``cost`` seconds writing each checkpoint and is interrupted on average every ``MTBF`` seconds loses, per second
of running, ``cost / interval`` to writing checkpoints and about ``interval / (2 × MTBF)`` to re-running the
work done since the last one; their sum is smallest at

    interval = √(2 × cost × MTBF).

Daly (2006, "A higher order estimate of the optimum checkpoint interval for restart dumps") refines this for a
cost that is not small against the MTBF: ``√(2·cost·MTBF)·[1 + ⅓·√x + x/9] − cost`` with ``x = cost / (2·MTBF)``,
which is Young's interval times about ``1 − ⅔·√x``. Here Young's form is enough: for a 60 s checkpoint and the
MTBF of one spot server at the Spot Advisor's highest bucket (≈ 149 days) the two differ by 0.1 %, and even at
a stressed 4 interruptions per server-day on a 4-server gang (MTBF 1.5 h) by 5 %; the interruption rate itself
is known only to a factor of about 4 (the Advisor's buckets), and the total loss is flat near the optimum (an
interval 10 % off raises it by 0.5 %). Daly's form matters only when a checkpoint takes a sizeable share of the
MTBF (minutes of writing against an hour between interruptions).

**The inputs.**

- MTBF of a job: its servers are interrupted independently (a Poisson process per server at the tier's rate
  per server-day), and a gang stops when any of its ``nodes`` servers does, so it is interrupted ``nodes``
  times as often as one server: ``MTBF = 86,400 / (rate × nodes)`` seconds. A rate of 0 means no interruption
  is expected (MTBF infinite).
- The tier's rate: a caller's setting; :data:`SPOT_INTERRUPTIONS_PER_NODE_DAY` and
  :data:`HARDWARE_INTERRUPTIONS_PER_NODE_DAY` are the documented defaults (``docs/gpu-facts.md``, Spot and
  preemption signals).
- Evictions by the scheduler (reclaim, priority, production, MIG reconfiguration) are not interruptions of the
  tier: they are a property of the queue, and a job is evicted whole, however many servers it spans. The
  caller may add them as ``evictions_per_job_day`` — what it observed of work like the job's (the portal: the
  team's preemptible work on that tier, ``jobs/checkpoint_intervals.py``) — so a job interrupted by its
  neighbours checkpoints as often as that costs: ``MTBF = 86,400 / (rate × nodes + evictions_per_job_day)``.
- The cost: what the job measured (the caller's median of its reported checkpoint durations), else an
  estimate — one copy of the model's training state written at a given bandwidth
  (:func:`checkpoint_bytes`, :func:`estimated_cost_s`) — else a default (:data:`DEFAULT_COST_S`). The time a
  resumed job spends reading its checkpoint back is not in Young's model.

**The bounds.** Never below the cost itself (a job cannot start a checkpoint before the previous one is
written), and never above ``max_interval_s``: with almost no interruptions the formula grows without bound, while
what the rates leave out — the job's own crashes, an operator's drain, a rate underestimated — still costs the
work since the last checkpoint. When the cap is below the cost, the cost wins.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from scheduler.core.model.snapshot import ModelProfile
from scheduler.core.model.vocabulary import CapacityTier, Dtype, ModelMode
from scheduler.core.rules.tiers import tiers_for
from scheduler.core.sizing.memory import BYTES_PER_PARAM, TRAINING_OPTIMIZER_BYTES, TRAINING_WEIGHT_BYTES

SECONDS_PER_DAY = 86_400.0
GIB = 1 << 30
# The Spot Instance Advisor's "> 20 % a month" bucket, where GPU types often sit (docs/gpu-facts.md, Spot and
# preemption signals): 0.20 interruptions per server and month.
SPOT_INTERRUPTIONS_PER_NODE_DAY = round(0.20 / 30, 4)
# Hardware and system failures of servers nobody reclaims (on-demand, reserved): Meta's Llama 3 report counts
# 419 unexpected interruptions in 54 days on 16,384 H100 GPUs in 8-GPU servers (docs/gpu-facts.md, Spot and
# preemption signals): 419 / (54 × 2,048) per server-day.
HARDWARE_INTERRUPTIONS_PER_NODE_DAY = round(419 / (54 * 2048), 4)
# An assumption: a network volume or object store as one writer sees it.
DEFAULT_WRITE_GIB_PER_S = 1.0
# An assumption until a job reports its own: 60 GiB at the bandwidth above, the training state of a model of
# about 4.6 B parameters (14 bytes a parameter, :func:`checkpoint_bytes`).
DEFAULT_COST_S = 60.0
# Four hours: at most that much work lost to what the rates do not count (module docstring, The bounds).
DEFAULT_MAX_INTERVAL_S = 4 * 3600.0


class IntervalBound(StrEnum):
    """Which bound, if any, decided the proposed interval."""

    NONE = "none"  # Young's interval itself
    COST = "cost"  # raised to the checkpoint's cost
    CAP = "cap"  # lowered to the cap (few or no interruptions expected)


@dataclass(frozen=True, slots=True)
class CheckpointInterval:
    """A proposed interval and what it came from (times in seconds; ``mtbf_s`` and ``young_s`` are ``inf`` when
    no interruption is expected)."""

    interval_s: float
    cost_s: float
    mtbf_s: float
    young_s: float  # √(2 × cost × MTBF), before the bounds
    bound: IntervalBound


def mtbf_s(*, interruptions_per_node_day: float, nodes: int, evictions_per_job_day: float = 0.0) -> float:
    """Mean time between interruptions of a job spanning ``nodes`` servers, each interrupted at
    ``interruptions_per_node_day``, and evicted as a whole at ``evictions_per_job_day``; ``inf`` when both are 0.
    Raises ValueError for a negative or infinite rate, or no server."""
    for name, rate in (
        ("interruptions_per_node_day", interruptions_per_node_day),
        ("evictions_per_job_day", evictions_per_job_day),
    ):
        if not rate >= 0 or math.isinf(rate):
            raise ValueError(f"{name} must be a finite number ≥ 0, got {rate!r}")
    if nodes < 1:
        raise ValueError(f"a job spans at least one server, got nodes={nodes!r}")
    per_day = interruptions_per_node_day * nodes + evictions_per_job_day
    if per_day == 0:
        return math.inf
    return SECONDS_PER_DAY / per_day


def checkpoint_interval(
    *,
    cost_s: float,
    interruptions_per_node_day: float,
    nodes: int,
    max_interval_s: float,
    evictions_per_job_day: float = 0.0,
) -> CheckpointInterval:
    """Young's interval for a job whose checkpoint costs ``cost_s`` on ``nodes`` servers of a tier interrupted
    at ``interruptions_per_node_day`` and evicted by the scheduler at ``evictions_per_job_day``, within the
    bounds of the module docstring. Raises ValueError, naming the argument, for a cost or cap that is not a
    positive finite number of seconds (and as :func:`mtbf_s`)."""
    for name, value in (("cost_s", cost_s), ("max_interval_s", max_interval_s)):
        if not (value > 0 and math.isfinite(value)):
            raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    mtbf = mtbf_s(
        interruptions_per_node_day=interruptions_per_node_day, nodes=nodes, evictions_per_job_day=evictions_per_job_day
    )
    young = math.sqrt(2.0 * cost_s * mtbf)
    if young < cost_s or max_interval_s < cost_s:
        return CheckpointInterval(cost_s, cost_s, mtbf, young, IntervalBound.COST)
    if young > max_interval_s:
        return CheckpointInterval(max_interval_s, cost_s, mtbf, young, IntervalBound.CAP)
    return CheckpointInterval(young, cost_s, mtbf, young, IntervalBound.NONE)


def likely_tier(tier: str, priority: str) -> CapacityTier:
    """The capacity tier a job not yet placed will most likely run on: the first its routing prefers
    (``scheduler/core/rules/tiers.py``), so ``spot-ok`` work is planned for spot's interruptions."""
    return tiers_for(tier, priority)[0]


def nodes_spanned(*, replicas: int, gpus_per_replica: int, gpus_per_node: int) -> int:
    """The fewest servers of ``gpus_per_node`` GPUs a gang of ``replicas`` × ``gpus_per_replica`` whole GPUs packs
    into (a replica never splits below a server; one larger than a server takes whole servers). The engine
    packs gangs onto few servers, so this is also the usual count; a sub-GPU request counts as one GPU."""
    if min(replicas, gpus_per_replica, gpus_per_node) < 1:
        raise ValueError(
            f"replicas, gpus_per_replica and gpus_per_node must be at least 1, got {replicas!r}, "
            f"{gpus_per_replica!r}, {gpus_per_node!r}"
        )
    if gpus_per_replica >= gpus_per_node:
        return replicas * math.ceil(gpus_per_replica / gpus_per_node)
    return math.ceil(replicas / (gpus_per_node // gpus_per_replica))


def checkpoint_bytes(model: ModelProfile) -> int:
    """Bytes of one checkpoint of ``model``: for training, the state a resumed run needs — 16-bit weights and the
    fp32 master weights, momentum and variance of mixed-precision Adam (the memory estimate's figures,
    ``scheduler/core/sizing/memory.py``; gradients are recomputed, not saved); for a served model, its weights."""
    if ModelMode(model.mode) == ModelMode.TRAINING:
        per_param = float(TRAINING_WEIGHT_BYTES + TRAINING_OPTIMIZER_BYTES)
    else:
        per_param = BYTES_PER_PARAM[Dtype(model.dtype)]
    return math.ceil(model.params_b * 1e9 * per_param)


def estimated_cost_s(model: ModelProfile, *, write_gib_per_s: float) -> float:
    """Seconds to write one checkpoint of ``model`` at ``write_gib_per_s`` (one copy, one writer)."""
    if not (write_gib_per_s > 0 and math.isfinite(write_gib_per_s)):
        raise ValueError(f"write_gib_per_s must be a positive number, got {write_gib_per_s!r}")
    return checkpoint_bytes(model) / (write_gib_per_s * GIB)
