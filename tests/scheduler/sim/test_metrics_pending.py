"""The B2 metrics that need the queue over time, on hand-built timelines: idle_while_pending, eta_error,
evictions by cause; and that the replay records what they need (per-cycle samples, ETAs, eviction reasons)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.core.model.plan import Evict, Plan, Waiting
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Node, Request, Slot, Snapshot
from scheduler.core.model.vocabulary import CapacityTier, JobKind, JobTier, Priority
from scheduler.sim import replay
from scheduler.sim.eta_error import eta_error_summary, eta_errors, prediction_at
from scheduler.sim.evictions import cause, evictions_by_cause, per_window
from scheduler.sim.idle_pending import cycle_gap, idle_while_pending
from scheduler.sim.metrics import window_metrics
from scheduler.sim.records import CycleLog, CycleSample, RunLog
from tests.scheduler.sim.fakes import first_fit, scripted
from tests.scheduler.sim.test_replay import job as job_event
from tests.scheduler.sim.test_replay import scenario

POLICY = Policy(cycle_s=10.0)
A100 = "A100-SXM4-80GB"
NODES = {
    "a": Node("a", A100, 4),
    "b": Node("b", A100, 4, tier=CapacityTier.SPOT),
}


def training(job_id: str, gpus_per_replica: int, replicas: int = 1, **keys: object) -> Job:
    return Job(job_id, "t", Request(gpus=gpus_per_replica), kind=JobKind.TRAINING, replicas=replicas, **keys)  # type: ignore[arg-type]


def service(job_id: str, memory_gib: float = 10, **keys: object) -> Job:
    return Job(job_id, "t", Request(memory_gib=memory_gib), kind=JobKind.INFERENCE, **keys)  # type: ignore[arg-type]


# -- idle_while_pending ---------------------------------------------------------------------------------------------


def test_the_gap_is_the_pending_need_that_fits_the_idle_capacity() -> None:
    free = (("a", (1.0, 1.0, 0.0, 0.0)), ("b", (0.0, 0.0, 0.0, 0.0)))
    # 2 GPUs idle on a: the 2-GPU job fits, the 1-GPU job after it no longer does
    sample = CycleSample(0.0, free, (training("big", 2), training("small", 1)))
    assert cycle_gap(sample, NODES, POLICY) == 2.0


def test_a_gang_counts_only_when_all_of_it_fits_and_its_replicas_may_spread() -> None:
    free = (("a", (1.0, 0.0, 0.0, 0.0)), ("b", (1.0, 0.0, 0.0, 0.0)))
    spread = CycleSample(0.0, free, (training("two", 1, replicas=2),))
    assert cycle_gap(spread, NODES, POLICY) == 2.0
    too_big = CycleSample(0.0, free, (training("three", 1, replicas=3), training("one", 1)))
    assert cycle_gap(too_big, NODES, POLICY) == 1.0  # the gang gives back what it took; the next job fits


def test_a_small_service_fits_a_partly_used_gpu_by_its_true_need() -> None:
    free = (("a", (0.5, 0.0, 0.0, 0.0)),)
    sample = CycleSample(0.0, free, (service("s", 10), training("t", 1)))  # 10 GiB → one slice, 1/7
    assert cycle_gap(sample, {"a": NODES["a"]}, POLICY) == pytest.approx(1 / 7)


def test_node_constraints_are_honoured_and_quotas_ignored() -> None:
    free = (("b", (1.0, 1.0, 1.0, 1.0)),)
    reserved_only = training("r", 1, tier=JobTier.RESERVED_ONLY)
    other_model = training("h", 1, gpu_model="H100-SXM5-80GB")
    assert cycle_gap(CycleSample(0.0, free, (reserved_only, other_model)), NODES, POLICY) == 0.0


def test_idle_while_pending_is_a_time_average_share_of_capacity() -> None:
    pending = (training("j", 2),)
    samples = [
        CycleSample(0.0, (("a", (1.0, 1.0, 0.0, 0.0)),), pending),  # gap 2 for 10 s
        CycleSample(10.0, (("a", (0.0, 0.0, 0.0, 0.0)),), pending),  # gap 0 for 10 s
    ]
    share = idle_while_pending(samples, {"a": NODES["a"]}, POLICY, ((0.0, 4),), (0.0, 20.0))
    assert share == pytest.approx(2 * 10 / (4 * 20))


# -- eta_error -------------------------------------------------------------------------------------------------------


def test_the_prediction_is_the_one_in_effect_at_a_quarter_of_the_wait() -> None:
    history = [(10.0, 500.0), (50.0, 300.0), (90.0, None)]
    assert prediction_at(history, 5.0) is None
    assert prediction_at(history, 49.9) == 500.0 and prediction_at(history, 50.0) == 300.0
    job = training("j", 1, submitted_at=0.0)
    # waited 400 s: the prediction at t = 100 is None (the 90 s cycle gave none) → without an ETA
    errors, without = eta_errors([job], {"j": 400.0}, {"j": history}, (0.0, 1000.0), 10.0)
    assert (errors, without) == ([], 1)
    # waited 160 s: at t = 40 the prediction was 500 → |500 − 160| / 160
    errors, without = eta_errors([job], {"j": 160.0}, {"j": history}, (0.0, 1000.0), 10.0)
    assert errors == [pytest.approx(340 / 160)] and without == 0


def test_jobs_that_did_not_wait_or_never_started_are_left_out() -> None:
    quick = training("q", 1, submitted_at=0.0)
    never = training("n", 1, submitted_at=0.0)
    early = training("e", 1, submitted_at=-50.0)  # in the warm-up
    etas = {"q": [(0.0, 10.0)], "n": [(0.0, 99.0)], "e": [(-50.0, 100.0)]}
    errors, without = eta_errors([quick, never, early], {"q": 10.0, "e": 100.0}, etas, (0.0, 1000.0), 10.0)
    assert (errors, without) == ([], 0)


def test_eta_error_summary() -> None:
    summary = eta_error_summary([0.1, 0.2, 0.3, 0.4, 1.0], 2)
    assert summary == {"p50": 0.3, "p90": 1.0, "waited": 7, "with_eta": 5}
    assert eta_error_summary([], 0)["p50"] is None


# -- evictions by cause ----------------------------------------------------------------------------------------------


def run(reason: str | None, node: str = "a", end: float = 50.0, outcome: str = "evicted") -> RunLog:
    return RunLog(training("j", 1), ((Slot(node, 0),),), 0.0, end, 1.0, outcome, reason=reason)


def test_eviction_causes() -> None:
    assert cause(run("priority"), NODES) == cause(run("production"), NODES) == "priority"
    assert cause(run("reclaim"), NODES) == "reclaim"
    assert cause(run("backfill"), NODES) == "backfill"
    assert cause(run("repartition"), NODES) == "reconfiguration"
    assert cause(run("node-lost", node="b"), NODES) == "spot"
    assert cause(run("node-lost", node="a"), NODES) == "node-lost"
    assert cause(run("something-new"), NODES) == "something-new"


def test_evictions_by_cause_counts_inside_the_window_only() -> None:
    runs = [run("priority"), run("priority", end=500.0), run("reclaim"), run(None, outcome="completed")]
    counts = evictions_by_cause(runs, NODES, (0.0, 100.0))
    assert counts == {"priority": 1, "reclaim": 1, "backfill": 0, "reconfiguration": 0, "spot": 0, "node-lost": 0}
    assert per_window(3, (0.0, 4 * 3600.0)) == 6.0


# -- what the replay records -----------------------------------------------------------------------------------------


def test_the_replay_records_eviction_reasons_etas_and_cycle_samples() -> None:
    events = [job_event("j1", duration_s=100), job_event("j2", gpus=4, duration_s=50)]
    waiting = Plan(waiting=(Waiting("j2", 1, 1, "waits", eta_s=40.0),))
    planner = scripted({20.0: Plan(evictions=(Evict("j1", "reclaim", "x"),)), 0.0: waiting}, fallback=first_fit)
    log = CycleLog()
    result = replay(scenario(events), planner, cycles=log)
    evicted = [r for r in result.runs if r.outcome == "evicted"]
    assert [(r.job.id, r.reason) for r in evicted] == [("j1", "reclaim")]
    assert log.etas["j2"][0] == (0.0, 40.0)  # the plan's eta_s + the cycle's time
    first, second = log.samples[0], log.samples[1]  # at t = 0 the script only says who waits
    assert first.t == 0.0 and [j.id for j in first.pending] == ["j1", "j2"]
    assert dict(first.free) == {"a": (1.0, 1.0), "b": (1.0, 1.0)}
    assert second.t == 10.0 and "j1" not in [j.id for j in second.pending]
    assert dict(second.free)["a"] == (0.0, 1.0)  # j1 holds GPU 0 of a


def test_the_cycle_log_only_observes() -> None:
    events = [job_event("j1", duration_s=100), job_event("j2", gpus=2, duration_s=50)]
    plain = replay(scenario(events), first_fit)
    logged = replay(scenario(events), first_fit, cycles=CycleLog(window=(0.0, 50.0)))
    assert plain.as_dict() == logged.as_dict()


# -- avoidable production wait -------------------------------------------------------------------------------------


def test_avoidable_production_wait_counts_the_cycles_with_room_and_splits_the_rest() -> None:
    # p (1 GPU) could bind at once on node a but the planner idles three cycles; q asks for an H100 and the
    # cluster has none: all of its wait is unavoidable, "held" on its class.
    events = [
        job_event("p", priority="production", kind="inference", duration_s=100),
        job_event("q", gpu_model="H100", priority="production", kind="inference", duration_s=100),
    ]

    def planner(snapshot: Snapshot, policy: Policy, now: float) -> Plan:  # binds p from t = 30, q never
        if now < 30.0:
            return Plan()
        return first_fit(replace(snapshot, pending=tuple(j for j in snapshot.pending if j.id != "q")), policy, now)

    log = CycleLog(window=(0.0, 200.0))
    run = replay(scenario(events), planner, cycles=log)
    nodes = {node.name: node for node in scenario(events).nodes}
    jobs = [r.job for r in run.runs] + [
        Job("q", "t", Request(gpus=1), kind=JobKind.INFERENCE, priority=Priority.PRODUCTION, gpu_model="H100")
    ]
    metrics = window_metrics(run, jobs, nodes, POLICY, (0.0, 200.0), log)
    total = metrics["production_inference_wait_s"]
    assert isinstance(total, dict) and total["max"] == 200.0  # q never starts
    assert metrics["production_avoidable_wait_s"] == {"p50": 0.0, "p95": 30.0, "max": 30.0}
    held_cycles = sum(1 for _, verdicts in log.verdicts for job, _ in verdicts if job == "q")
    assert metrics["production_unavoidable_wait_s"] == {"held/H100": 10.0 * held_cycles}
    assert held_cycles == 14  # the cycles 0–130: then nothing is left to happen and the replay skips to its end
