"""Each baseline's rules on crafted snapshots (the rules are in each module's docstring)."""

from __future__ import annotations

import dataclasses

import pytest

from scheduler.core.model.plan import Plan
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, ModelProfile, Node, Request, Running, Slot, Snapshot, Team
from scheduler.core.model.vocabulary import CapacityTier, JobKind, JobTier, Priority
from scheduler.sim.baselines import binpack, fgd, k8s_default, naive
from scheduler.sim.baselines.common import Need, replica_need
from scheduler.sim.baselines.fgd import fragmentation
from scheduler.sim.planners import PLANNERS

POLICY = Policy()
TEAMS = (Team("t"),)
ALL = [naive, k8s_default, binpack, fgd]


def node(name: str, gpus: int = 4, **keys: object) -> Node:
    return Node(name, keys.pop("gpu_model", "A100-SXM4-80GB"), gpus, **keys)  # type: ignore[arg-type]


def job(job_id: str, t: float = 0.0, **keys: object) -> Job:
    request = keys.pop("request", Request(gpus=1))
    return Job(job_id, "t", request, submitted_at=t, **keys)  # type: ignore[arg-type]


def running(job_id: str, *slots: tuple[str, int], t: float = 0.0, **keys: object) -> Running:
    return Running(job(job_id, **keys), tuple((Slot(n, g),) for n, g in slots), started_at=t)


def plan(planner, nodes, pending=(), run=()) -> Plan:
    return planner(Snapshot(tuple(nodes), TEAMS, tuple(run), tuple(pending)), POLICY, 0.0)


def placed(result: Plan) -> dict[str, list[tuple[str, int]]]:
    return {b.job: [(s.node, s.gpu) for replica in b.slots for s in replica] for b in result.binds}


def test_every_baseline_is_registered_by_name() -> None:
    assert {"naive", "k8s-default", "binpack", "fgd", "microcosm"} <= set(PLANNERS)
    assert PLANNERS["k8s-default"] is k8s_default


# -- what a replica takes ---------------------------------------------------------------------------------


def test_requests_become_whole_gpus_without_mig() -> None:
    a100 = node("a")
    assert replica_need(job("j", request=Request(memory_gib=10)), a100, POLICY) == Need(gpus=1)
    assert replica_need(job("j", request=Request(memory_gib=100)), a100, POLICY) == Need(gpus=2)
    assert replica_need(job("j", request=Request(mig_profile="1g.10gb")), a100, POLICY) == Need(gpus=1)
    assert replica_need(job("j", request=Request(gpu_milli=300)), a100, POLICY) == Need(gpus=1)
    assert replica_need(job("j", request=Request(gpu_milli=2500)), a100, POLICY) == Need(gpus=3)
    model = Request(model=ModelProfile(params_b=7))
    assert replica_need(job("j", request=model), a100, POLICY) == Need(gpus=1)
    assert replica_need(job("j", gpu_model="H100"), a100, POLICY) is None


def test_only_fgd_takes_shares_and_only_on_time_sliced_nodes() -> None:
    shared = node("s", sharing=True)
    ten_gib = job("j", request=Request(memory_gib=10))
    assert replica_need(ten_gib, shared, POLICY, shares=True) == Need(milli=125)  # 10 GiB of 80 GiB
    assert replica_need(ten_gib, node("n"), POLICY, shares=True) == Need(gpus=1)
    assert replica_need(job("j", request=Request(gpu_milli=300)), shared, POLICY, shares=True) == Need(milli=300)


# -- rules every baseline shares ----------------------------------------------------------------------------


@pytest.mark.parametrize("planner", [binpack, fgd])
def test_fifo_skips_what_does_not_fit_and_never_preempts(planner) -> None:
    nodes = [node("a", 4)]
    busy = [running("r", ("a", 0), ("a", 1), priority=Priority.LOW, preemptible=True)]
    pending = [
        job("late", t=5.0),
        job("big", t=1.0, request=Request(gpus=4), priority=Priority.PRODUCTION),
        job("early", t=2.0),
    ]
    result = plan(planner, nodes, pending, busy)
    assert [b.job for b in result.binds] == ["early", "late"]
    assert not result.evictions and not result.reconfigurations
    assert [(w.job, w.position) for w in result.waiting] == [("big", 1)]


@pytest.mark.parametrize("planner", ALL)
def test_mig_gpus_cordoned_and_reconfiguring_nodes_are_not_used(planner) -> None:
    mig = node("mig", 1, mig=((("7g.80gb", 0),),))
    cordoned = node("cordoned", 1, schedulable=False)
    changing = node("changing", 1, reconfiguring_until=100.0)
    free = node("free", 1)
    result = plan(planner, [mig, cordoned, changing, free], [job("a"), job("b")])
    assert placed(result) == {"a": [("free", 0)]}


@pytest.mark.parametrize("planner", ALL)
def test_what_can_never_run_is_rejected_with_the_reason(planner) -> None:
    nodes = [node("a", 4, tier=CapacityTier.SPOT)]
    pending = [
        job("huge", request=Request(gpus=8)),
        job("gang", request=Request(gpus=2), replicas=3),
        job("reserved", tier=JobTier.RESERVED_ONLY),
        job("h100", gpu_model="H100"),
    ]
    result = plan(planner, nodes, pending)
    reasons = {r.job: r.reason for r in result.rejections}
    assert set(reasons) == {"huge", "gang", "reserved", "h100"}
    assert "8 whole GPUs" in reasons["huge"]
    assert "3 replicas" in reasons["gang"]


@pytest.mark.parametrize("planner", ALL)
def test_a_gang_binds_whole_or_waits(planner) -> None:
    busy = [running("r", ("b", 0))]
    result = plan(planner, [node("a", 2), node("b", 2)], [job("g", request=Request(gpus=2), replicas=2)], busy)
    assert not result.binds and result.waiting[0].job == "g" and not result.rejections
    result = plan(planner, [node("a", 2), node("b", 2)], [job("g", request=Request(gpus=2), replicas=2)])
    assert sorted(placed(result)["g"]) == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]


# -- kube-scheduler's priority preemption (naive, k8s-default) ----------------------------------------------


KUBE = [naive, k8s_default]


@pytest.mark.parametrize("planner", KUBE)
def test_priority_order_then_preemption_of_lower_priority(planner) -> None:
    nodes = [node("a", 4)]
    busy = [running("r", ("a", 0), ("a", 1), priority=Priority.LOW)]
    pending = [
        job("late", t=5.0),
        job("big", t=1.0, request=Request(gpus=4), priority=Priority.PRODUCTION),
        job("early", t=2.0),
    ]
    result = plan(planner, nodes, pending, busy)
    # big goes first (PrioritySort) and fits only without r: r is evicted, big binds; nothing is left for the rest
    assert [(e.job, e.reason, e.by) for e in result.evictions] == [("r", "priority", "big")]
    assert placed(result) == {"big": [("a", 0), ("a", 1), ("a", 2), ("a", 3)]}
    assert [w.job for w in result.waiting] == ["early", "late"]


@pytest.mark.parametrize("planner", KUBE)
def test_preemption_evicts_the_fewest_and_lowest_and_never_equal_priority(planner) -> None:
    nodes = [node("a", 4), node("b", 4)]
    busy = [
        running("a-high", ("a", 0), ("a", 1), priority=Priority.HIGH),
        running("a-low", ("a", 2), ("a", 3), priority=Priority.LOW),
        running("b-normal1", ("b", 0), ("b", 1), priority=Priority.NORMAL, t=1.0),
        running("b-normal2", ("b", 2), ("b", 3), priority=Priority.NORMAL, t=2.0),
    ]
    # a high job needing 2 GPUs: on a it evicts a-low (priority 0); on b one normal (priority 1) → a wins
    result = plan(planner, nodes, [job("h", request=Request(gpus=2), priority=Priority.HIGH)], busy)
    assert [e.job for e in result.evictions] == ["a-low"] and placed(result) == {"h": [("a", 2), ("a", 3)]}
    # a normal job may evict only lower priority: a-low
    result = plan(planner, nodes, [job("n", request=Request(gpus=2), priority=Priority.NORMAL)], busy)
    assert [e.job for e in result.evictions] == ["a-low"]
    # a low job preempts nothing
    result = plan(planner, nodes, [job("l", priority=Priority.LOW)], busy)
    assert not result.evictions and not result.binds and result.waiting


@pytest.mark.parametrize("planner", KUBE)
def test_victims_are_reprieved_most_important_first(planner) -> None:
    nodes = [node("a", 4)]
    busy = [
        running("low", ("a", 0), priority=Priority.LOW),
        running("normal", ("a", 1), priority=Priority.NORMAL),
        running("high", ("a", 2), ("a", 3), priority=Priority.HIGH),
    ]
    result = plan(planner, nodes, [job("p", request=Request(gpus=2), priority=Priority.PRODUCTION)], busy)
    # every lower job is a candidate; high is reprieved only if 2 GPUs free without it: low + normal free 2
    assert sorted(e.job for e in result.evictions) == ["low", "normal"]


@pytest.mark.parametrize("planner", KUBE)
def test_a_gang_preempts_only_when_all_of_it_fits(planner) -> None:
    nodes = [node("a", 2), node("b", 2)]
    busy = [running("r", ("a", 0), ("a", 1), priority=Priority.LOW), running("s", ("b", 0), priority=Priority.HIGH)]
    gang = job("g", request=Request(gpus=2), replicas=2, priority=Priority.HIGH)
    result = plan(planner, nodes, [gang], busy)
    assert not result.evictions and not result.binds  # b's high job cannot be preempted: the gang waits whole
    result = plan(planner, nodes, [replace_priority(gang, Priority.PRODUCTION)], busy)
    assert sorted(e.job for e in result.evictions) == ["r", "s"] and len(placed(result)["g"]) == 4


def replace_priority(j: Job, priority: Priority) -> Job:
    return dataclasses.replace(j, priority=priority)


# -- each policy's own rule ------------------------------------------------------------------------------


def test_naive_takes_the_first_node_that_fits() -> None:
    nodes = [node("a", 4), node("b", 4)]
    busy = [running("r", ("a", 0), ("a", 1), ("a", 2))]
    result = plan(naive, nodes, [job("one"), job("two", request=Request(gpus=2))], busy)
    assert placed(result) == {"one": [("a", 3)], "two": [("b", 0), ("b", 1)]}


def test_naive_gives_a_small_service_a_whole_gpu() -> None:
    service = job("svc", kind=JobKind.INFERENCE, request=Request(memory_gib=10), replicas=2)
    assert placed(plan(naive, [node("a", 4)], [service])) == {"svc": [("a", 0), ("a", 1)]}


def test_k8s_default_spreads_replicas_to_the_least_allocated_nodes() -> None:
    nodes = [node("a", 4), node("b", 4), node("c", 8)]
    busy = [running("r", ("a", 0))]
    result = plan(k8s_default, nodes, [job("g", replicas=3)], busy)
    # free share after placing: a 2/4, b 3/4, c 7/8 → c; then a 2/4, b 3/4, c 6/8 → b (tie, first); then c 6/8
    assert placed(result)["g"] == [("c", 0), ("b", 0), ("c", 1)]


def test_binpack_fills_the_fullest_node_and_keeps_a_gang_on_one_node() -> None:
    nodes = [node("a", 8), node("b", 8)]
    busy = [running("r", *[("b", g) for g in range(5)])]
    result = plan(binpack, nodes, [job("one"), job("gang", request=Request(gpus=2), replicas=2)], busy)
    assert placed(result)["one"] == [("b", 5)]
    assert sorted(placed(result)["gang"]) == [("a", 0), ("a", 1), ("a", 2), ("a", 3)]


def test_fragmentation_measure_on_a_worked_example() -> None:
    # Shapes: half the work wants 4 whole GPUs, half a 0.5 share.
    shapes = ((0, 500, 0.5), (4, 0, 0.5))
    # 3 idle GPUs: a 4-GPU job cannot run (all 3000 milli are fragment for it); a share runs (no GPU below 500)
    assert fragmentation(shapes, (1000, 1000, 1000)) == pytest.approx(0.5 * 3000)
    # one GPU with 300 free and 4 idle: the share fragments the 300, the 4-GPU shape fragments the 300 too
    assert fragmentation(shapes, (300, 1000, 1000, 1000, 1000)) == pytest.approx(0.5 * 300 + 0.5 * 300)
    assert fragmentation(shapes, (0, 0)) == 0.0


def test_fgd_keeps_a_node_whole_for_the_large_jobs_it_expects() -> None:
    nodes = [node("a", 4), node("b", 4)]
    busy = [running("r", ("b", 0), ("b", 1), ("b", 2))]
    pending = [job("small", t=1.0), job("big", t=2.0, request=Request(gpus=4))]
    # small on a would strand a's 3 remaining GPUs for the 4-GPU shape (Δ +3000·w); on b it removes b's
    # stranded GPU (Δ −1000·w): fgd picks b, and big then fits on a.
    assert placed(plan(fgd, nodes, pending, busy)) == {
        "small": [("b", 3)],
        "big": [("a", 0), ("a", 1), ("a", 2), ("a", 3)],
    }
    # the first-fit baseline strands them
    assert placed(plan(naive, nodes, pending, busy)) == {"small": [("a", 0)]}


def test_fgd_packs_shares_onto_one_time_sliced_gpu() -> None:
    shared = node("s", 2, sharing=True)
    pending = [job(f"p{i}", t=float(i), request=Request(gpu_milli=300)) for i in range(3)]
    result = plan(fgd, [shared], pending)
    gpus = [(replica[0].gpu, replica[0].milli) for b in result.binds for replica in b.slots]
    # p0, p1 share GPU 0; a third 300 there would leave 100 milli no 300-milli replica can use: GPU 1
    assert gpus == [(0, 300), (0, 300), (1, 300)]
