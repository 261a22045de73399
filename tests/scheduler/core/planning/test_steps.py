"""The steps of a job's turn (scheduler.core.planning.steps), each alone on a small snapshot, and the two orders.

A step is called as the cycle calls it, on the working state the cycle builds (:class:`Run`) and a fresh
:class:`Turn`; each test checks what the step's contract says it returns and may change."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

import pytest

import scheduler.core.planning.cycle as cycle_module
import scheduler.core.planning.steps as steps_module
from scheduler.core.model.explain import Blocker
from scheduler.core.model.plan import Evict
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Node, Running, Slot, Team
from scheduler.core.model.vocabulary import BlockerKind, EvictionReason, JobKind, Priority
from scheduler.core.placement.fallback import fallback_slots, oversize_slots
from scheduler.core.placement.mix import observe
from scheduler.core.placement.options import options_for
from scheduler.core.planning.run import Run, live_index
from scheduler.core.planning.steps import (
    OTHER_STEPS,
    PRODUCTION_STEPS,
    Step,
    Turn,
    backfill,
    choose,
    fallback,
    hold,
    idle_whole_gpu,
    not_ready,
    oversize,
    preempt,
    preempt_preemptible,
    preempt_whole_gpu,
    reconfigure_by_drain,
    reconfigure_idle,
    reserve,
    steps_for,
    take_turn,
    wait,
)
from scheduler.core.rules.limits import Admission
from scheduler.core.rules.search_bound import skipped_text
from scheduler.core.speedups.memo import Memo, current_memo
from scheduler.core.speedups.switch import fair_share, indexed_state
from tests.scheduler.properties.builders import A100, H100, NOW, job, node, running, snapshot, team, whole

POLICY = Policy()
REFUSED = Admission(False, False, "over the team's guarantee")


@pytest.fixture(autouse=True)
def _cycle_memo() -> Iterator[None]:
    """Each test plans as one cycle does: under a memo of its own, the speed-ups on."""
    with Memo(True).current():
        yield


def _run(
    nodes: Sequence[Node],
    pending: Sequence[Job] = (),
    teams: Sequence[Team] | None = None,
    running_jobs: Sequence[Running] = (),
    policy: Policy = POLICY,
    **kwargs: object,
) -> Run:
    """The working state a cycle starts its turns with (as :func:`scheduler.core.planning.cycle._plan` builds it)."""
    teams = [team(guaranteed=1000)] if teams is None else teams
    world = snapshot(nodes, pending, teams, running_jobs, **kwargs)
    memo = current_memo()
    state = indexed_state(world, NOW, memo)
    fairness = fair_share(world.teams, state, policy, memo)
    index = live_index(state)
    index.mix = observe(state, index, world.pending, policy)
    return Run(state, fairness, policy, NOW, world, world.pending)


def _production(job_id: str, team_name: str = "t", *, gpus: int | None = None, mig: str | None = None) -> Job:
    """Production inference, not preemptible."""
    priority, kind = Priority.PRODUCTION, JobKind.INFERENCE
    return job(job_id, team_name, gpus=gpus, mig=mig, priority=priority, kind=kind, preemptible=False)


def _turn(run: Run, the_job: Job, admission: Admission | None = None) -> Turn:
    return Turn(the_job, options_for(run.index, the_job, run.policy), admission)


def _bound(run: Run) -> dict[str, list[Slot]]:
    return {b.job: [slot for replica in b.slots for slot in replica] for b in run.binds}


def _refuse(*args: object, **kwargs: object) -> bool:
    raise AssertionError("the step asked what its contract says it does not")


def _busy(end_in_s: float, gpus: Sequence[int] = tuple(range(6))) -> list[Running]:
    """Firm jobs of team u on node a, one per GPU, that end ``end_in_s`` from now."""
    return [
        running(
            job(f"a{gpu}", "u", gpus=1, duration_s=1000 + end_in_s, preemptible=False),
            (whole("a", gpu),),
            started_at=NOW - 1000,
        )
        for gpu in gpus
    ]


TEAMS_TU = [team("t", guaranteed=64), team("u", guaranteed=64)]


# -- the turn ---------------------------------------------------------------------------------------------------


def test_production_steps_act_for_production_work_its_quota_has_not_refused() -> None:
    run = _run([node("a")])
    assert _turn(run, _production("p")).production
    assert not _turn(run, _production("p"), REFUSED).production
    assert not _turn(run, job("j", priority=Priority.HIGH)).production


# -- not_ready --------------------------------------------------------------------------------------------------


def test_not_ready_ends_the_turn_of_a_job_no_ready_node_may_take() -> None:
    the_job = job("j")
    run = _run([node("a", schedulable=False)], [the_job])
    assert not_ready(run, _turn(run, the_job)) is True
    assert run.blockers == {"j": Blocker(BlockerKind.NOT_READY)}
    ready = _run([node("a")], [the_job])
    assert not_ready(ready, _turn(ready, the_job)) is False
    assert not ready.blockers


# -- choose -----------------------------------------------------------------------------------------------------


def test_choose_binds_on_free_capacity_the_quota_admits() -> None:
    the_job = job("j", gpus=2)
    run = _run([node("a", H100, 2)], [the_job])
    turn = _turn(run, the_job)
    assert choose(run, turn) is True
    assert _bound(run) == {"j": [Slot("a", 0), Slot("a", 1)]}
    assert turn.admission is None


def test_choose_records_the_quotas_refusal_and_binds_nothing() -> None:
    the_job = job("j", gpus=2, preemptible=False)
    run = _run([node("a", H100, 2)], [the_job], teams=[team("t", guaranteed=1)])
    turn = _turn(run, the_job)
    assert choose(run, turn) is False
    assert not run.binds and turn.admission is not None and not turn.admission.ok


def test_choose_leaves_no_refusal_when_nothing_fits() -> None:
    the_job = job("j", gpus=2)
    busy = running(job("b", gpus=1), (whole("a", 0),))
    run = _run([node("a", H100, 2)], [the_job], running_jobs=[busy])
    turn = _turn(run, the_job)
    assert choose(run, turn) is False
    assert not run.binds and turn.admission is None


# -- backfill ---------------------------------------------------------------------------------------------------


def _reserved_world(*pending: Job) -> Run:
    """Node a: GPUs 0–5 busy for 300 s more, 6 and 7 idle and reserved for the gang "big"."""
    big = job("big", "t", gpus=8, preemptible=False)
    run = _run([node("a", H100)], [big, *pending], teams=TEAMS_TU, running_jobs=_busy(300))
    assert reserve(run, _turn(run, big)) is True
    return run


def test_backfill_binds_work_that_leaves_the_reserved_gpus_before_the_reservation_starts() -> None:
    short = job("short", "t", gpus=1, duration_s=300, preemptible=False)
    run = _reserved_world(short)
    assert backfill(run, _turn(run, short)) is True
    assert _bound(run)["short"][0].gpu in (6, 7)


def test_backfill_leaves_the_reserved_gpus_to_work_that_would_still_hold_them() -> None:
    long = job("long", "t", gpus=1, duration_s=301, preemptible=False)
    run = _reserved_world(long)
    assert backfill(run, _turn(run, long)) is False
    assert [b.job for b in run.binds] == []


def test_backfill_acts_only_with_a_reservation_and_no_refusal() -> None:
    short = job("short", "t", gpus=1, duration_s=300, preemptible=False)
    run = _run([node("a", H100)], [short], teams=TEAMS_TU, running_jobs=_busy(300))
    assert backfill(run, _turn(run, short)) is False  # no reservation was made this cycle
    reserved = _reserved_world(short)
    assert backfill(reserved, _turn(reserved, short, REFUSED)) is False
    assert not run.binds and [b.job for b in reserved.binds] == []


# -- idle_whole_gpu ---------------------------------------------------------------------------------------------


def test_idle_whole_gpu_binds_a_full_gpu_instance_on_an_idle_mig_off_gpu() -> None:
    the_job = job("j", mig="7g.80gb", kind=JobKind.INFERENCE)
    run = _run([node("w", A100, 1)], [the_job])
    turn = _turn(run, the_job)
    assert choose(run, turn) is False  # no 7g.80gb instance exists
    assert idle_whole_gpu(run, turn) is True
    assert _bound(run) == {"j": [Slot("w", 0)]}


def test_idle_whole_gpu_records_the_quotas_refusal_of_the_gpu() -> None:
    the_job = job("j", mig="7g.80gb", kind=JobKind.INFERENCE, preemptible=False)
    run = _run([node("w", A100, 1)], [the_job], teams=[team("t", guaranteed=0.5)])
    turn = _turn(run, the_job)
    assert idle_whole_gpu(run, turn) is False
    assert not run.binds and turn.admission is not None and not turn.admission.ok


def test_idle_whole_gpu_acts_only_without_a_refusal_and_with_such_a_gpu() -> None:
    the_job = job("j", mig="7g.80gb", kind=JobKind.INFERENCE)
    run = _run([node("w", A100, 1)], [the_job])
    turn = _turn(run, the_job, REFUSED)
    assert idle_whole_gpu(run, turn) is False
    assert not run.binds and turn.admission is REFUSED
    cut = _run([node("w", A100, 1, mig="all-1g.10gb")], [the_job])
    assert idle_whole_gpu(cut, _turn(cut, the_job)) is False
    assert not cut.binds


# -- fallback ---------------------------------------------------------------------------------------------------


def test_fallback_binds_production_on_a_whole_idle_gpu() -> None:
    prod = _production("p", mig="4g.40gb")
    run = _run([node("w", A100, 1)], [prod])
    turn = _turn(run, prod)
    assert choose(run, turn) is False and idle_whole_gpu(run, turn) is False
    assert fallback(run, turn) is True
    assert _bound(run) == {"p": [Slot("w", 0)]}


def test_fallback_acts_only_for_production_its_quota_admits() -> None:
    prod = _production("p", mig="4g.40gb")
    other = job("o", mig="4g.40gb", kind=JobKind.INFERENCE, priority=Priority.HIGH)
    run = _run([node("w", A100, 1)], [prod, other])
    assert fallback(run, _turn(run, other)) is False
    assert fallback(run, _turn(run, prod, REFUSED)) is False
    small = _run([node("w", A100, 1)], [prod], teams=[team("t", guaranteed=0.5, burst=0.6)])  # a 4g, not a GPU
    assert fallback_slots(small.state, prod, POLICY) is not None  # found, but not admitted
    assert fallback(small, _turn(small, prod)) is False
    assert not run.binds and not small.binds


# -- preempt_preemptible ----------------------------------------------------------------------------------------


def _full_h100(preemptible: bool) -> list[Running]:
    """Node a's eight GPUs held by one job of team u (low priority), ``preemptible`` or not."""
    return [running(job("r", "u", gpus=8, priority=Priority.LOW, preemptible=preemptible), (whole("a", *range(8)),))]


def test_preempt_preemptible_evicts_preemptible_work_for_production() -> None:
    prod = _production("p", "t", gpus=8)
    run = _run([node("a", H100)], [prod], teams=TEAMS_TU, running_jobs=_full_h100(True))
    assert preempt_preemptible(run, _turn(run, prod)) is True
    assert [e.job for e in run.evictions] == ["r"] and list(_bound(run)) == ["p"]


def test_preempt_preemptible_leaves_firm_work_to_the_general_preemption() -> None:
    prod = _production("p", "t", gpus=8)
    run = _run([node("a", H100)], [prod], teams=TEAMS_TU, running_jobs=_full_h100(False))
    assert preempt_preemptible(run, _turn(run, prod)) is False
    assert not run.evictions and not run.binds
    assert run.preempt_fails(prod, True)  # remembered: asked again, no search is made
    assert preempt(run, _turn(run, prod)) is True  # production may evict the firm low-priority job
    assert [e.job for e in run.evictions] == ["r"]


def test_preempt_preemptible_acts_only_for_production_and_not_when_known_to_fail(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    prod = _production("p", "t", gpus=8)
    other = job("o", "t", gpus=8, priority=Priority.HIGH)
    run = _run([node("a", H100)], [prod, other], teams=TEAMS_TU, running_jobs=_full_h100(False))
    assert preempt_preemptible(run, _turn(run, prod)) is False  # the search failed; it is remembered
    monkeypatch.setattr(run, "preempt", _refuse)
    assert preempt_preemptible(run, _turn(run, prod)) is False
    assert preempt_preemptible(run, _turn(run, other)) is False
    assert preempt_preemptible(run, _turn(run, prod, REFUSED)) is False


# -- preempt_whole_gpu ------------------------------------------------------------------------------------------


def _mig_off_world(prod: Job, *, preemptible: Sequence[bool] = (False,), svc: Team | None = None) -> Run:
    """Node m's one GPU in 1g.10gb instances, one held by team lab's low preemptible inference; nodes w0, w1, …
    one GPU each with MIG off, each held by lab's low training, preemptible as ``preemptible`` says."""
    small = running(
        job("small", "lab", mig="1g.10gb", kind=JobKind.INFERENCE, priority=Priority.LOW),
        ((Slot("m", 0, "1g.10gb", 0),),),
        started_at=NOW - 1000,
    )
    trains = [
        running(
            job(f"train{i}", "lab", gpus=1, priority=Priority.LOW, preemptible=flag),
            (whole(f"w{i}", 0),),
            started_at=NOW - 1000,
        )
        for i, flag in enumerate(preemptible)
    ]
    nodes = [node("m", A100, 1, mig="all-1g.10gb"), *(node(f"w{i}", A100, 1) for i in range(len(trains)))]
    teams = [svc or team("svc", guaranteed=1), team("lab", guaranteed=8)]
    return _run(nodes, [prod], teams=teams, running_jobs=[small, *trains])


def test_preempt_whole_gpu_evicts_lower_work_from_a_mig_off_gpu_for_a_profile_that_takes_the_whole_gpu() -> None:
    prod = _production("p", "svc", mig="7g.80gb")
    run = _mig_off_world(prod)
    turn = _turn(run, prod)
    for step in (choose, idle_whole_gpu, fallback, preempt_preemptible):
        assert step(run, turn) is False  # no free or preemptible 7g.80gb instance, no idle MIG-off GPU
    assert preempt_whole_gpu(run, turn) is True
    assert run.evictions == [Evict("train0", EvictionReason.PRODUCTION, "p")]
    assert _bound(run) == {"p": [Slot("w0", 0)]}
    assert not run.reconfigurations.changes and "small" in run.state.placed  # no reconfiguration, no MIG victim


def test_preempt_whole_gpu_takes_preemptible_work_before_firm_work() -> None:
    prod = _production("p", "svc", mig="7g.80gb")
    run = _mig_off_world(prod, preemptible=(False, True))
    assert preempt_whole_gpu(run, _turn(run, prod)) is True
    assert [e.job for e in run.evictions] == ["train1"] and _bound(run) == {"p": [Slot("w1", 0)]}


def test_preempt_whole_gpu_takes_only_a_gpu_its_quota_admits_and_remembers_a_failure() -> None:
    prod = _production("p", "svc", mig="7g.80gb")
    run = _mig_off_world(prod, svc=team("svc", guaranteed=0.5, burst=0.9))  # a whole GPU is over the burst limit
    assert preempt_whole_gpu(run, _turn(run, prod)) is False
    assert not run.evictions and not run.binds and "train0" in run.state.placed
    assert run.preempt_fails(prod, whole_gpu=True) and not run.preempt_fails(prod)  # remembered for its kind only


def test_preempt_whole_gpu_acts_only_for_production_with_such_a_profile_and_not_when_known_to_fail(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    prod = _production("p", "svc", mig="7g.80gb")
    other = job("o", "svc", mig="7g.80gb", kind=JobKind.INFERENCE, priority=Priority.HIGH, preemptible=False)
    smaller = _production("p3", "svc", mig="3g.40gb")  # a whole GPU would be a fallback for it, not its capacity
    run = _mig_off_world(prod)
    monkeypatch.setattr(run, "preempt", _refuse)
    assert preempt_whole_gpu(run, _turn(run, other)) is False
    assert preempt_whole_gpu(run, _turn(run, prod, REFUSED)) is False
    assert preempt_whole_gpu(run, _turn(run, smaller)) is False
    monkeypatch.setattr(run, "preempt_fails", lambda job, preemptible_only=False, whole_gpu=False: whole_gpu)
    assert preempt_whole_gpu(run, _turn(run, prod)) is False
    assert not run.evictions and not run.binds


# -- oversize ---------------------------------------------------------------------------------------------------


def test_oversize_binds_production_on_a_whole_idle_gpu_and_makes_its_way_back_elsewhere() -> None:
    # Two idle MIG-off GPUs: the service starts on one at once, and the other is reconfigured for its right size
    # (the change it would have waited for), set aside for its move; it is told nothing (it runs).
    prod = _production("p", mig="1g.10gb")
    run = _run([node("v", A100, 1), node("w", A100, 1)], [prod])
    turn = _turn(run, prod)
    assert fallback(run, turn) is False  # a whole GPU is more than twice a 1g.10gb
    assert oversize(run, turn) is True
    assert _bound(run) == {"p": [Slot("v", 0)]}
    assert [c.node for c in run.reconfigurations.changes] == ["w"]
    assert "p" not in run.blockers
    # The change's 1g.10gb is set aside: another 1g.10gb job finds no unclaimed instance under way.
    other = _production("q", mig="1g.10gb")
    assert run.reconfigurations.way_back(other, ((Slot("v", 0),),)) is False


def test_oversize_takes_an_instance_a_change_under_way_offers_as_its_way_back() -> None:
    prod = _production("p", mig="1g.10gb")
    changing = node("c", A100, 1, mig="all-1g.10gb", reconfiguring_until=NOW + 200)
    run = _run([node("v", A100, 1), changing], [prod])
    assert oversize(run, _turn(run, prod)) is True
    assert _bound(run) == {"p": [Slot("v", 0)]}
    assert not run.reconfigurations.changes  # the change under way is its way back


def test_oversize_waits_for_the_change_when_it_has_no_way_back() -> None:
    # One idle GPU only: starting on it would leave nothing to move back to, so the job waits for its change there.
    prod = _production("p", mig="1g.10gb")
    run = _run([node("w", A100, 1)], [prod])
    turn = _turn(run, prod)
    assert oversize(run, turn) is False
    assert not run.binds and not run.reconfigurations.changes
    assert reconfigure_idle(run, turn) is True
    assert [c.node for c in run.reconfigurations.changes] == ["w"]
    # Two replicas on two idle whole GPUs, and a change under way that offers one 3g.40gb: no way back for the
    # second replica, so none is set aside, and the job waits for its changes as before.
    pair = job("r", mig="3g.40gb", replicas=2, priority=Priority.PRODUCTION, kind=JobKind.INFERENCE)
    changing = node("c", A100, 1, mig="all-balanced", reconfiguring_until=NOW + 200)
    both = _run([node("v", A100, 1), node("w", A100, 1), changing], [pair])
    assert oversize(both, _turn(both, pair)) is False
    assert not both.binds and not both.reconfigurations.changes
    assert reconfigure_idle(both, _turn(both, pair)) is True  # it claims the one under way (partly served)
    # A job with no MIG option has no way back to ask for.
    assert both.reconfigurations.way_back(_production("g", gpus=1), ()) is False


def test_oversize_acts_only_for_production_its_quota_admits() -> None:
    prod = _production("p", mig="1g.10gb")
    other = job("o", mig="1g.10gb", kind=JobKind.INFERENCE, priority=Priority.HIGH)
    run = _run([node("w", A100, 1)], [prod, other])
    assert oversize(run, _turn(run, other)) is False
    assert oversize(run, _turn(run, prod, REFUSED)) is False
    small = _run([node("w", A100, 1)], [prod], teams=[team("t", guaranteed=0.5, burst=0.6)])  # a 1g, not a GPU
    assert oversize_slots(small.state, prod, POLICY) is not None  # found, but not admitted
    assert oversize(small, _turn(small, prod)) is False
    none = _run([node("w", A100, 1, mig="all-1g.10gb")], [_production("q", mig="3g.40gb")])
    assert oversize(none, _turn(none, _production("q", mig="3g.40gb"))) is False  # nothing larger is free
    assert not run.binds and not small.binds and not none.binds


# -- reconfigure_idle -------------------------------------------------------------------------------------------


def test_reconfigure_idle_changes_an_idle_gpu_for_production_and_it_waits() -> None:
    prod = _production("p", mig="3g.40gb")
    run = _run([node("w", A100, 1, mig="all-1g.10gb")], [prod])
    assert reconfigure_idle(run, _turn(run, prod)) is True
    assert [(c.node, c.gpu) for c in run.reconfigurations.changes] == [("w", 0)]
    assert run.blockers["p"].kind == BlockerKind.RECONFIGURING


def test_reconfigure_idle_acts_only_for_production() -> None:
    other = job("o", mig="3g.40gb", kind=JobKind.INFERENCE, priority=Priority.HIGH)
    prod = _production("p", mig="3g.40gb")
    run = _run([node("w", A100, 1, mig="all-1g.10gb")], [other, prod])
    assert reconfigure_idle(run, _turn(run, other)) is False
    assert reconfigure_idle(run, _turn(run, prod, REFUSED)) is False
    assert not run.reconfigurations.changes and not run.blockers


# -- preempt ----------------------------------------------------------------------------------------------------


def _borrowed_world(*pending: Job) -> Run:
    """Node a's eight GPUs held by team u's preemptible job, above u's guarantee of 0: borrowed."""
    borrowed = running(job("r", "u", gpus=8), (whole("a", *range(8)),))
    teams = [team("t", guaranteed=8), team("u", guaranteed=0)]
    return _run([node("a", H100)], pending, teams=teams, running_jobs=[borrowed])


def test_preempt_evicts_for_a_team_under_its_guarantee_and_binds() -> None:
    the_job = job("j", "t", gpus=4, preemptible=False)
    run = _borrowed_world(the_job)
    assert preempt(run, _turn(run, the_job)) is True
    assert [(e.job, e.by) for e in run.evictions] == [("r", "j")] and list(_bound(run)) == ["j"]


def test_preempt_fails_changing_nothing_and_remembers_it() -> None:
    the_job = job("j", "t", gpus=4, preemptible=False)
    firm = running(job("r", "u", gpus=8, preemptible=False), (whole("a", *range(8)),))
    run = _run(
        [node("a", H100)], [the_job], teams=[team("t", guaranteed=8), team("u", guaranteed=8)], running_jobs=[firm]
    )
    assert preempt(run, _turn(run, the_job)) is False
    assert not run.evictions and not run.binds and run.preempt_fails(the_job)


def test_preempt_waits_for_a_reconfiguration_that_could_serve_other_work(monkeypatch: pytest.MonkeyPatch) -> None:
    the_job = job("j", "t", gpus=4, preemptible=False)
    run = _borrowed_world(the_job)
    monkeypatch.setattr(run.reconfigurations, "could_change_for", lambda job: True)
    monkeypatch.setattr(run, "preempt", _refuse)
    assert preempt(run, _turn(run, the_job)) is False


@pytest.mark.parametrize(
    "the_job",
    [
        _production("p", "t", gpus=4),  # production never waits for a change
        job("j", "t", gpus=4, preemptible=False),  # refused by the quota: a change would not serve it either
    ],
)
def test_preempt_asks_about_a_reconfiguration_only_for_other_work_its_quota_did_not_refuse(
    monkeypatch: pytest.MonkeyPatch, the_job: Job
) -> None:
    run = _borrowed_world(the_job)
    monkeypatch.setattr(run.reconfigurations, "could_change_for", _refuse)
    admission = REFUSED if the_job.priority != Priority.PRODUCTION else None
    assert preempt(run, _turn(run, the_job, admission)) is True


def test_preempt_known_to_fail_is_not_searched_again(monkeypatch: pytest.MonkeyPatch) -> None:
    the_job = job("j", "t", gpus=4, preemptible=False)
    run = _borrowed_world(the_job)
    monkeypatch.setattr(run, "preempt_fails", lambda job, preemptible_only=False: True)
    monkeypatch.setattr(run.reconfigurations, "could_change_for", _refuse)
    monkeypatch.setattr(run, "preempt", _refuse)
    assert preempt(run, _turn(run, the_job)) is False


def test_preempt_skips_a_job_past_its_teams_search_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = job("j1", "t", gpus=4, preemptible=False), job("j2", "t", gpus=4, preemptible=False)
    run = _borrowed_world(first, second)
    run.policy = Policy(preemption_search_per_team=1)
    run.enter(first)
    run.enter(second)
    assert run.past_bound == {"j2"}
    monkeypatch.setattr(run, "preempt", _refuse)  # past the bound, the search is never started
    assert preempt(run, _turn(run, second)) is False


def test_enter_counts_only_non_production_work_against_the_bound() -> None:
    prod, other = _production("p", "t", gpus=4), job("j", "t", gpus=4, preemptible=False)
    run = _borrowed_world(prod, other)
    run.policy = Policy(preemption_search_per_team=1)
    run.enter(prod)
    run.enter(other)
    assert run.order == [prod, other] and not run.past_bound
    assert preempt(run, _turn(run, other)) is True


# -- reconfigure_by_drain ---------------------------------------------------------------------------------------


def _drain_world(prod: Job) -> Run:
    """Node m's one GPU in 1g.10gb instances, one held by team lab's low-priority job."""
    low = running(job("low", "lab", mig="1g.10gb", priority=Priority.LOW), ((Slot("m", 0, "1g.10gb", 0),),))
    teams = [team("svc", guaranteed=1), team("lab", guaranteed=1)]
    return _run([node("m", A100, 1, mig="all-1g.10gb")], [prod], teams=teams, running_jobs=[low])


def test_reconfigure_by_drain_drains_lower_work_and_re_cuts_the_gpu_for_production() -> None:
    prod = _production("p", "svc", mig="7g.80gb")
    run = _drain_world(prod)
    assert reconfigure_by_drain(run, _turn(run, prod)) is True
    assert run.reconfigurations.evictions == [Evict("low", EvictionReason.RECONFIGURE, "p")]
    assert [(c.node, c.new) for c in run.reconfigurations.changes] == [("m", (("7g.80gb", 0),))]
    assert run.blockers["p"].kind == BlockerKind.RECONFIGURING and not run.evictions


def test_reconfigure_by_drain_acts_only_for_production() -> None:
    other = job("o", "svc", mig="7g.80gb", kind=JobKind.INFERENCE, priority=Priority.HIGH)
    run = _drain_world(other)
    assert reconfigure_by_drain(run, _turn(run, other)) is False
    prod = _production("p", "svc", mig="7g.80gb")
    refused = _drain_world(prod)
    assert reconfigure_by_drain(refused, _turn(refused, prod, REFUSED)) is False
    assert not run.reconfigurations.evictions and not refused.reconfigurations.evictions


# -- hold -------------------------------------------------------------------------------------------------------


def _hold_world() -> tuple[Run, Job, Job]:
    """n1: GPU 0 in 1g.10gb instances, GPU 1 MIG off and idle; production p0 (a 1g.10gb) is bound there, so
    n1 is not changed this cycle, and p1 wants a 3g.40gb only a change of GPU 1 could offer."""
    p0 = _production("p0", "svc", mig="1g.10gb")
    p1 = _production("p1", "svc", mig="3g.40gb")
    nodes = [node("n1", A100, 2, mig=["all-1g.10gb", ""], sharing=True)]
    run = _run(nodes, [p0, p1], teams=[team("svc", guaranteed=2.0)])
    assert choose(run, _turn(run, p0)) is True
    return run, p0, p1


def test_hold_holds_a_node_bound_this_cycle_for_productions_change_next_cycle() -> None:
    run, _, p1 = _hold_world()
    assert hold(run, _turn(run, p1)) is True
    assert run.blockers["p1"] == Blocker(BlockerKind.HELD, "node n1", NOW + POLICY.cycle_s + POLICY.mig_reconfigure_s)
    assert "n1" in run.state.held


def test_hold_acts_only_for_production() -> None:
    run, _, p1 = _hold_world()
    other = job("o", "svc", mig="3g.40gb", kind=JobKind.INFERENCE, priority=Priority.HIGH)
    assert hold(run, _turn(run, other)) is False
    assert hold(run, _turn(run, p1, REFUSED)) is False
    assert not run.state.held and not run.blockers


# -- reserve ----------------------------------------------------------------------------------------------------


def test_reserve_reserves_the_gpus_that_free_first() -> None:
    big = job("big", "t", gpus=8, preemptible=False)
    run = _run([node("a", H100)], [big], teams=TEAMS_TU, running_jobs=_busy(300))
    assert reserve(run, _turn(run, big)) is True
    assert run.blockers["big"] == Blocker(BlockerKind.RESERVED, "a", NOW + 300)
    assert [r.job.id for r in run.reservations.made] == ["big"]


def test_reserve_tells_a_job_its_quota_would_still_refuse_then_to_wait_for_the_quota() -> None:
    # Quotas are per GPU class: the H100s free in 5 minutes, but the team's H100 guarantee is 0.
    over = job("over", "t", gpus=8, preemptible=False)
    teams = [team("t", H100=0.0, A100=8.0), team("u", guaranteed=64)]
    run = _run([node("a", H100)], [over], teams=teams, running_jobs=_busy(300))
    assert reserve(run, _turn(run, over)) is True
    assert run.blockers["over"].kind == BlockerKind.QUOTA and "class H100" in run.blockers["over"].detail
    assert not run.reservations.made


def test_reserve_leaves_a_job_it_finds_no_reservation_for_to_wait_for_capacity() -> None:
    big = job("big", "t", gpus=8, preemptible=False)
    shallow = Policy(reservation_depth=0)
    run = _run([node("a", H100)], [big], teams=TEAMS_TU, running_jobs=_busy(300), policy=shallow)
    assert reserve(run, _turn(run, big)) is False
    refused = _run([node("a", H100)], [big], teams=TEAMS_TU, running_jobs=_busy(300))
    assert reserve(refused, _turn(refused, big, REFUSED)) is False
    assert not run.blockers and not refused.blockers and not refused.reservations.made


# -- wait -------------------------------------------------------------------------------------------------------


def test_wait_ends_every_turn_with_the_quotas_refusal_or_capacity() -> None:
    the_job = job("j")
    run = _run([node("a")], [the_job])
    assert wait(run, _turn(run, the_job)) is True
    assert run.blockers["j"] == Blocker(BlockerKind.CAPACITY)
    assert wait(run, _turn(run, the_job, REFUSED)) is True
    assert run.blockers["j"] == Blocker(BlockerKind.QUOTA, "over the team's guarantee")


def test_wait_says_when_a_capacity_blocked_job_was_past_its_teams_search_bound() -> None:
    the_job = job("j")
    run = _run([node("a")], [the_job], policy=Policy(preemption_search_per_team=0))
    run.enter(the_job)
    assert wait(run, _turn(run, the_job)) is True
    assert run.blockers["j"] == Blocker(BlockerKind.CAPACITY, skipped_text(run.policy))
    assert wait(run, _turn(run, the_job, REFUSED)) is True  # the quota, not the bound, is what it waits for
    assert run.blockers["j"].kind == BlockerKind.QUOTA


# -- the orders -------------------------------------------------------------------------------------------------


def _names(steps: Sequence[Step]) -> list[str]:
    return [step.__name__ for step in steps]


PRODUCTION_ORDER = [
    "not_ready",
    "choose",
    "backfill",
    "idle_whole_gpu",
    "fallback",
    "preempt_preemptible",
    "preempt_whole_gpu",
    "oversize",
    "reconfigure_idle",
    "preempt",
    "reconfigure_by_drain",
    "hold",
    "reserve",
    "wait",
]
OTHER_ORDER = ["not_ready", "choose", "backfill", "idle_whole_gpu", "preempt", "reserve", "wait"]


def test_the_orders_are_the_documented_ones() -> None:
    assert _names(PRODUCTION_STEPS) == PRODUCTION_ORDER
    assert _names(OTHER_STEPS) == OTHER_ORDER


def _prose(text: str | None) -> str:
    return re.sub(r"\s+", " ", text or "")


def test_the_docs_state_the_orders_as_they_are() -> None:
    steps_doc = _prose(steps_module.__doc__)
    assert f":data:`PRODUCTION_STEPS` — {' → '.join(_names(PRODUCTION_STEPS))};" in steps_doc
    assert f":data:`OTHER_STEPS` — {' → '.join(_names(OTHER_STEPS))}." in steps_doc
    # The cycle's own step list shows both orders at once, production's own steps in parentheses.
    words: list[str] = []
    own: list[str] = []  # production's own steps since the last shared one
    for step in PRODUCTION_STEPS:
        if step not in OTHER_STEPS:
            own.append(step.__name__)
            continue
        if own:
            words.append(f"(production: {' → '.join(own)})")
            own = []
        words.append(step.__name__)
    assert not own  # both orders end with the same step
    assert " → ".join(words) + "." in _prose(cycle_module.__doc__)


def test_every_step_states_its_contract() -> None:
    for step in PRODUCTION_STEPS:
        doc = _prose(step.__doc__)
        assert "Returns True" in doc and "Changes:" in doc, step.__name__


@pytest.mark.parametrize(
    ("priority", "order"),
    [
        (Priority.PRODUCTION, PRODUCTION_STEPS),
        (Priority.HIGH, OTHER_STEPS),
        (Priority.NORMAL, OTHER_STEPS),
        (Priority.LOW, OTHER_STEPS),
    ],
)
def test_production_work_takes_productions_order_and_other_work_the_other(
    priority: Priority, order: tuple[Step, ...]
) -> None:
    assert steps_for(job("j", priority=priority)) is order


def test_a_turn_stops_at_the_first_step_that_ends_it() -> None:
    taken: list[str] = []

    def step(name: str, ends: bool) -> Step:
        def run_step(run: Run, turn: Turn) -> bool:
            taken.append(name)
            return ends

        return run_step

    run = _run([node("a")])
    take_turn(run, _turn(run, job("j")), [step("a", False), step("b", True), step("c", True)])
    assert taken == ["a", "b"]


def test_an_order_no_step_of_which_ends_the_turn_is_an_error() -> None:
    run = _run([node("a")])
    with pytest.raises(ValueError, match="an order must end with wait"):
        take_turn(run, _turn(run, job("j")), [lambda run, turn: False])
