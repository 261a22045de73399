"""B4's goodput comparison: checkpoints that cost GPU time, the proposed intervals, the accounting of useful, lost
and checkpoint GPU-hours, and the figures in ``bench cost``'s output (a short run, no timing)."""

from __future__ import annotations

import json
import math
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command

from scheduler.core.model.snapshot import Job, Request
from scheduler.core.model.vocabulary import JobKind, JobTier, Priority
from scheduler.core.rules.checkpointing import DEFAULT_COST_S, DEFAULT_MAX_INTERVAL_S, checkpoint_interval
from scheduler.sim import parse_scenario, replay
from scheduler.sim.bench.cost import CostConfig
from scheduler.sim.bench.goodput import (
    FIXED,
    PROPOSED,
    Goodput,
    costed,
    goodput_of,
    proposed_interval,
    with_checkpoint_cost,
)
from scheduler.sim.events import Submit
from tests.scheduler.sim.fakes import first_fit
from tests.untraced import untraced

GPUS = 2
WORK_S = 3000.0
INTERVAL_S = 600.0
COST_S = 60.0


def _job(**fields: Any) -> Job:
    base: dict[str, Any] = {
        "id": "train",
        "team": "t",
        "kind": JobKind.TRAINING,
        "request": Request(gpus=GPUS),
        "preemptible": True,
        "checkpoint_interval_s": INTERVAL_S,
        "duration_s": WORK_S,
        "tier": JobTier.SPOT_OK,
    }
    return Job(**{**base, **fields})


def test_each_checkpoint_an_uninterrupted_run_writes_costs_its_time() -> None:
    job = with_checkpoint_cost(_job(), INTERVAL_S, COST_S)
    writes = math.ceil(WORK_S / INTERVAL_S) - 1  # none after the last stretch: the job completes instead
    assert job.checkpoint_interval_s == INTERVAL_S + COST_S
    assert job.duration_s == WORK_S + writes * COST_S
    exact = with_checkpoint_cost(_job(duration_s=INTERVAL_S), INTERVAL_S, COST_S)
    assert exact.duration_s == INTERVAL_S  # done before its first checkpoint
    assert with_checkpoint_cost(_job(duration_s=None), INTERVAL_S, COST_S).duration_s is None


def test_costed_changes_only_the_jobs_it_is_given_intervals_for() -> None:
    doc = _doc(interrupt_at=None)
    doc["events"].append({"t": 0, "submit": {"id": "other", "team": "t", "gpus": 1, "checkpoint_interval_s": 900}})
    scenario = costed(parse_scenario(doc, source="test.json"), {"train": 1200.0}, COST_S)
    jobs = {e.action.job.id: e.action.job for e in scenario.events if isinstance(e.action, Submit)}
    assert jobs["train"].checkpoint_interval_s == 1200.0 + COST_S
    assert jobs["other"].checkpoint_interval_s == 900


def test_the_proposal_plans_spot_work_for_the_runs_rate_over_the_servers_it_packs_into() -> None:
    config = CostConfig(checkpoint_cost_s=COST_S)
    gang = _job(replicas=3, request=Request(gpus=4))
    expected = checkpoint_interval(
        cost_s=COST_S, interruptions_per_node_day=4.0, nodes=2, max_interval_s=config.max_checkpoint_interval_s
    ).interval_s
    assert proposed_interval(gang, rate_per_node_day=4.0, config=config, gpus_per_node=8) == pytest.approx(expected)
    # Production never runs on spot, and the simulated on-demand and reserved servers are never interrupted.
    production = _job(priority=Priority.PRODUCTION)
    assert proposed_interval(production, rate_per_node_day=4.0, config=config, gpus_per_node=8) == (
        config.max_checkpoint_interval_s
    )


def test_the_goodput_defaults_are_the_portals() -> None:
    config = CostConfig()
    assert (config.checkpoint_cost_s, config.max_checkpoint_interval_s) == (DEFAULT_COST_S, DEFAULT_MAX_INTERVAL_S)
    with pytest.raises(ValueError, match="checkpoint_cost_s must be a positive number of seconds"):
        CostConfig(checkpoint_cost_s=0.0)


def _doc(*, interrupt_at: float | None) -> dict[str, Any]:
    events: list[dict[str, Any]] = [
        {
            "t": 0,
            "submit": {
                "id": "train",
                "team": "t",
                "gpus": GPUS,
                "preemptible": True,
                "checkpoint_interval_s": INTERVAL_S,
                "duration_s": WORK_S,
                "tier": "spot-ok",
            },
        }
    ]
    if interrupt_at is not None:
        events.append({"t": interrupt_at, "interrupt": {"node": "spot", "notice_s": 120}})
    return {
        "name": "goodput",
        "cycle_s": 10,
        "until": 20_000,
        "cluster": {
            "nodes": [
                {"name": "spot", "gpu_model": "A100-SXM4-80GB", "gpus": 8, "tier": "spot"},
                {"name": "backup", "gpu_model": "A100-SXM4-80GB", "gpus": 8},
            ]
        },
        "teams": [{"name": "t", "guaranteed_gpus": 16}],
        "events": events,
    }


@pytest.mark.parametrize("interrupt_at", [None, 1500.0])
def test_useful_gpu_hours_are_the_jobs_work_however_often_it_checkpoints_and_is_interrupted(
    interrupt_at: float | None,
) -> None:
    parsed = parse_scenario(_doc(interrupt_at=interrupt_at), source="test.json")
    scenario = costed(parsed, {"train": INTERVAL_S}, COST_S)
    result = replay(scenario, first_fit)
    assert result.final["jobs"]["train"]["state"] == "completed"
    window = (0.0, 20_000.0)
    figures = goodput_of(result, {"train": _job()}, cost_s=COST_S, window=window, spot_events=int(bool(interrupt_at)))
    checkpoints = [e for e in result.events if e["type"] == "checkpointed"]
    assert figures.checkpoints == len(checkpoints) > 0
    assert figures.checkpoint_gpu_hours == pytest.approx(len(checkpoints) * COST_S * GPUS / 3600)
    # Whatever was lost and re-run, and however many checkpoints were written, what is left is the work itself.
    assert figures.useful_gpu_hours == pytest.approx(WORK_S * GPUS / 3600)
    assert figures.allocated_gpu_hours == pytest.approx(
        figures.useful_gpu_hours + figures.lost_gpu_hours + figures.checkpoint_gpu_hours
    )
    assert figures.goodput == pytest.approx(figures.useful_gpu_hours / figures.allocated_gpu_hours)
    assert figures.interval_s_median == INTERVAL_S and figures.lost_other_gpu_hours == 0
    if interrupt_at is None:
        assert figures.lost_gpu_hours == 0 and figures.lost_per_interruption is None
    else:
        gone = interrupt_at + 120
        last = max(e["t"] for e in checkpoints if e["t"] <= gone)
        assert figures.lost_spot_gpu_hours == pytest.approx((gone - last) * GPUS / 3600)
        assert figures.lost_per_interruption == figures.lost_spot_gpu_hours
        assert figures.goodput is not None and figures.goodput < 1


def test_goodput_of_nothing_is_not_measured() -> None:
    empty = Goodput(0.0, 0.0, 0.0, 0.0, 0, 0, None)
    assert empty.goodput is None and empty.lost_per_interruption is None


@untraced
def test_bench_cost_reports_fixed_against_proposed_intervals_per_spot_rate() -> None:
    out = StringIO()
    call_command(
        "bench", "cost", "--hours", "0.5", "--warmup-hours", "0", "--pool-factor", "1", "--seeds", "42",
        "--mix", "balanced", "--stress-interruptions-per-node-day", "24", "--checkpoint-cost-s", "30", "--json",
        stdout=out, stderr=StringIO(),
    )  # fmt: skip
    payload = json.loads(out.getvalue())
    assert "--stress-interruptions-per-node-day 24 --checkpoint-cost-s 30" in payload["command"]
    entry = payload["mixes"]["balanced"]["goodput"]
    assert list(entry) == [f"{CostConfig().interruptions_per_node_day:g}", "24"]
    for runs in entry.values():
        assert list(runs) == [FIXED, PROPOSED]
        for run in runs.values():
            figures = run["seeds"]["42"]
            if figures["goodput"] is not None:
                assert 0 < figures["goodput"] <= 1
            assert figures["checkpoint_gpu_hours"] >= 0 and figures["lost_spot_gpu_hours"] >= 0
        fixed, proposed = (runs[name]["seeds"]["42"] for name in (FIXED, PROPOSED))
        assert fixed["spot_interruptions"] == proposed["spot_interruptions"]  # the same interruptions
    stressed, calm = entry["24"][PROPOSED]["seeds"]["42"], entry[next(iter(entry))][PROPOSED]["seeds"]["42"]
    assert stressed["interval_min_median"] < calm["interval_min_median"]  # more interruptions: checkpoint sooner
