"""The trial placement of a preemption on GPUs with MIG off and its exact shortcuts
(scheduler/core/speedups/wholetrial.py)."""

from __future__ import annotations

from dataclasses import replace

from scheduler.core.decisions.preemption import NO_SHORTCUTS
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Running, Slot, Slots, Team
from scheduler.core.model.vocabulary import JobKind, Priority
from scheduler.core.placement import IndexedClusterState
from scheduler.core.rules.fairshare import FairShare
from scheduler.core.speedups.memo import Memo
from scheduler.core.speedups.wholetrial import WholeGpuTrial
from tests.scheduler.properties.builders import A100, NOW, job, node, running, snapshot, team

POLICY = Policy()
PROD = job("p", "svc", mig="7g.80gb", kind=JobKind.INFERENCE, priority=Priority.PRODUCTION, preemptible=False)
SMALL = ((Slot("m", 0, "1g.10gb", 0),),)  # a 1g.10gb instance on node m
WHOLE = ((Slot("w", 0),),)  # node w's one GPU, MIG off


def _world(
    running_jobs: list[Running], svc: Team | None = None, the_job: Job = PROD
) -> tuple[IndexedClusterState, FairShare, WholeGpuTrial]:
    """Node m: one GPU in 1g.10gb instances; node w: one GPU with MIG off."""
    nodes = [node("m", A100, 1, mig="all-1g.10gb"), node("w", A100, 1)]
    teams = [svc or team("svc", guaranteed=1), team("lab", guaranteed=8)]
    state = IndexedClusterState(snapshot(nodes, (), teams, running_jobs), NOW)
    fairness = FairShare(teams, state, POLICY)
    return state, fairness, WholeGpuTrial(state, fairness, the_job, POLICY)


def _low(job_id: str, team_name: str, slots: Slots) -> Running:
    mig = slots[0][0].mig_profile
    request = {"mig": mig, "kind": JobKind.INFERENCE} if mig else {"gpus": 1}
    return running(job(job_id, team_name, priority=Priority.LOW, **request), slots)  # type: ignore[arg-type]


def test_the_trial_takes_an_idle_mig_off_gpu_the_quota_admits_and_nothing_else() -> None:
    state, _, trial = _world([])
    assert trial() == WHOLE  # never the MIG GPU's instances, which hold no 7g.80gb
    _, _, over = _world([], svc=team("svc", guaranteed=0.5, burst=0.9))
    assert over() is None  # found, but over the burst limit
    state, _, busy = _world([_low("train", "lab", WHOLE)])
    assert busy() is None
    statement = state.begin()
    state.remove("train")
    assert busy() == WHOLE
    statement.rollback()


def test_the_shortcuts_are_offered_with_the_speedups_on_for_a_job_without_host_needs() -> None:
    _, _, trial = _world([])
    shortcuts = trial.shortcuts()
    assert shortcuts.keeps == trial.keeps and shortcuts.fails_for_less == trial.fails_for_less
    assert shortcuts.first_fit is None
    with Memo(enabled=False).current():
        assert trial.shortcuts() is NO_SHORTCUTS
    _, _, hosted = _world([], the_job=replace(PROD, cpu_milli=1000))
    assert hosted.shortcuts() is NO_SHORTCUTS


def test_keeps_a_placement_when_another_teams_victim_goes_back_on_mig_instances_only() -> None:
    state, _, trial = _world([_low("small", "lab", SMALL), _low("mine", "svc", SMALL)])
    statement = state.begin()
    state.remove("small")
    assert trial() == WHOLE
    state.place(state.jobs["small"], SMALL)
    assert trial.keeps(state.jobs["small"], SMALL, WHOLE) is True
    assert trial() == WHOLE  # the promise holds
    assert trial.keeps(state.jobs["mine"], SMALL, WHOLE) is False  # its own team: the quota may move
    train = state.jobs["small"]
    assert trial.keeps(train, WHOLE, WHOLE) is False  # a victim on a MIG-off GPU
    statement.rollback()


def test_fails_for_less_only_when_no_idle_mig_off_gpu_was_found() -> None:
    _, _, busy = _world([_low("train", "lab", WHOLE)])
    assert busy() is None and busy.fails_for_less() is True
    _, _, over = _world([], svc=team("svc", guaranteed=0.5, burst=0.9))
    assert over() is None and over.fails_for_less() is False  # the quota refused: evicting its team may help
