"""The wait attribution of ``bench causes`` (scheduler.sim.causes) on hand-built cycles: every second of a
production wait is labelled once and the labels sum to the wait, blocker kinds the instrument does not know
are kept, the room questions (a) and (b), and idle_while_pending split job by job into its own figure."""

from __future__ import annotations

from collections.abc import Hashable, Mapping

import pytest

from scheduler.core.model.plan import Bind, Evict, Plan, Reconfigure, Waiting
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Node, Request, Running, Slot, Snapshot
from scheduler.core.model.vocabulary import BlockerKind, CapacityTier, JobKind, Priority
from scheduler.sim.causes.idle import gang_size, idle_causes
from scheduler.sim.causes.kinds import BETWEEN_CYCLES, EVICTED, NO_KIND, UNEXPLAINED, ordered
from scheduler.sim.causes.log import CauseLog
from scheduler.sim.causes.room import (
    FULL,
    LOWER_TOO_SMALL,
    LOWER_WOULD_FREE,
    LOWER_WOULD_FREE_RECONFIGURATION,
    ROOM_FORBIDDEN_TIER,
    ROOM_IDLE_GPU,
    ROOM_INSTANCE,
    Room,
    after_plan,
    room_for,
)
from scheduler.sim.causes.waits import NOT_ANALYSED, pending_intervals, production_waits
from scheduler.sim.idle_pending import _place_replica, cycle_gap, cycle_matches, held_s, idle_while_pending
from scheduler.sim.records import CycleSample, RunLog

POLICY = Policy(cycle_s=10.0)
A100 = "A100-SXM4-80GB"
WINDOW = (0.0, 100.0)
SPLIT = (("3g.40gb", 0), ("3g.40gb", 4))  # two 3g.40gb instances: a legal A100-80GB layout


def service(job_id: str, memory_gib: float = 30, priority: Priority = Priority.PRODUCTION, **keys: object) -> Job:
    preemptible = priority == Priority.NORMAL
    return Job(
        job_id,
        "t",
        Request(memory_gib=memory_gib),
        kind=JobKind.INFERENCE,
        priority=priority,
        preemptible=preemptible,
        **keys,  # type: ignore[arg-type]
    )


def training(job_id: str, gpus: int, replicas: int = 1, **keys: object) -> Job:
    return Job(job_id, "t", Request(gpus=gpus), replicas=replicas, preemptible=True, **keys)  # type: ignore[arg-type]


def samples_of(pending_at: Mapping[float, tuple[Job, ...]]) -> list[CycleSample]:
    return [CycleSample(t, (("a", (0.0,)),), jobs) for t, jobs in sorted(pending_at.items())]


def running(job: Job, start: float, end: float, outcome: str = "running") -> RunLog:
    return RunLog(job, ((Slot("a", 0),),), start, end, 1.0, outcome)


# -- production waits -----------------------------------------------------------------------------------------------


def test_each_second_of_a_wait_is_labelled_once_and_the_labels_sum_to_the_wait() -> None:
    p = service("p", submitted_at=5.0)  # waits 5 → 40: 35 s
    brief = service("q", submitted_at=12.0)  # waits 12 → 40: 28 s, under the 30 s threshold
    samples = samples_of({0.0: (), 10.0: (p,), 20.0: (p, brief), 30.0: (p, brief), 40.0: (), 50.0: ()})
    log = CauseLog(window=WINDOW)
    log.blockers = {10.0: {"p": "capacity"}, 20.0: {"p": "quota", "q": "quota"}, 30.0: {"p": "reserved", "q": ""}}
    log.reasons = {"p": (30.0, "waiting for a reserved node")}
    runs = [running(p, 40.0, 100.0), running(brief, 40.0, 100.0)]
    held = held_s(samples, WINDOW, POLICY.cycle_s)
    waits = production_waits([p, brief], runs, 100.0, {}, samples, held, log, WINDOW)
    assert waits.jobs == 1 and waits.wait_s == 35.0
    # 5 → 10 no plan had seen it; each cycle holds 10 s; "reserved" is no kind the instrument knows: kept
    assert waits.by_kind == {BETWEEN_CYCLES: 5.0, "capacity": 10.0, "quota": 10.0, "reserved": 10.0}
    assert sum(waits.by_kind.values()) == waits.wait_s
    assert waits.capacity == {NOT_ANALYSED: 10.0}  # the log holds no Room for that cycle
    [longest] = waits.longest
    assert longest.sequence == (("capacity", 1), ("quota", 1), ("reserved", 1))
    assert longest.last_reason == "waiting for a reserved node" and not longest.still_waiting


def test_a_wait_after_an_eviction_between_cycles_counts_from_the_eviction() -> None:
    p = service("p", submitted_at=0.0)
    # bound at 0, its node lost at 15 (between cycles), bound again at 50: pending 15 → 50
    runs = [running(p, 0.0, 15.0, "evicted"), running(p, 50.0, 100.0)]
    assert pending_intervals(p, runs, 100.0) == [(15.0, 50.0)]
    samples = samples_of({0.0: (), 10.0: (), 20.0: (p,), 30.0: (p,), 40.0: (p,), 50.0: ()})
    log = CauseLog(window=WINDOW)
    log.blockers = {20.0: {"p": "capacity"}, 30.0: {"p": "capacity"}}
    log.evicted = {40.0: frozenset({"p"})}  # no Waiting at 40: the instrument says why
    log.rooms = {(20.0, "p"): Room(ROOM_IDLE_GPU, LOWER_WOULD_FREE, True), (30.0, "p"): Room(None, None)}
    held = held_s(samples, WINDOW, POLICY.cycle_s)
    waits = production_waits([p], runs, 100.0, {}, samples, held, log, WINDOW)
    assert waits.by_kind == {BETWEEN_CYCLES: 5.0, "capacity": 20.0, EVICTED: 10.0}
    assert waits.capacity == {ROOM_IDLE_GPU: 10.0, FULL: 10.0}
    assert (waits.room_s, waits.lower_s, waits.lower_preemptible_s, waits.lower_bound_now_s) == (10.0, 10.0, 10.0, 0.0)


def test_a_wait_is_clipped_to_the_window_and_one_still_pending_runs_to_its_end() -> None:
    p = service("p", submitted_at=-50.0)  # submitted in the warm-up, never started
    samples = samples_of({t: (p,) for t in (0.0, 10.0, 20.0, 30.0)})
    log = CauseLog(window=(0.0, 40.0))
    log.blockers = {t: {"p": "not-ready"} for t in (0.0, 10.0, 20.0)}  # at 30 the plan said nothing of it
    held = held_s(samples, (0.0, 40.0), POLICY.cycle_s)
    waits = production_waits([p], [], 40.0, {}, samples, held, log, (0.0, 40.0))
    assert waits.by_kind == {"not-ready": 30.0, UNEXPLAINED: 10.0} and waits.longest[0].still_waiting


def test_the_log_keeps_every_kind_the_engine_gives_and_orders_the_unknown_ones_after_the_known() -> None:
    p, q, r = service("p"), service("q"), training("r", 1)
    snapshot = Snapshot(nodes=(Node("a", A100, 1),), teams=(), pending=(p, q, r))
    plan = Plan(
        waiting=(Waiting("p", 1, 1, "…", blocker=BlockerKind.RESERVED), Waiting("q", 2, 2, "…")),
        evictions=(Evict("x", "priority"),),
    )
    log = CauseLog(window=WINDOW)
    log.record(snapshot, POLICY, 10.0, plan)
    assert [log.kind(10.0, job) for job in ("p", "q", "x", "r")] == ["reserved", NO_KIND, EVICTED, UNEXPLAINED]
    assert log.reasons == {"p": (10.0, "…"), "q": (10.0, "…")}
    kinds = ["(evicted this cycle)", "zeta", "quota", "capacity", "reserved", "(between cycles)"]
    assert ordered(kinds) == ["capacity", "quota", "reserved", "zeta", "(between cycles)", "(evicted this cycle)"]


def test_the_observer_records_in_the_window_only_and_returns_the_plan_untouched() -> None:
    plan = Plan(waiting=(Waiting("p", 1, 1, "…", blocker=BlockerKind.CAPACITY),))
    log = CauseLog(window=(10.0, 20.0))
    observed = log.observing(lambda snapshot, policy, now: plan)
    snapshot = Snapshot(nodes=(Node("a", A100, 1),), teams=(), pending=(service("p"),))
    assert observed(snapshot, POLICY, 0.0) is plan and observed(snapshot, POLICY, 10.0) is plan
    assert list(log.blockers) == [10.0]
    assert set(log.rooms) == {(10.0, "p")}  # production blocked by capacity: the room is asked


# -- room: was it capacity? -----------------------------------------------------------------------------------------


def snapshot_with(nodes: tuple[Node, ...], *placed: tuple[Job, tuple[Slot, ...]]) -> Snapshot:
    runs = tuple(Running(job, (slots,), started_at=0.0) for job, slots in placed)
    return Snapshot(nodes=nodes, teams=(), running=runs)


def room(snapshot: Snapshot, job: Job, plan: Plan | None = None) -> Room:
    applied = after_plan(snapshot, plan or Plan(), 100.0)
    assert applied is not None
    state, ready = applied
    return room_for(job, state, ready, {r.job.id: r.started_at for r in snapshot.running}, POLICY)


def test_a_free_instance_that_holds_the_job_is_room_and_lower_work_is_seen() -> None:
    node = Node("a", A100, 2, mig=(SPLIT, ()))
    low = service("low", priority=Priority.NORMAL)
    high = training("high", 1, priority=Priority.HIGH)
    snapshot = snapshot_with((node,), (low, (Slot("a", 0, "3g.40gb", 0),)), (high, (Slot("a", 1),)))
    assert room(snapshot, service("p", 30)) == Room(ROOM_INSTANCE, LOWER_WOULD_FREE, lower_preemptible=True)
    # 50 GiB: no 3g.40gb instance holds it and no GPU is idle; with the lower work gone both GPUs would be
    assert room(snapshot, service("p", 50)) == Room(None, LOWER_WOULD_FREE, lower_preemptible=True)


def test_an_idle_gpu_is_room_only_on_a_tier_the_job_may_use() -> None:
    busy = Node("a", A100, 1)
    spot = Node("s", A100, 1, tier=CapacityTier.SPOT)
    other = service("other", priority=Priority.PRODUCTION)
    snapshot = snapshot_with((busy, spot), (other, (Slot("a", 0),)))
    assert room(snapshot, service("p")) == Room(ROOM_FORBIDDEN_TIER, None)  # production never runs on spot
    assert room(snapshot, service("h", priority=Priority.HIGH)) == Room(ROOM_IDLE_GPU, None)


def test_no_room_is_split_by_whether_evicting_the_lower_priority_work_would_make_room() -> None:
    node = Node("a", A100, 2)
    high = service("high", priority=Priority.HIGH)  # not preemptible: production may still evict it
    prod = service("prod")
    snapshot = snapshot_with((node,), (high, (Slot("a", 0),)), (prod, (Slot("a", 1),)))
    assert room(snapshot, service("p")) == Room(None, LOWER_WOULD_FREE, lower_preemptible=False)
    assert room(snapshot, service("p2", replicas=2)).category == LOWER_TOO_SMALL  # one GPU freed, two needed
    full = snapshot_with((node,), (prod, (Slot("a", 0),)), (service("prod2"), (Slot("a", 1),)))
    assert room(full, service("p")).category == FULL


def test_room_that_needs_a_reconfiguration_after_the_evictions_is_told_apart() -> None:
    node = Node("a", A100, 2, mig=(SPLIT, ()))
    low = service("low", priority=Priority.NORMAL)
    snapshot = snapshot_with((node,), (low, (Slot("a", 0, "3g.40gb", 0),)), (service("prod"), (Slot("a", 1),)))
    # 50 GiB: evicting low leaves GPU 0 idle but split into two 3g.40gb instances, neither holds it
    assert room(snapshot, service("p", 50)).category == LOWER_WOULD_FREE_RECONFIGURATION
    assert room(snapshot, service("p", 30)).category == ROOM_INSTANCE  # the other instance is free


def test_a_gang_of_whole_gpus_counts_its_places_on_one_gpu_model() -> None:
    nodes = (Node("a", A100, 1), Node("h", "H100-SXM5-80GB", 1))
    gang = Job("g", "t", Request(gpus=1), replicas=2, priority=Priority.PRODUCTION)
    assert room(snapshot_with(nodes), gang) == Room(None, None)  # one idle GPU of each model: no room
    pair = training("pair", 1, replicas=2)
    single = training("single", 1)
    assert room(snapshot_with(nodes), single).room == ROOM_IDLE_GPU
    assert room(snapshot_with((Node("a", A100, 2),)), pair).room == ROOM_IDLE_GPU


def test_the_room_is_read_after_the_plan_binds_evicts_and_changes_layouts() -> None:
    node = Node("a", A100, 2)
    p, q, late = service("p"), service("q"), training("late", 1, priority=Priority.LOW)
    low = training("low", 1, priority=Priority.LOW)
    running = (Running(low, ((Slot("a", 0),),), 0.0),)
    snapshot = Snapshot(nodes=(node,), teams=(), running=running, pending=(p, q, late))
    # the plan binds q on the idle GPU: no room left for p; evicting low would free its GPU
    bound = room(snapshot, p, Plan(binds=(Bind("q", ((Slot("a", 1),),)),)))
    assert bound == Room(None, LOWER_WOULD_FREE, lower_preemptible=True)
    # lower work bound by this very cycle is no eviction candidate
    both = room(snapshot, service("p2", replicas=2), Plan(binds=(Bind("late", ((Slot("a", 1),),)),)))
    assert both == Room(None, LOWER_TOO_SMALL, lower_preemptible=True, lower_bound_now=True)
    # the plan evicts low: its GPU is idle after the plan
    assert room(snapshot, p, Plan(evictions=(Evict("low", "production"),))).room == ROOM_IDLE_GPU
    # a MIG reconfiguration under way closes the node: nothing there is room, nothing there is lower work
    change = Reconfigure("a", 1, (), SPLIT, ready_at=400.0)
    assert room(snapshot, p, Plan(reconfigurations=(change,))) == Room(None, None)


def test_counting_room_leaves_the_state_as_it_was() -> None:
    node = Node("a", A100, 2)
    low = training("low", 1, priority=Priority.LOW)
    snapshot = snapshot_with((node,), (low, (Slot("a", 0),)))
    applied = after_plan(snapshot, Plan(), 100.0)
    assert applied is not None
    state, ready = applied
    room_for(service("p", replicas=2), state, ready, {"low": 0.0}, POLICY)
    assert state.placed == {"low": ((Slot("a", 0),),)} and state.usage["t"]


# -- idle_while_pending by cause ------------------------------------------------------------------------------------


NODES = {"a": Node("a", A100, 4), "b": Node("b", A100, 4, tier=CapacityTier.SPOT)}


def test_the_gap_is_attributed_job_by_job_and_sums_to_the_metric() -> None:
    big, small, late = training("big", 2), training("small", 1), service("late", 10, Priority.NORMAL)
    free = (("a", (1.0, 1.0, 0.0, 0.0)), ("b", (1.0, 0.0, 0.0, 0.0)))
    samples = [CycleSample(0.0, free, (big, small, late)), CycleSample(10.0, free, (late,))]
    log = CauseLog(window=(0.0, 20.0))
    log.blockers = {0.0: {"big": "quota", "small": "reserved"}, 10.0: {"late": "capacity"}}
    causes = idle_causes(samples, NODES, POLICY, ((0.0, 8),), (0.0, 20.0), log)
    # at 0: big takes a's two idle GPUs, small b's; late finds nothing left; at 10 late takes 1/7 of a GPU
    assert causes.by["blocker"] == pytest.approx({"quota": 20.0, "reserved": 10.0, "capacity": 10 / 7})
    assert causes.by["gang"] == pytest.approx({"2-8": 20.0, "1": 10.0 + 10 / 7})
    assert causes.by["place"] == pytest.approx(
        {"idle GPUs, MIG off, off spot": 20.0 + 10 / 7, "idle GPUs, MIG off, on spot": 10.0}
    )
    assert causes.by["priority"] == pytest.approx({"normal": 30.0 + 10 / 7})
    assert causes.by["blocker_class"]["reserved / normal training"] == 10.0
    assert causes.by["blocker_place"]["reserved / idle GPUs, MIG off, on spot"] == 10.0
    assert causes.share == idle_while_pending(samples, NODES, POLICY, ((0.0, 8),), (0.0, 20.0))
    assert causes.gap_gpu_s == pytest.approx(sum(causes.by["blocker"].values()))


def test_gang_sizes() -> None:
    assert gang_size(training("t", 1), 1.0) == "1"
    assert gang_size(training("t", 4, replicas=2), 8.0) == "2-8"
    assert gang_size(training("t", 8, replicas=2), 16.0) == ">8"
    assert gang_size(service("s", 10, replicas=3), 3 / 7) == "1"
    assert gang_size(service("s", 100, replicas=2), 4.0) == "2-8"


# -- the metric's refactoring: its figure is the one it was ----------------------------------------------------------


def reference_cycle_gap(sample: CycleSample, nodes: Mapping[str, Node], policy: Policy) -> float:
    """``idle_pending.cycle_gap`` as it was before ``cycle_matches`` was drawn out of it, verbatim."""
    free = {name: list(shares) for name, shares in sample.free}
    if not any(share > 1e-9 for shares in free.values() for share in shares):
        return 0.0
    gap = 0.0
    failed: set[Hashable] = set()
    for job in sample.pending:
        shape = (job.request, job.replicas, job.gpu_model, job.tier, job.kind)
        if shape in failed:
            continue
        taken: list[tuple[str, int, float]] = []
        need_total = 0.0
        for _ in range(job.replicas):
            placed = _place_replica(job, free, nodes, policy)
            if placed is None:
                break
            taken.extend(placed[0])
            need_total += placed[1]
        else:
            gap += need_total
            continue
        for name, gpu, share in taken:
            free[name][gpu] += share
        failed.add(shape)
    return gap


def test_cycle_matches_are_the_gap_job_by_job() -> None:
    free = (("a", (1.0, 0.0, 0.0, 0.0)), ("b", (1.0, 0.5, 0.0, 0.0)))
    sample = CycleSample(0.0, free, (training("three", 1, replicas=3), training("one", 1), service("s", 10)))
    matches = cycle_matches(sample, NODES, POLICY)
    assert [(m.job.id, m.need) for m in matches] == [("one", 1.0), ("s", pytest.approx(1 / 7))]
    assert matches[1].places == (("b", 1, pytest.approx(1 / 7)),)  # best fit: the fullest GPU that holds it
    assert cycle_gap(sample, NODES, POLICY) == reference_cycle_gap(sample, NODES, POLICY)
