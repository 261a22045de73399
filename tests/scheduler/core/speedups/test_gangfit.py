"""Counting free GPUs for a whole-GPU gang's trial (scheduler/core/speedups/gangfit.py): a yes is always the trial's
answer, and anything the count cannot decide is left to the trial."""

from __future__ import annotations

import random
from collections.abc import Sequence

from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Node, Request, Running, Slot, Snapshot, Team
from scheduler.core.model.vocabulary import Fabric, Interconnect
from scheduler.core.placement import IndexedClusterState
from scheduler.core.rules.fairshare import FairShare
from scheduler.core.speedups.gangfit import gang_fits
from scheduler.core.speedups.trial import TrialPlacement

A100 = "A100-SXM4-80GB"
A100_PCIE = "A100-PCIE-80GB"
H100 = "H100-SXM5-80GB"
POLICY = Policy()
NOW = 1_000.0
TEAMS = (Team("a", guaranteed=(("any", 64.0),)), Team("b", guaranteed=(("any", 64.0),)))


def gang(gpus: int = 2, replicas: int = 2, **kwargs: object) -> Job:
    return Job(id="g", team="a", request=Request(gpus=gpus), replicas=replicas, **kwargs)  # type: ignore[arg-type]


def world(
    nodes: list[Node], running: Sequence[Running] = (), teams: tuple[Team, ...] = TEAMS
) -> tuple[IndexedClusterState, FairShare]:
    state = IndexedClusterState(Snapshot(nodes=tuple(nodes), teams=teams, running=tuple(running)), NOW)
    return state, FairShare(list(teams), state, POLICY)


def fits(state: IndexedClusterState, fairness: FairShare, job: Job) -> bool:
    assert state.index is not None
    state.index.flush()
    return gang_fits(state.index, fairness, job, POLICY)


def busy(job_id: str, node: str, *gpus: int, team: str = "b") -> Running:
    job = Job(id=job_id, team=team, request=Request(gpus=len(gpus)))
    return Running(job, (tuple(Slot(node, g) for g in gpus),), started_at=0.0)


def test_a_gang_the_free_gpus_hold_fits() -> None:
    state, fairness = world([Node("n1", A100, 8), Node("n2", A100, 8)], [busy("x", "n1", *range(7))])
    assert fits(state, fairness, gang(gpus=4, replicas=2))  # n2 alone holds it
    assert fits(state, fairness, gang(gpus=1, replicas=9))  # across both nodes
    assert not fits(state, fairness, gang(gpus=1, replicas=10))  # 9 free GPUs: the trial decides


def test_only_whole_gpu_gangs_without_host_needs_are_counted() -> None:
    state, fairness = world([Node("n1", A100, 8)])
    assert not fits(state, fairness, gang(replicas=1))  # one replica: trial.py's other rules
    assert not fits(state, fairness, gang(cpu_milli=100))
    assert not fits(state, fairness, gang(memory_mib=100))
    mig = Job(id="g", team="a", request=Request(mig_profile="1g.10gb"), kind="inference", replicas=2)
    assert not fits(state, fairness, mig)  # MIG replicas are placed one by one
    assert not fits(state, fairness, gang(gpu_model="H100"))  # no option at all


def test_options_of_several_classes_or_sizes_are_left_to_the_trial() -> None:
    state, fairness = world([Node("a1", A100, 8), Node("h1", H100, 8)])
    assert not fits(state, fairness, gang())  # A100 or H100 units: admission depends on where it lands
    assert fits(state, fairness, gang(gpu_model="A100"))


def test_a_quota_that_refuses_the_units_is_left_to_the_trial() -> None:
    teams = (Team("a", guaranteed=(("any", 2.0),), burst=(("any", 2.0),)), Team("b"))
    state, fairness = world([Node("n1", A100, 8)], teams=teams)
    assert not fits(state, fairness, gang(gpus=2, replicas=2))  # 4 GPUs above a burst of 2


def test_fabrics_the_rule_has_a_say_on_are_left_to_the_trial() -> None:
    mixed = [Node("n1", A100, 8, fabric=Fabric.EFA), Node("n2", A100, 8)]
    state, fairness = world(mixed)
    assert not fits(state, fairness, gang(gpus=8, replicas=2))
    barred = [Node("n1", A100, 8, fabric=Fabric.TCPX), Node("n2", A100, 8, fabric=Fabric.TCPX)]
    state, fairness = world(barred)
    assert not fits(state, fairness, gang(gpus=4, replicas=2))
    assert fits(state, fairness, gang(gpus=8, replicas=2))  # whole nodes: the rule has no say


def test_a_class_pool_counts_when_no_single_model_holds_the_gang() -> None:
    nodes = [Node("s1", A100, 8), Node("p1", A100_PCIE, 8, interconnect=Interconnect.NVLINK_PAIRS)]
    running = [busy("x", "s1", *range(4)), busy("y", "p1", *range(4))]
    state, fairness = world(nodes, running)
    job = gang(gpus=2, replicas=4, gpu_model="A100")
    assert fits(state, fairness, job)  # 2 + 2 replicas, across the models
    assert state.index is not None
    assert TrialPlacement(state, state.index, fairness, job, POLICY)() is not None


def test_a_yes_is_always_the_trials_answer() -> None:
    rng = random.Random(7)
    nodes = [Node(f"n{i}", A100, 8, leaf=f"l{i % 3}", spine=f"s{i % 2}") for i in range(6)]
    for _ in range(150):
        running = []
        for i in range(6):
            taken = rng.sample(range(8), rng.randint(0, 8))
            if taken:
                running.append(busy(f"x{i}", f"n{i}", *sorted(taken), team=rng.choice("ab")))
        state, fairness = world(nodes, running)
        job = gang(gpus=rng.choice((1, 2, 4, 8)), replicas=rng.randint(2, 6))
        assert state.index is not None
        trial = TrialPlacement(state, state.index, fairness, job, POLICY)
        if fits(state, fairness, job):
            assert trial() is not None
