"""B4 ``cost``: the pieces of the protocol on hand-made inputs, and one short run end to end (no timing)."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from scheduler.core.model.snapshot import Job, Node, Request
from scheduler.core.model.vocabulary import CapacityTier, Interconnect, JobKind, JobTier, Priority
from scheduler.sim.bench.cost import (
    AWS_NOTICE_S,
    RUN_AUTOSCALED,
    RUN_NAIVE,
    RUN_ON_DEMAND,
    RUN_TIERED,
    CostConfig,
    interruptions,
    job_tier,
    non_spot,
    pool,
    priced,
    tiered_nodes,
)
from scheduler.sim.bench.cost_cli import _table
from scheduler.sim.bench.cost_sizing import peak, reserved_baseline, time_quantile
from scheduler.sim.bench.cost_slo import LATE_CAUSES
from scheduler.sim.events import AddNode, Interrupt
from scheduler.sim.prices import price_per_gpu_hour
from scheduler.sim.workload.clusters import cluster_named
from tests.untraced import untraced


def _node(name: str, model: str = "A100-SXM4-80GB", gpus: int = 8) -> Node:
    return Node(name, model, gpus, Interconnect.NVSWITCH, leaf="leaf-1", spine="s")


def _job(**fields: object) -> Job:
    base: dict[str, object] = {"id": "j", "team": "t", "kind": JobKind.TRAINING, "request": Request(gpus=1)}
    return Job(**{**base, **fields})  # type: ignore[arg-type]


def test_prices_follow_the_facts_sheet() -> None:
    assert price_per_gpu_hour("H100-SXM5-80GB", "on-demand") == 6.88
    assert price_per_gpu_hour("A100-SXM4-80GB", CapacityTier.SPOT) == pytest.approx((1.08 + 1.25) / 2)
    assert price_per_gpu_hour("A100-PCIE-40GB", "reserved") == pytest.approx(2.74 * 0.65, abs=1e-3)
    with pytest.raises(KeyError, match="unknown GPU model 'B200'"):
        price_per_gpu_hour("B200", "spot")


def test_time_quantile_weighs_levels_by_how_long_they_last() -> None:
    # 0 GPUs for 10 s, 8 GPUs for 30 s, 4 GPUs for 60 s over the window [0, 100).
    steps = [(10.0, 8.0), (40.0, -4.0)]
    assert time_quantile(steps, (0.0, 100.0), 0.05) == 0.0
    assert time_quantile(steps, (0.0, 100.0), 0.35) == 4.0  # 0 covers 10 %, 4 covers up to 70 %
    assert time_quantile(steps, (0.0, 100.0), 0.95) == 8.0
    assert time_quantile(steps, (50.0, 100.0), 0.99) == 4.0  # only what falls inside the window counts
    assert time_quantile([], (0.0, 0.0), 0.5) == 0.0
    assert peak(steps) == 8.0


def test_the_reserved_baseline_is_the_discount_quantile_of_non_spot_demand_in_whole_servers() -> None:
    nodes = [_node(f"a{i}") for i in range(4)] + [_node(f"h{i}", "H100-SXM5-80GB") for i in range(2)]
    window = (0.0, 100.0)
    demand = {"A100-SXM4-80GB": [(0.0, 20.0)], "H100-SXM5-80GB": [(0.0, 7.0)]}  # 20 GPUs always: 2.5 servers
    # 7 H100s is less than one server: none reserved (production overflows to on-demand, never to spot)
    assert reserved_baseline(demand, nodes, window) == {"A100-SXM4-80GB": 2, "H100-SXM5-80GB": 0}
    assert reserved_baseline({"A100-SXM4-80GB": [(0.0, 99.0)]}, nodes, window)["A100-SXM4-80GB"] == 4


def test_tiers_reserve_the_first_servers_then_alternate_spot_and_on_demand() -> None:
    nodes = [_node(f"a{i}") for i in range(4)]
    tiered = tiered_nodes(nodes, {"A100-SXM4-80GB": 1})
    assert [n.tier for n in tiered] == ["reserved", "spot", "on-demand", "spot"]
    assert tiered[0].price_per_gpu_hour == 0.0  # paid by the hour of the window, not metered
    assert tiered[1].price_per_gpu_hour == price_per_gpu_hour("A100-SXM4-80GB", "spot")
    assert priced(nodes[0], CapacityTier.ON_DEMAND).price_per_gpu_hour == 3.43


def test_routing_sends_checkpointed_training_to_spot_and_production_reserved_first() -> None:
    # production: any (reserved first, then on-demand); the engine never puts production on spot
    assert job_tier(_job(priority=Priority.PRODUCTION, kind=JobKind.INFERENCE)) == JobTier.ANY
    production_checkpointed = _job(priority=Priority.PRODUCTION, preemptible=True, checkpoint_interval_s=600)
    assert job_tier(production_checkpointed) == JobTier.ANY
    assert job_tier(_job(preemptible=True, checkpoint_interval_s=600)) == JobTier.SPOT_OK
    assert not non_spot(_job(preemptible=True, checkpoint_interval_s=600))
    assert non_spot(_job(priority=Priority.PRODUCTION, kind=JobKind.INFERENCE))
    assert job_tier(_job(preemptible=True)) == JobTier.ANY  # nothing saved: a reclaim would lose it all
    assert job_tier(_job(checkpoint_interval_s=600)) == JobTier.ANY


def test_interruptions_are_seeded_and_every_lost_server_comes_back() -> None:
    nodes = tiered_nodes([_node(f"a{i}") for i in range(6)], {})
    kwargs = {"rate_per_node_day": 24.0, "until_s": 7200.0, "replace_s": 600.0}
    first = interruptions(nodes, seed=1, **kwargs)  # type: ignore[arg-type]
    assert first == interruptions(nodes, seed=1, **kwargs)  # type: ignore[arg-type]
    assert first != interruptions(nodes, seed=2, **kwargs)  # type: ignore[arg-type]
    assert [t for t, _ in first] == sorted(t for t, _ in first)
    cuts = [(t, a) for t, a in first if isinstance(a, Interrupt)]
    backs = [(t, a) for t, a in first if isinstance(a, AddNode)]
    assert len(cuts) == len(backs) > 0
    assert all(a.node in {n.name for n in nodes} or "~" in a.node for _, a in cuts)
    assert all(a.notice_s == AWS_NOTICE_S for _, a in cuts)
    assert all(t < 7200.0 for t, _ in cuts)
    assert all(a.node.tier == CapacityTier.SPOT for _, a in backs)
    assert interruptions(nodes, seed=1, rate_per_node_day=0.0, until_s=7200.0, replace_s=1.0) == []


def test_the_pool_copies_every_server_under_its_own_leaves() -> None:
    cluster = cluster_named("mixed-64")
    nodes = pool(cluster, 2)
    assert sum(n.gpu_count for n in nodes) == 2 * cluster.gpus
    assert len({n.name for n in nodes}) == len(nodes)
    assert {n.leaf for n in nodes if n.name.endswith("-2")} & {n.leaf for n in nodes if n.name.endswith("-1")} == set()


def test_bad_configuration_is_refused_with_the_reason() -> None:
    with pytest.raises(ValueError, match=r"pool_factor must be at least 1.*unknown planner 'nope'"):
        CostConfig(pool_factor=0, planner="nope")


@untraced
def test_bench_cost_end_to_end_on_a_short_window() -> None:
    out = StringIO()
    call_command(
        "bench", "cost", "--hours", "0.25", "--warmup-hours", "0", "--pool-factor", "1", "--seeds", "42-43",
        "--mix", "serving", "--jobs", "1", "--json", stdout=out, stderr=StringIO(),
    )  # fmt: skip
    payload = json.loads(out.getvalue())
    assert payload["command"].startswith("python manage.py bench cost --mix serving --seeds 42-43 --load 1.2")
    assert list(payload["mixes"]) == ["serving"] and payload["seeds"] == [42, 43]
    entry = payload["mixes"]["serving"]
    # Run D (autoscaled on-demand) beside the fixed pools; run C only when asked for.
    assert list(entry["runs"]) == [RUN_NAIVE, RUN_ON_DEMAND, RUN_TIERED, RUN_AUTOSCALED]
    naive = entry["runs"][RUN_NAIVE]
    assert naive["median"]["reserved_cost"]["max"] == 0 and naive["median"]["savings_vs_naive_on_demand"]["max"] == 0
    hours = 0.25
    for run in entry["runs"].values():
        assert set(run["seeds"]) == {"42", "43"}
        for figures in run["seeds"].values():
            assert figures["total_cost"] == pytest.approx(figures["reserved_cost"] + figures["metered_cost"], abs=0.02)
            reserved = sum(
                gpus * price_per_gpu_hour(model, "reserved") * hours for model, gpus in figures["reserved_gpus"].items()
            )
            assert figures["reserved_cost"] == pytest.approx(reserved, abs=0.01)
            servers = len(cluster_named("mixed-64").nodes)
            assert figures["metered_node_hours"] <= hours * servers + 1e-6  # no node billed past the window
            # The SLO misses are the spec's (avoidable waits only); every late start is counted beside them, once,
            # by its cause — a miss is a late start whose cause is its avoidable wait.
            causes = figures["production_late_starts_by_cause"]
            assert list(causes) == list(LATE_CAUSES)
            assert sum(causes.values()) == figures["production_late_starts"]
            assert causes["avoidable"] == figures["production_slo_misses"] <= figures["production_late_starts"]
    for seed, savings in entry["savings"]["seeds"].items():
        runs = {name: run["seeds"][seed]["total_cost"] for name, run in entry["runs"].items()}
        assert savings["tiering_alone"] == pytest.approx(1 - runs[RUN_TIERED] / runs[RUN_ON_DEMAND], abs=1e-3)
        assert savings["for_user"] == pytest.approx(1 - runs[RUN_TIERED] / runs[RUN_NAIVE], abs=1e-3)
    claims = [c["claim"] for c in payload["claims"]]
    assert len(claims) == 7 and all(c.startswith("B4 serving:") for c in claims)
    assert sum(RUN_AUTOSCALED in c for c in claims) == 3
    slo = [c for c in payload["claims"] if "no production SLO miss" in c["claim"]]
    assert len(slo) == 2 and all("avoidable waits only" in c["claim"] for c in slo)
    assert all("late starts of any cause" in c["measured"] for c in slo)
    autoscaled = entry["runs"][RUN_AUTOSCALED]["seeds"]["42"]
    figures = {"node_requests", "node_requests_failed", "autoscaled_node_hours", "stocked_out_node_hours"}
    assert figures <= set(autoscaled)
    assert "node_requests" not in entry["runs"][RUN_TIERED]["seeds"]["42"]
    assert entry["runs"][RUN_TIERED]["median"]["node_requests"]["median"] is None  # shown "-"
    table = _table(payload)  # the writer bench all --write puts in BENCHMARKS.md
    assert RUN_AUTOSCALED in table and "node requests made" in table and "stocked-out node-hours" in table
    assert f"{RUN_AUTOSCALED}: tiering alone" in table
    assert "production SLO misses (avoidable wait > 1 cycle)" in table
    assert "production late starts (> 1 cycle, any cause)" in table
    assert f"  {RUN_AUTOSCALED}: 42: " in table  # misses / late starts per seed


@untraced
def test_a_stress_rate_adds_run_c() -> None:
    out = StringIO()
    call_command(
        "bench", "cost", "--hours", "0.1", "--warmup-hours", "0", "--pool-factor", "1", "--seeds", "42",
        "--mix", "balanced", "--stress-interruptions-per-node-day", "4", "--json", stdout=out, stderr=StringIO(),
    )  # fmt: skip
    payload = json.loads(out.getvalue())
    assert len(payload["mixes"]["balanced"]["runs"]) == 5
    assert "--stress-interruptions-per-node-day 4" in payload["command"]


def test_bench_cost_refuses_a_missing_trace() -> None:
    with pytest.raises(CommandError, match="no such file"):
        call_command("bench", "cost", "--trace", "/nonexistent.csv", stdout=StringIO())
