"""The proposed checkpoint interval: Young's optimum, the MTBF of a gang, the bounds, and the inputs."""

from __future__ import annotations

import math

import pytest

from scheduler.core.model.snapshot import ModelProfile
from scheduler.core.model.vocabulary import CapacityTier, Dtype, JobTier, ModelMode, Priority
from scheduler.core.rules.checkpointing import (
    DEFAULT_COST_S,
    DEFAULT_MAX_INTERVAL_S,
    DEFAULT_WRITE_GIB_PER_S,
    GIB,
    HARDWARE_INTERRUPTIONS_PER_NODE_DAY,
    SECONDS_PER_DAY,
    SPOT_INTERRUPTIONS_PER_NODE_DAY,
    IntervalBound,
    checkpoint_bytes,
    checkpoint_interval,
    estimated_cost_s,
    likely_tier,
    mtbf_s,
    nodes_spanned,
)

DAY = SECONDS_PER_DAY


def _loss_rate(interval_s: float, cost_s: float, mtbf: float) -> float:
    """Young's first-order loss per second of running: writing checkpoints plus re-running half an interval."""
    return cost_s / interval_s + interval_s / (2 * mtbf)


def test_a_gang_of_k_servers_is_interrupted_k_times_as_often() -> None:
    one = mtbf_s(interruptions_per_node_day=SPOT_INTERRUPTIONS_PER_NODE_DAY, nodes=1)
    assert one == pytest.approx(DAY / SPOT_INTERRUPTIONS_PER_NODE_DAY)
    for nodes in (2, 4, 16):
        assert mtbf_s(interruptions_per_node_day=SPOT_INTERRUPTIONS_PER_NODE_DAY, nodes=nodes) == pytest.approx(
            one / nodes
        )
    assert mtbf_s(interruptions_per_node_day=0.0, nodes=3) == math.inf


def test_the_proposal_is_youngs_optimum_when_within_the_bounds() -> None:
    rate, cost = 4.0, 60.0  # a stressed spot tier: an interruption every 6 h per server
    proposal = checkpoint_interval(cost_s=cost, interruptions_per_node_day=rate, nodes=2, max_interval_s=DAY)
    mtbf = DAY / (rate * 2)
    assert proposal.bound == IntervalBound.NONE
    assert proposal.mtbf_s == pytest.approx(mtbf)
    assert proposal.interval_s == pytest.approx(math.sqrt(2 * cost * mtbf)) == proposal.young_s
    assert proposal.cost_s == cost
    # It is the minimum of the loss: any other interval loses more.
    best = _loss_rate(proposal.interval_s, cost, mtbf)
    for factor in (0.5, 0.9, 1.1, 2.0):
        assert _loss_rate(proposal.interval_s * factor, cost, mtbf) > best


def test_more_servers_or_a_cheaper_checkpoint_mean_checkpointing_more_often() -> None:
    def interval(cost: float, nodes: int) -> float:
        return checkpoint_interval(
            cost_s=cost, interruptions_per_node_day=4.0, nodes=nodes, max_interval_s=DAY
        ).interval_s

    assert interval(60.0, 4) == pytest.approx(interval(60.0, 1) / 2)  # √(1/4)
    assert interval(15.0, 1) == pytest.approx(interval(60.0, 1) / 2)


def test_few_interruptions_are_capped_and_none_at_all_too() -> None:
    rare = checkpoint_interval(
        cost_s=DEFAULT_COST_S,
        interruptions_per_node_day=HARDWARE_INTERRUPTIONS_PER_NODE_DAY,
        nodes=1,
        max_interval_s=DEFAULT_MAX_INTERVAL_S,
    )
    assert rare.young_s > DEFAULT_MAX_INTERVAL_S
    assert (rare.interval_s, rare.bound) == (DEFAULT_MAX_INTERVAL_S, IntervalBound.CAP)
    never = checkpoint_interval(cost_s=60.0, interruptions_per_node_day=0.0, nodes=1, max_interval_s=3600.0)
    assert (never.interval_s, never.bound, never.mtbf_s, never.young_s) == (
        3600.0,
        IntervalBound.CAP,
        math.inf,
        math.inf,
    )


def test_the_interval_is_never_below_the_cost_itself() -> None:
    # A 10-minute checkpoint on a server interrupted every 86 s: Young's formula says to start the next
    # checkpoint before the last one is written.
    frantic = checkpoint_interval(cost_s=600.0, interruptions_per_node_day=1000.0, nodes=1, max_interval_s=DAY)
    assert frantic.young_s < 600.0
    assert (frantic.interval_s, frantic.bound) == (600.0, IntervalBound.COST)
    low_cap = checkpoint_interval(cost_s=600.0, interruptions_per_node_day=1.0, nodes=1, max_interval_s=60.0)
    assert (low_cap.interval_s, low_cap.bound) == (600.0, IntervalBound.COST)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"cost_s": 0.0}, "cost_s must be a positive number of seconds"),
        ({"cost_s": math.nan}, "cost_s must be a positive"),
        ({"max_interval_s": math.inf}, "max_interval_s must be a positive"),
        ({"interruptions_per_node_day": -1.0}, "interruptions_per_node_day must be a finite number ≥ 0"),
        ({"interruptions_per_node_day": math.nan}, "interruptions_per_node_day must be"),
        ({"nodes": 0}, "a job spans at least one server"),
        ({"evictions_per_job_day": -0.5}, "evictions_per_job_day must be a finite number ≥ 0"),
        ({"evictions_per_job_day": math.inf}, "evictions_per_job_day must be"),
    ],
)
def test_impossible_inputs_are_refused_by_name(arguments: dict[str, float], message: str) -> None:
    base: dict[str, float] = {"cost_s": 60.0, "interruptions_per_node_day": 1.0, "nodes": 1, "max_interval_s": DAY}
    with pytest.raises(ValueError, match=message):
        checkpoint_interval(**{**base, **arguments})  # type: ignore[arg-type]


def test_spot_ok_work_is_planned_for_spot_and_production_never() -> None:
    assert likely_tier(JobTier.SPOT_OK, Priority.NORMAL) == CapacityTier.SPOT
    assert likely_tier(JobTier.SPOT_OK, Priority.PRODUCTION) == CapacityTier.RESERVED
    assert likely_tier(JobTier.ANY, Priority.LOW) == CapacityTier.RESERVED
    assert likely_tier(JobTier.RESERVED_ONLY, Priority.HIGH) == CapacityTier.RESERVED
    with pytest.raises(ValueError):
        likely_tier("cheap", Priority.NORMAL)


@pytest.mark.parametrize(
    ("replicas", "gpus_per_replica", "gpus_per_node", "nodes"),
    [
        (1, 1, 8, 1),
        (8, 1, 8, 1),
        (9, 1, 8, 2),
        (4, 2, 8, 1),
        (3, 4, 8, 2),  # two 4-GPU replicas per server
        (4, 8, 8, 4),
        (2, 16, 8, 4),  # a replica larger than a server takes whole servers
        (3, 3, 8, 2),  # two 3-GPU replicas fit a server, the third needs another
    ],
)
def test_servers_spanned(replicas: int, gpus_per_replica: int, gpus_per_node: int, nodes: int) -> None:
    assert nodes_spanned(replicas=replicas, gpus_per_replica=gpus_per_replica, gpus_per_node=gpus_per_node) == nodes


def test_servers_spanned_refuses_nothing_to_place() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        nodes_spanned(replicas=0, gpus_per_replica=1, gpus_per_node=8)


def test_a_training_checkpoint_holds_weights_and_optimizer_state_and_takes_its_size_over_the_bandwidth() -> None:
    seven_b = ModelProfile(params_b=7, dtype=Dtype.BF16, mode=ModelMode.TRAINING)
    served = ModelProfile(params_b=7, dtype=Dtype.INT4, mode=ModelMode.INFERENCE)
    # 2 bytes of 16-bit weights + 12 of fp32 master weights and Adam moments; no gradients.
    assert checkpoint_bytes(seven_b) == 7e9 * 14
    assert checkpoint_bytes(served) == 7e9 * 0.5
    cost = estimated_cost_s(seven_b, write_gib_per_s=DEFAULT_WRITE_GIB_PER_S)
    assert cost == pytest.approx(7e9 * 14 / GIB / DEFAULT_WRITE_GIB_PER_S)
    assert estimated_cost_s(seven_b, write_gib_per_s=2 * DEFAULT_WRITE_GIB_PER_S) == pytest.approx(cost / 2)
    with pytest.raises(ValueError, match="write_gib_per_s must be a positive number"):
        estimated_cost_s(seven_b, write_gib_per_s=0.0)


def test_the_default_rates_follow_the_documented_sources() -> None:
    assert abs(SPOT_INTERRUPTIONS_PER_NODE_DAY - 0.20 / 30) < 1e-4  # "> 20 % a month"
    assert abs(HARDWARE_INTERRUPTIONS_PER_NODE_DAY - 419 / (54 * 16_384 / 8)) < 1e-4
    assert HARDWARE_INTERRUPTIONS_PER_NODE_DAY < SPOT_INTERRUPTIONS_PER_NODE_DAY


def test_observed_evictions_add_to_the_tiers_interruptions_once_per_job() -> None:
    """A job is evicted whole: its eviction rate adds once, not once per server (module docstring)."""
    assert mtbf_s(interruptions_per_node_day=0.0, nodes=4, evictions_per_job_day=12.0) == pytest.approx(7200.0)
    assert mtbf_s(interruptions_per_node_day=1.0, nodes=4, evictions_per_job_day=20.0) == pytest.approx(3600.0)
    # 12 evictions a day of a 60 s checkpoint: √(2 × 60 × 7200) ≈ 15 min, not the 4 h cap of the tier alone.
    evicted = checkpoint_interval(
        cost_s=60.0, interruptions_per_node_day=0.0038, nodes=1, max_interval_s=4 * 3600.0, evictions_per_job_day=12.0
    )
    assert evicted.bound == IntervalBound.NONE and evicted.interval_s == pytest.approx(
        math.sqrt(2 * 60 * 86400 / 12.0038), 1e-9
    )
