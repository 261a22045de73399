"""Reservations and backfill (docs/scheduling-rules.md, 5a): who gets a reservation, where and when, what may backfill
it, and the run-time estimates behind it."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from scheduler.core import Plan, Policy, plan_cycle
from scheduler.core.decisions.reservation import Reservation, Reservations, expected_runtime, may_backfill
from scheduler.core.model.demand import Demand
from scheduler.core.model.snapshot import Job, Node, Preemption, Running, Team
from scheduler.core.model.vocabulary import Priority
from scheduler.core.placement import IndexedClusterState
from scheduler.core.placement.options import Option, options_for
from tests.scheduler.properties.builders import A100, H100, NOW, job, node, running, snapshot, team, whole

POLICY = Policy()


def _plan(
    nodes: Sequence[Node],
    pending: Sequence[Job],
    running_jobs: Sequence[Running],
    teams: Sequence[Team] | None = None,
    policy: Policy = POLICY,
) -> Plan:
    teams = [team("t", guaranteed=64), team("u", guaranteed=64)] if teams is None else teams
    return plan_cycle(snapshot(nodes, pending, teams, running_jobs), policy, NOW)


def _busy(end_in_s: float, gpus: Sequence[int] = tuple(range(6)), name: str = "a") -> list[Running]:
    """Jobs of team u on node ``name`` that end ``end_in_s`` from now, one per GPU."""
    return [
        running(
            job(f"{name}{gpu}", "u", gpus=1, duration_s=1000 + end_in_s, preemptible=False),
            (whole(name, gpu),),
            started_at=NOW - 1000,
        )
        for gpu in gpus
    ]


def test_expected_runtime_is_the_duration_then_the_team_history_then_the_policy_default() -> None:
    history = Team("t", typical_runtime_s=900.0)
    assert expected_runtime(job("j", duration_s=60), history, POLICY) == 60
    assert expected_runtime(job("j"), history, POLICY) == 900.0
    assert expected_runtime(job("j"), Team("t"), POLICY) == POLICY.default_runtime_s
    assert expected_runtime(job("j"), None, Policy(default_runtime_s=5)) == 5


def _reservation(start_at: float, team_name: str = "t", priority: Priority = Priority.NORMAL) -> Reservation:
    reserving = job("big", team_name, gpus=8, priority=priority, preemptible=False)
    return Reservation(reserving, start_at, (("a", 0),), (("a", 0),), job("holder"))


@pytest.mark.parametrize(
    ("candidate", "runtime_s", "borrowing", "allowed"),
    [
        (job("p", "u", priority=Priority.PRODUCTION, preemptible=False), 10_000, False, True),  # production runs
        (job("s", "u", preemptible=False), 600, False, True),  # ends exactly at the start
        (job("s", "u", preemptible=False), 601, True, False),  # would delay it, and cannot yield
        (job("l", "t", priority=Priority.LOW, preemptible=True), 10_000, False, True),  # its own team's lower work
        (job("l", "t", priority=Priority.LOW, preemptible=False), 10_000, False, False),  # ... only when preemptible
        (job("l", "t", preemptible=True), 10_000, False, False),  # ... and behind it: not submitted with it
        (job("l", "t", preemptible=True, submitted_at=5), 10_000, False, True),  # ... submitted after it
        (job("l", "u", priority=Priority.LOW, preemptible=True), 10_000, False, False),  # another team's guarantee
        (job("l", "u", priority=Priority.LOW, preemptible=True), 10_000, True, True),  # ... its borrowed work
        (job("h", "u", priority=Priority.HIGH, preemptible=True), 10_000, True, False),  # ... not ahead of it
    ],
)
def test_what_may_backfill(candidate: Job, runtime_s: float, borrowing: bool, allowed: bool) -> None:
    assert may_backfill(candidate, _reservation(NOW + 600), runtime_s, NOW, borrowing) is allowed


def test_a_gang_gets_the_gpus_freed_first_and_its_eta_is_the_reservation_start() -> None:
    nodes = [node("a", H100), node("b", H100)]
    busy = _busy(300, range(6), "a") + _busy(900, range(8), "b")
    plan = _plan(nodes, [job("big", "t", gpus=8, preemptible=False)], busy)
    assert not plan.binds
    (waiting,) = plan.waiting
    assert waiting.blocker == "reserved" and waiting.eta_s == 300
    assert "reserved on a: expected to start in about 5 min" in waiting.reason


def test_a_job_its_quota_refuses_even_at_the_start_waits_for_the_quota_with_no_time() -> None:
    """The GPUs that free first are another team's: the firm job above its guarantee would still be refused then,
    so it gets the quota's reason, no reservation and no start time, and holds nothing others could use."""
    nodes = [node("a", H100)]
    own = [  # team t's firm work fills its guarantee of 2 and runs long
        running(job(f"t{gpu}", "t", gpus=1, duration_s=100_000, preemptible=False), (whole("a", gpu),), NOW - 10)
        for gpu in range(2)
    ]
    busy = own + _busy(300, range(2, 6))  # team u's work ends in 5 minutes; GPUs 6 and 7 idle
    over = job("over", "t", gpus=8, preemptible=False, submitted_at=1)
    small = job("small", "u", gpus=1, duration_s=10_000, preemptible=False, submitted_at=2)
    plan = _plan(nodes, [over, small], busy, teams=[team("t", guaranteed=2), team("u", guaranteed=64)])
    waiting = {w.job: w for w in plan.waiting}
    assert waiting["over"].blocker == "quota" and waiting["over"].eta_s is None
    assert "within quota" in waiting["over"].reason and "reserved" not in waiting["over"].reason
    assert [b.job for b in plan.binds] == ["small"]  # an idle GPU no reservation holds


def test_a_reservation_is_made_on_a_gpu_class_the_quota_admits() -> None:
    """Quotas are per GPU class: the H100s free first, but the team's H100 guarantee is 0, so the job reserves
    the A100s its quota admits, later, and the idle H100s stay free for others."""
    nodes = [node("a", H100), node("b", A100)]
    busy = [  # team u's: six H100s for 5 more minutes (two idle), every A100 for about 27 h
        running(job(f"a{gpu}", "u", gpus=1, duration_s=1300, preemptible=False), (whole("a", gpu),), NOW - 1000)
        for gpu in range(6)
    ] + [
        running(job(f"b{gpu}", "u", gpus=1, duration_s=100_000, preemptible=False), (whole("b", gpu),), NOW - 1000)
        for gpu in range(8)
    ]
    over = job("over", "t", gpus=8, preemptible=False, submitted_at=1)
    small = job("small", "u", gpus=1, duration_s=10_000, preemptible=False, submitted_at=2)
    teams = [team("t", H100=0.0, A100=8.0), team("u", guaranteed=64)]
    plan = _plan(nodes, [over, small], busy, teams=teams)
    waiting = {w.job: w for w in plan.waiting}
    assert waiting["over"].blocker == "reserved" and "reserved on b" in waiting["over"].reason
    assert waiting["over"].eta_s == 99_000  # when the A100 work ends, not the H100 work's 5 minutes
    assert [(b.job, b.slots[0][0].node) for b in plan.binds] == [("small", "a")]


def test_a_job_its_quota_refuses_on_every_class_at_the_start_waits_for_the_quota() -> None:
    nodes = [node("a", H100), node("b", A100)]
    busy = [
        running(job(f"a{gpu}", "u", gpus=1, duration_s=1300, preemptible=False), (whole("a", gpu),), NOW - 1000)
        for gpu in range(6)
    ]
    over = job("over", "t", gpus=8, preemptible=False, submitted_at=1)
    plan = _plan(nodes[:1], [over], busy, teams=[team("t", H100=0.0, A100=8.0), team("u", guaranteed=64)])
    (waiting,) = plan.waiting
    assert waiting.blocker == "quota" and waiting.eta_s is None and "class H100" in waiting.reason


def test_a_job_its_own_work_holds_back_reserves_for_when_that_work_ends() -> None:
    """The team's own work is what ends first: then its quota admits the job too, so it keeps its reservation
    and the start time is true (a gang must not starve behind its own team's small jobs)."""
    nodes = [node("a", H100)]
    own = [
        running(job(f"t{gpu}", "t", gpus=1, duration_s=1300, preemptible=False), (whole("a", gpu),), NOW - 1000)
        for gpu in range(6)
    ]
    big = job("big", "t", gpus=8, preemptible=False, submitted_at=1)
    plan = _plan(nodes, [big], own, teams=[team("t", guaranteed=8)])
    (waiting,) = plan.waiting
    assert waiting.blocker == "reserved" and waiting.eta_s == 300


def _at_burst(own_end_in_s: float = 100_000) -> tuple[list[Team], list[Running]]:
    """Team t (guarantee 2, burst 4) holds 4 GPUs of node a in preemptible work; team u's 4 end in 5 minutes."""
    teams = [team("t", guaranteed=2, burst=4), team("u", guaranteed=64)]
    own = [
        running(job(f"t{gpu}", "t", gpus=1, duration_s=1000 + own_end_in_s), (whole("a", gpu),), NOW - 1000)
        for gpu in range(4)
    ]
    return teams, own + _busy(300, range(4, 8))


@pytest.mark.parametrize(
    ("label", "pending", "policy"),
    [
        ("within the reservation depth", job("next", "t", gpus=1, submitted_at=1), POLICY),
        ("beyond the reservation depth", job("next", "t", gpus=1, submitted_at=1), Policy(reservation_depth=0)),
        ("asking host memory (no reservation)", job("next", "t", gpus=1, memory_mib=1024, submitted_at=1), POLICY),
    ],
)
def test_a_job_its_burst_limit_refuses_when_capacity_frees_gets_the_burst_reason_and_no_time(
    label: str, pending: Job, policy: Policy
) -> None:
    """The GPUs that free first are another team's; the team's own work runs long, so its burst limit would still
    refuse the job then: the burst reason, no reservation, no start time — as for the guarantee."""
    teams, busy = _at_burst()
    plan = _plan([node("a", H100)], [pending], busy, teams=teams, policy=policy)
    (waiting,) = plan.waiting
    assert waiting.blocker == "quota", label
    assert waiting.eta_s is None and "above its burst limit of 4" in waiting.reason and "reserved" not in waiting.reason


def test_a_job_its_burst_limit_refuses_holds_no_capacity_time_from_the_jobs_behind_it() -> None:
    """Its units are not claimed in the start-time replay: team w's job behind it (w borrows more) starts when w's
    own work ends, not after the blocked job's expected run."""
    teams, busy = _at_burst()
    teams.append(team("w"))
    busy = busy[:4] + [
        running(job(f"w{gpu}", "w", gpus=1, duration_s=1300), (whole("a", gpu),), NOW - 1000) for gpu in range(4, 8)
    ]
    blocked = job("next", "t", gpus=4, submitted_at=1)
    behind = job("other", "w", gpus=4, duration_s=600, submitted_at=2)
    plan = _plan([node("a", H100)], [blocked, behind], busy, teams=teams, policy=Policy(reservation_depth=0))
    assert [w.job for w in plan.waiting] == ["next", "other"]
    waiting = {w.job: w for w in plan.waiting}
    assert waiting["next"].eta_s is None and waiting["other"].eta_s == 300


def test_a_job_its_burst_limit_refuses_with_no_replay_time_waits_for_the_quota(monkeypatch) -> None:
    """When the replay gives no time (the pool's depth is used up) the quota's refusal now is the reason."""
    monkeypatch.setattr("scheduler.core.model.explain.PROFILE_DEPTH", 0)
    teams, busy = _at_burst(own_end_in_s=300)
    plan = _plan([node("a", H100)], [job("next", "t", gpus=1)], busy, teams=teams, policy=Policy(reservation_depth=0))
    (waiting,) = plan.waiting
    assert waiting.blocker == "quota" and waiting.eta_s is None and "burst limit" in waiting.reason


def test_a_job_at_its_burst_limit_whose_own_work_ends_first_keeps_its_start_time() -> None:
    """The team's own work ends by the time capacity frees: its burst share frees with it, so the time is true."""
    teams, busy = _at_burst(own_end_in_s=300)
    for policy in (POLICY, Policy(reservation_depth=0)):
        plan = _plan([node("a", H100)], [job("next", "t", gpus=1, submitted_at=1)], busy, teams=teams, policy=policy)
        (waiting,) = plan.waiting
        assert waiting.blocker in ("reserved", "capacity") and waiting.eta_s == 300


def test_held_gpus_take_only_work_that_ends_before_the_reservation_starts() -> None:
    nodes = [node("a", H100)]
    busy = _busy(300)  # GPUs 6 and 7 of a are idle
    big = job("big", "t", gpus=8, preemptible=False, submitted_at=1)
    long = job("long", "t", gpus=1, duration_s=301, preemptible=False, submitted_at=2)
    short = job("short", "t", gpus=1, duration_s=300, preemptible=False, submitted_at=3)
    plan = _plan(nodes, [big, long, short], busy)
    assert [b.job for b in plan.binds] == ["short"]
    assert {w.job: w.blocker for w in plan.waiting} == {"big": "reserved", "long": "capacity"}
    # without reservations the long job takes an idle GPU and the gang's start slips
    plain = _plan(nodes, [big, long, short], busy, policy=Policy(reservation_depth=0))
    assert sorted(b.job for b in plain.binds) == ["long", "short"]


def test_reservations_stop_at_the_depth_and_never_share_gpus() -> None:
    nodes = [node("a", H100), node("b", H100), node("c", H100)]
    busy = _busy(300, range(8), "a") + _busy(600, range(8), "b") + _busy(900, range(8), "c")
    gangs = [job(f"g{i}", "t", gpus=8, preemptible=False, submitted_at=i) for i in range(3)]
    plan = _plan(nodes, gangs, busy, policy=Policy(reservation_depth=2))
    assert [(w.job, w.blocker, w.eta_s) for w in plan.waiting] == [
        ("g0", "reserved", 300),
        ("g1", "reserved", 600),
        ("g2", "capacity", 900),  # past the depth: the queue replay's estimate (after g0 and g1), no reservation
    ]


def test_a_job_whose_gpus_are_all_busy_holds_nothing_and_backfill_skips_it() -> None:
    nodes = [node("a", H100)]
    busy = _busy(300, range(8))
    big = job("big", "t", gpus=8, preemptible=False, submitted_at=1)
    other = job("other", "t", gpus=1, duration_s=10, preemptible=False, submitted_at=2)
    plan = _plan(nodes, [big, other], busy)
    assert not plan.binds
    assert [w.blocker for w in plan.waiting] == ["reserved", "capacity"]


def test_a_job_past_its_estimate_is_expected_to_end_next_cycle() -> None:
    nodes = [node("a", H100)]
    overdue = [running(job("o", "u", gpus=8, duration_s=10, preemptible=False), (whole("a", *range(8)),), NOW - 60)]
    plan = _plan(nodes, [job("big", "t", gpus=8, preemptible=False)], overdue)
    assert plan.waiting[0].eta_s == POLICY.cycle_s


def test_the_team_history_estimates_work_that_states_no_duration() -> None:
    nodes = [node("a", H100)]
    held = [running(job("o", "u", gpus=8, preemptible=False), (whole("a", *range(8)),), NOW - 100)]
    teams = [team("t", guaranteed=8), Team("u", guaranteed=(("any", 8.0),), typical_runtime_s=700.0)]
    plan = _plan(nodes, [job("big", "t", gpus=8, preemptible=False)], held, teams=teams)
    assert plan.waiting[0].eta_s == 600


def test_reserve_makes_one_reservation_per_job_and_only_for_whole_gpus() -> None:
    state = IndexedClusterState(snapshot([node("a", H100)], (), [team("t", guaranteed=8)], _busy(300)), NOW)
    assert state.index is not None
    made = Reservations(state, state.index, POLICY, NOW, lambda job, holder: NOW + 300, lambda slots: None)
    big = job("big", "t", gpus=8)
    options = options_for(state.index, big, POLICY)
    mig_first = (Option(0, 0, options[0].group, Demand.mig("1g.10gb")), *options)
    assert made.reserve(big, mig_first) is None  # rule 1: whole GPUs on its preferred option only
    mixed = (*options, Option(0, 1, ("A100-SXM4-80GB", "on-demand", "nvswitch"), Demand.mig("1g.10gb")))
    first = made.reserve(big, mixed)  # a MIG option further down is not counted
    assert first is not None and first.start_at == NOW + 300 and first.held == (("a", 6), ("a", 7))
    assert made.reserve(big, options) is None  # a second turn in the cycle keeps the first
    assert made.held() == frozenset({("a", 6), ("a", 7)})


def _occupied_by(victim: Job, started_ago_s: float = 100.0) -> list[Running]:
    """``victim`` on GPUs 0–5 of node a (ending in two hours), GPUs 6–7 idle."""
    return [running(victim, (whole("a", *range(6)),), started_at=NOW - started_ago_s)]


@pytest.mark.parametrize(
    ("reserving", "victim", "teams", "eta_s"),
    [
        # priority: its own team's lower preemptible work, once its minimum runtime (300 s) is past
        (job("big", "t", gpus=8, priority=Priority.HIGH), job("v", "t", gpus=6, duration_s=7300), None, 200.0),
        # ... not higher or equal work, not work that is not preemptible: its expected end
        (job("big", "t", gpus=8), job("v", "t", gpus=6, duration_s=7300), None, 7200.0),
        (
            job("big", "t", gpus=8, priority=Priority.HIGH),
            job("v", "t", gpus=6, duration_s=7300, preemptible=False),
            None,
            7200.0,
        ),
        # reclaim across teams: another team's borrowed preemptible work while under the guarantee
        (job("big", "t", gpus=8), job("v", "u", gpus=6, duration_s=7300), [team("t", guaranteed=8), team("u")], 200.0),
        # ... not when that work is within its own team's guarantee
        (job("big", "t", gpus=8), job("v", "u", gpus=6, duration_s=7300), None, 7200.0),
        # production: lower work of any team at once (no minimum runtime for production)
        (
            job("big", "t", gpus=8, priority=Priority.PRODUCTION, preemptible=False),
            job("v", "u", gpus=6, duration_s=7300, preemptible=False),
            None,
            None,  # evictable now: no reservation at all (the preemption's own business)
        ),
        # ... never other production
        (
            job("big", "t", gpus=8, priority=Priority.PRODUCTION, preemptible=False),
            job("v", "u", gpus=6, duration_s=7300, priority=Priority.PRODUCTION),
            None,
            7200.0,
        ),
    ],
)
def test_work_the_job_may_evict_frees_its_gpus_when_the_minimum_runtime_is_past(
    reserving: Job, victim: Job, teams: list[Team] | None, eta_s: float | None
) -> None:
    plan = _plan([node("a", H100)], [reserving], _occupied_by(victim), teams=teams)
    if eta_s is None:
        assert plan.waiting == () or plan.waiting[0].blocker != "reserved"
    else:
        assert (plan.waiting[0].blocker, plan.waiting[0].eta_s) == ("reserved", eta_s)


def test_with_fair_share_off_priority_preemption_still_frees_gpus_and_reclaim_does_not() -> None:
    # the grounds are preemption's own (victims.ground): priority needs no fair share, reclaim does
    own = job("v", "t", gpus=6, duration_s=7300)
    other = job("v", "u", gpus=6, duration_s=7300)
    reserving = job("big", "t", gpus=8, priority=Priority.HIGH)
    off = Policy(fairness=False)
    teams = [team("t", guaranteed=8), team("u")]
    assert _plan([node("a", H100)], [reserving], _occupied_by(own), policy=off).waiting[0].eta_s == 200.0
    assert _plan([node("a", H100)], [reserving], _occupied_by(other), teams, policy=off).waiting[0].eta_s == 7200.0


def test_its_own_borrowed_work_frees_its_gpus_for_a_job_that_is_not_preemptible() -> None:
    # Team t (guarantee 8) runs 4 firm GPUs on b and 6 preemptible high GPUs on a: those are borrowed (the fill
    # takes firm work first). Its 4-GPU low job that is not preemptible is within the guarantee and may reclaim.
    firm = running(job("f", "t", gpus=4, duration_s=9000, preemptible=False), (whole("b", *range(4)),), NOW - 100)
    victim = job("v", "t", gpus=6, duration_s=7300, priority=Priority.HIGH)
    reserving = job("j", "t", gpus=4, priority=Priority.LOW, preemptible=False)
    nodes = [node("a", H100), node("b", H100, 4)]
    plan = _plan(nodes, [reserving], [firm, *_occupied_by(victim)], teams=[team("t", guaranteed=8)])
    assert (plan.waiting[0].blocker, plan.waiting[0].eta_s) == ("reserved", 200.0)


# -- preemptible work backfills past the start, and yields when the reservation starts (rules 4 and 6) -----------


def _backfill_teams() -> list[Team]:
    """Both teams' work is borrowed, so no reclaim reaches across: only the backfill ground does."""
    return [team("t", guaranteed=0), team("u", guaranteed=0)]


def _gang() -> Job:
    return job("big", "t", gpus=8, preemptible=True, submitted_at=1)


def test_preemptible_borrowed_work_backfills_held_gpus_however_long_it_runs() -> None:
    """The gang holds GPUs 6 and 7 of a for 5 minutes; another team's preemptible job submitted after it, that
    would run for hours, takes one anyway (it yields it back when the gang can start); one submitted before the
    gang is not behind it in the order, so it may not."""
    nodes = [node("a", H100)]
    early = job("early", "u", gpus=1, duration_s=10_000, preemptible=True, submitted_at=0.5)
    late = job("late", "u", gpus=1, duration_s=10_000, preemptible=True, submitted_at=2)
    plan = _plan(nodes, [_gang(), early, late], _busy(300), teams=_backfill_teams())
    assert [b.job for b in plan.binds] == ["late"]
    assert {w.job: w.blocker for w in plan.waiting} == {"big": "reserved", "early": "capacity"}
    assert plan.waiting[0].eta_s == 300 and not plan.evictions


def _backfilled(started_at: float, the_job: Job | None = None) -> Running:
    """A preemptible job of team u on GPU 7 of a (borrowed: u is guaranteed nothing), started at ``started_at``."""
    the_job = the_job or job("bf", "u", gpus=1, duration_s=100_000, preemptible=True, submitted_at=2)
    return running(the_job, (whole("a", 7),), started_at=started_at)


def test_the_reserving_job_takes_back_what_was_backfilled_when_it_can_start() -> None:
    """The work that ran on a's other GPUs has ended: only the backfilled job stands in the gang's way, so it yields
    its GPU — evicted with the reason ``backfill``, for the gang — and the gang starts."""
    plan = _plan([node("a", H100)], [_gang()], [_backfilled(NOW - 1000)], teams=_backfill_teams())
    assert [(e.job, e.reason, e.by) for e in plan.evictions] == [("bf", "backfill", "big")]
    assert [b.job for b in plan.binds] == ["big"]


@pytest.mark.parametrize(
    ("backfilled", "teams", "why"),
    [
        (_backfilled(NOW - 1000), [team("t", guaranteed=0), team("u", guaranteed=8)], "within its team's guarantee"),
        (_backfilled(0.5), None, "started before the gang was submitted"),
        (_backfilled(NOW - 10), None, "within its minimum runtime"),
        (
            _backfilled(NOW - 1000, job("bf", "u", gpus=1, priority=Priority.HIGH, preemptible=True, submitted_at=2)),
            None,
            "ahead of the gang in the order",
        ),
        (
            _backfilled(NOW - 1000, job("bf", "u", gpus=1, preemptible=False, submitted_at=2)),
            None,
            "not preemptible",
        ),
    ],
)
def test_work_that_did_not_backfill_in_front_of_the_job_does_not_yield(
    backfilled: Running, teams: list[Team] | None, why: str
) -> None:
    plan = _plan([node("a", H100)], [_gang()], [backfilled], teams=teams or _backfill_teams())
    assert not plan.evictions, why
    assert not plan.binds, why


def test_a_job_past_the_reservation_depth_takes_nothing_back() -> None:
    plan = _plan(
        [node("a", H100)],
        [_gang()],
        [_backfilled(NOW - 1000)],
        teams=_backfill_teams(),
        policy=Policy(reservation_depth=0),
    )
    assert not plan.evictions and not plan.binds


def test_taking_back_evicts_only_the_work_under_the_placement_it_gets() -> None:
    """Two nodes: a has the backfilled job, b one backfilled job on each of two GPUs. The gang of 8 takes a, and
    only a's job yields; b's work runs on."""
    nodes = [node("a", H100), node("b", H100)]
    on_b = [
        running(
            job(f"b{gpu}", "u", gpus=1, duration_s=100_000, preemptible=True, submitted_at=2),
            (whole("b", gpu),),
            NOW - 1000,
        )
        for gpu in range(2)
    ]
    plan = _plan(nodes, [_gang()], [_backfilled(NOW - 1000), *on_b], teams=_backfill_teams())
    assert [(b.job, b.slots[0][0].node) for b in plan.binds] == [("big", "a")]
    assert [e.job for e in plan.evictions] == ["bf"]


def test_the_job_that_evicted_it_within_the_ping_pong_window_is_spared() -> None:
    snap = snapshot(
        [node("a", H100)],
        [_gang()],
        _backfill_teams(),
        [_backfilled(NOW - 1000)],
        preemptions=(Preemption(victim="big", by="bf", at=NOW - 60),),
    )
    plan = plan_cycle(snap, POLICY, NOW)
    assert not plan.evictions and not plan.binds


def test_nothing_yields_while_the_other_work_still_keeps_the_job_out() -> None:
    """The backfilled job would yield, but a's other GPUs are still busy: evicting it alone makes no room, so it
    runs on and the gang keeps its reservation, starting when that work ends: the backfilled job's GPU counts as
    free from when it would yield (its minimum runtime is past), not from its own end hours away."""
    plan = _plan([node("a", H100)], [_gang()], [_backfilled(NOW - 1000), *_busy(300)], teams=_backfill_teams())
    assert not plan.evictions and not plan.binds
    assert (plan.waiting[0].blocker, plan.waiting[0].eta_s) == ("reserved", 300)


def test_after_a_backfill_the_start_holds_and_work_that_would_delay_it_still_may_not_backfill() -> None:
    """Were the start read from the backfilled job's own end (hours away), a job that may not yield (it was
    submitted before the gang) but ends before that would take the gang's last held GPU and delay it."""
    # submitted before the gang, so it would not yield; it states host CPU, so it takes nothing back itself
    early = job("early", "u", gpus=1, duration_s=5000, preemptible=True, submitted_at=0.5, cpu_milli=100)
    plan = _plan([node("a", H100)], [_gang(), early], [_backfilled(NOW - 1000), *_busy(300)], teams=_backfill_teams())
    assert not plan.binds
    assert {w.job: (w.blocker, w.eta_s) for w in plan.waiting}["big"] == ("reserved", 300)
