"""B4's production SLO (scheduler/sim/bench/cost_slo.py): misses count avoidable waits only (B2's verdicts), late
starts of any cause are counted beside them, each with the cause the run recorded."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.core.gpus.arrival import ArrivalModel
from scheduler.core.model.provisioning import Offering
from scheduler.core.model.snapshot import Job, Node, Request, Slot
from scheduler.core.model.vocabulary import CapacityTier, Interconnect, JobKind, Priority
from scheduler.sim import parse_scenario, replay
from scheduler.sim.autoscaler import ARRIVED, FAILED, IN_FLIGHT, WITHDRAWN, AutoscaledPool, Autoscaler, RequestLog
from scheduler.sim.avoidable import AVOIDABLE, BURST, HELD, Verdict
from scheduler.sim.bench.cost_slo import (
    ARRIVAL,
    LATE_CAUSES,
    ONE_AVOIDABLE_CYCLE,
    REJECTED,
    STOCKOUT,
    UNJUDGED,
    cycle_cause,
    production_slo,
)
from scheduler.sim.records import CycleLog, RunLog
from scheduler.sim.report import ReplayResult
from tests.scheduler.sim.fake_provisioning import provisioning
from tests.scheduler.sim.fakes import first_fit

CYCLE_S = 10.0
WINDOW = (0.0, 1000.0)


def service(job_id: str, t: float = 5.0, **keys: Any) -> Job:
    keys.setdefault("priority", Priority.PRODUCTION)
    return Job(job_id, "t", Request(memory_gib=10), kind=JobKind.INFERENCE, submitted_at=t, **keys)


def started(job: Job, at: float) -> RunLog:
    return RunLog(job, ((Slot("a", 0),),), at, 2000.0, 1.0, "running")


def judged(*cycles: tuple[float, dict[str, str]]) -> CycleLog:
    """A CycleLog whose verdicts are ``(t, {job: cause})``, every verdict on class A100."""
    log = CycleLog(window=WINDOW, sampling=False)
    for t, verdicts in cycles:
        log.verdicts.append((t, tuple((job, Verdict(cause, "A100")) for job, cause in verdicts.items())))
    return log


def run(
    jobs: list[Job], runs: list[RunLog], cycles: CycleLog, *, rejected: tuple[str, ...] = (), requests: Any = ()
) -> Any:
    events = tuple({"t": 0.0, "type": "rejected", "job": job} for job in rejected)
    result = ReplayResult("b4", (), {}, events, {}, runs=tuple(runs), capacity=((0.0, 8),), end=2000.0)
    return production_slo(result, jobs, WINDOW, CYCLE_S, cycles, requests)


def test_an_unavoidable_wait_is_a_late_start_and_no_miss() -> None:
    job = service("s")
    slo = run([job], [started(job, 40.0)], judged(*((t, {"s": HELD}) for t in (10.0, 20.0, 30.0))))
    assert (slo.services, slo.misses, slo.late_starts) == (1, 0, 1)
    assert slo.late_by_cause[HELD] == 1 and sum(slo.late_by_cause.values()) == 1
    assert slo.late_wait_s_by_cause == {AVOIDABLE: 0.0, HELD: 30.0, BURST: 0.0, ARRIVAL: 0.0, STOCKOUT: 0.0}
    assert slo.waits_s == (35.0,)


def test_avoidable_seconds_beyond_one_cycle_are_a_miss() -> None:
    job = service("s")
    slo = run(
        [job], [started(job, 40.0)], judged((10.0, {"s": HELD}), (20.0, {"s": AVOIDABLE}), (30.0, {"s": AVOIDABLE}))
    )
    assert (slo.misses, slo.late_starts, slo.late_by_cause[AVOIDABLE]) == (1, 1, 1)
    assert slo.late_wait_s_by_cause[AVOIDABLE] == 20.0 and slo.late_wait_s_by_cause[HELD] == 10.0


def test_one_avoidable_cycle_is_within_the_allowance() -> None:
    # Left pending by the first cycle after its submission though room existed, started by the next: 15 s late by
    # the clock, but only one cycle of its wait was avoidable (B2's target: avoidable wait ≤ one cycle).
    job = service("s")
    slo = run([job], [started(job, 20.0)], judged((10.0, {"s": AVOIDABLE})))
    assert (slo.misses, slo.late_starts, slo.late_by_cause[ONE_AVOIDABLE_CYCLE]) == (0, 1, 1)


def test_a_start_within_one_cycle_is_neither() -> None:
    job = service("s")
    slo = run([job], [started(job, 10.0)], judged())
    assert (slo.services, slo.misses, slo.late_starts) == (1, 0, 0)


def test_a_service_that_never_started_is_judged_on_every_cycle_to_the_end() -> None:
    held, avoidable = service("held"), service("avoidable")
    cycles = judged(
        (10.0, {"held": HELD, "avoidable": HELD}),
        (1500.0, {"held": HELD, "avoidable": AVOIDABLE}),  # after the window: a wait may outlast it (B2 counts it)
        (1510.0, {"held": HELD, "avoidable": AVOIDABLE}),
    )
    slo = run([held, avoidable], [], cycles)
    assert (slo.misses, slo.late_starts) == (1, 2)
    assert slo.late_by_cause[HELD] == 1 and slo.late_by_cause[AVOIDABLE] == 1
    assert slo.waits_s == (1995.0, 1995.0)  # to the replay's end


def test_a_rejected_service_is_no_miss_but_a_late_start() -> None:
    job = service("s")
    slo = run([job], [], judged((10.0, {"s": AVOIDABLE}), (20.0, {"s": AVOIDABLE})), rejected=("s",))
    assert (slo.misses, slo.late_starts, slo.late_by_cause[REJECTED]) == (0, 1, 1)


def test_verdicts_after_the_first_start_do_not_count() -> None:
    # Started on time, evicted later and pending again: the SLO is about the first start.
    job = service("s")
    slo = run([job], [started(job, 10.0)], judged((500.0, {"s": AVOIDABLE}), (510.0, {"s": AVOIDABLE})))
    assert (slo.misses, slo.late_starts) == (0, 0)


def test_only_production_inference_submitted_in_the_window_counts() -> None:
    jobs = [
        service("early", t=-50.0),
        service("normal", priority=Priority.NORMAL),
        Job("train", "t", Request(gpus=1), priority=Priority.PRODUCTION, submitted_at=5.0),
    ]
    cycles = judged(*((t, {job.id: AVOIDABLE for job in jobs}) for t in (10.0, 20.0, 30.0)))
    slo = run(jobs, [], cycles)
    assert (slo.services, slo.misses, slo.late_starts) == (0, 0, 0)


def test_a_late_start_without_verdicts_is_unjudged_and_ties_go_to_held() -> None:
    quiet, tied = service("quiet"), service("tied")
    cycles = judged((10.0, {"tied": BURST}), (20.0, {"tied": HELD}))
    slo = run([quiet, tied], [started(quiet, 100.0), started(tied, 30.0)], cycles)
    assert slo.late_by_cause[UNJUDGED] == 1 and slo.late_by_cause[HELD] == 1
    assert list(slo.late_by_cause) == list(LATE_CAUSES)


def request(outcome: str, requested_at: float, ended_at: float | None, job: str = "s") -> RequestLog:
    due = requested_at + 300
    return RequestLog("req-1", job, "od", 1, 8, 3.43, requested_at, due, due, outcome=outcome, ended_at=ended_at)


def test_a_held_cycle_is_split_by_the_jobs_node_requests() -> None:
    held = Verdict(HELD, "A100")
    arrived = [request(ARRIVED, 10.0, 310.0)]
    assert cycle_cause(held, 0.0, arrived) == HELD  # nothing asked yet
    assert cycle_cause(held, 10.0, arrived) == ARRIVAL  # asked by this cycle's plan: in flight
    assert cycle_cause(held, 300.0, arrived) == ARRIVAL
    assert cycle_cause(held, 310.0, arrived) == HELD  # its nodes joined before this cycle: in the judged cluster
    assert cycle_cause(held, 50.0, [request(IN_FLIGHT, 10.0, None)]) == ARRIVAL  # still coming at the end
    failed = [request(FAILED, 10.0, 910.0)]
    assert cycle_cause(held, 500.0, failed) == STOCKOUT  # on its way to a stockout
    assert cycle_cause(held, 1000.0, failed) == STOCKOUT  # failed, nothing asked since
    assert cycle_cause(held, 1000.0, [*failed, request(ARRIVED, 1000.0, 1300.0)]) == ARRIVAL  # asked again
    assert cycle_cause(held, 50.0, [request(WITHDRAWN, 10.0, 40.0)]) == HELD
    assert cycle_cause(Verdict(BURST, "A100"), 50.0, arrived) == BURST  # only a held verdict is split
    assert cycle_cause(Verdict(AVOIDABLE, "A100"), 50.0, arrived) == AVOIDABLE


MODEL = "A100-SXM4-80GB"


def autoscaled(stockout: float, seed: int) -> tuple[Any, Autoscaler]:
    """One reserved server held by a production job for the whole run, a production service that needs a whole
    GPU, and an on-demand pool the service's node request grows (the test double of the provisioning rule)."""
    scenario = parse_scenario(
        {
            "name": "b4-slo",
            "cycle_s": CYCLE_S,
            "until": 3000,
            "cluster": {"nodes": [{"name": "r", "gpu_model": MODEL, "gpus": 8, "tier": "reserved"}]},
            "teams": [{"name": "t", "guaranteed_gpus": 16}],
            "events": [
                {"t": 0, "submit": {"id": "hold", "team": "t", "gpus": 8, "priority": "production"}},
                {"t": 5, "submit": {"id": "s", "team": "t", "gpus": 1, "kind": "inference", "priority": "production"}},
            ],
        },
        source="b4-slo.json",
    )
    arrival = ArrivalModel("A100", "*", 300.0, 300.0, 300.0, stockout, fail_after_s=900.0)
    offering = Offering("od", MODEL, 8, 3.43, 300.0, 1, Interconnect.NVSWITCH)
    template = Node("od", MODEL, 8, Interconnect.NVSWITCH, tier=CapacityTier.ON_DEMAND)
    return scenario, Autoscaler([AutoscaledPool(offering, arrival, template)], seed=seed)


@pytest.mark.parametrize(("stockout", "cause"), [(0.0, ARRIVAL), (0.999, STOCKOUT)])
def test_a_replay_records_the_verdicts_and_a_wait_for_a_node_is_no_miss(stockout: float, cause: str) -> None:
    scenario, scaler = autoscaled(stockout, seed=3)
    cycles = CycleLog(window=(0.0, 3000.0), sampling=False)
    result = replay(scenario, provisioning(first_fit), cycles=cycles, autoscaler=scaler)
    assert cycles.verdicts and not cycles.samples  # verdicts recorded, the per-GPU samples not taken
    first = scaler.requests["req-1"]
    assert first.job == "s" and first.outcome == (ARRIVED if stockout == 0 else FAILED)
    jobs = [event.action.job for event in scenario.events]
    slo = production_slo(result, jobs, (0.0, 3000.0), CYCLE_S, cycles, scaler.requests.values())
    # Nodes that have not arrived are not in the cluster: the wait was not avoidable, so it is no miss — but the
    # late start is counted, with the cause the run recorded.
    assert (slo.services, slo.misses, slo.late_starts) == (1, 0, 1)
    assert slo.late_by_cause[cause] == 1
    assert slo.late_wait_s_by_cause[AVOIDABLE] == 0.0
