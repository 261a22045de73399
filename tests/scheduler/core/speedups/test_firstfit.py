"""Where a one-replica job first fits as a preemption pool is removed (speedups/firstfit.py), the quota replay
of trial.py, and the search's fall-back when a node model's answer does not hold (preemption.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.core.decisions.preemption import NO_SHORTCUTS, FirstFit, Shortcuts, find_victims
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Node, Request, Running, Slot, Slots, Snapshot, Team
from scheduler.core.model.vocabulary import JobKind, Priority
from scheduler.core.placement import IndexedClusterState
from scheduler.core.rules.eviction import Candidate
from scheduler.core.rules.fairshare import FairShare
from scheduler.core.speedups.firstfit import NEVER, first_fit
from scheduler.core.speedups.quotafit import QuotaFit
from scheduler.core.speedups.trial import TrialPlacement

A100 = "A100-SXM4-80GB"
POLICY = Policy(min_runtime_s=0.0)
NOW = 10_000.0
BALANCED = (("1g.10gb", 0), ("1g.10gb", 1), ("2g.20gb", 2), ("3g.40gb", 4))


def whole(node: str, *gpus: int) -> Slots:
    return (tuple(Slot(node, g) for g in gpus),)


def gang(*replicas: Slots) -> Slots:
    return tuple(replica for slots in replicas for replica in slots)


def running(job_id: str, team: str, slots: Slots, priority: Priority = Priority.LOW) -> Running:
    job = Job(id=job_id, team=team, request=Request(gpus=len(slots[0])), replicas=len(slots), priority=priority)
    return Running(job=job, slots=slots, started_at=0.0)


def world(nodes: list[Node], jobs: list[Running], guarantee: float = 16.0) -> tuple[IndexedClusterState, FairShare]:
    # Production is bounded by the burst limit (it may run above the guarantee): the two are equal here.
    limit = (("any", guarantee),)
    teams = [Team("a", guaranteed=limit, burst=limit), Team("b", guaranteed=(("any", 0.0),))]
    state = IndexedClusterState(Snapshot(nodes=tuple(nodes), teams=tuple(teams), running=tuple(jobs)), NOW)
    return state, FairShare(teams, state, POLICY)


def fit(state: IndexedClusterState, job: Job, pool: list[tuple[str, Slots]], admitted: bool = True) -> FirstFit | None:
    assert state.index is not None
    state.index.flush()
    return first_fit(state, state.index, job, POLICY, pool, lambda holdings: admitted)


def pool_of(state: IndexedClusterState, *ids: str) -> list[tuple[str, Slots]]:
    return [(job_id, state.placed[job_id]) for job_id in ids]


def wants(gpus: int) -> Job:
    return Job(id="p", team="a", request=Request(gpus=gpus), priority=Priority.PRODUCTION)


def both_ways(state: IndexedClusterState, fairness: FairShare, pending: Job) -> list[tuple[list[str], Slots] | None]:
    """The victims and placement of one search with the node models and one without, the state left as found."""
    results: list[tuple[list[str], Slots] | None] = []
    for fast in (True, False):
        trial = TrialPlacement(state, state.index, fairness, pending, POLICY)  # type: ignore[arg-type]
        shortcuts = trial.shortcuts() if fast else replace(trial.shortcuts(), first_fit=None)
        statement = state.begin()
        found = find_victims(state, pending, fairness, trial, POLICY, NOW, (), shortcuts)
        statement.rollback()
        for team in ("a", "b"):
            fairness.changed(team)
        results.append(None if found is None else ([e.job for e in found[0]], found[1]))
    return results


# -- the node model -------------------------------------------------------------------------------------------


def test_the_first_node_that_fits_and_only_its_victims() -> None:
    nodes = [Node("n1", A100, 2), Node("n2", A100, 2)]
    jobs = [
        running("v1", "b", whole("n1", 0)),
        running("keep", "a", whole("n1", 1)),
        running("v2", "b", whole("n2", 0, 1)),
    ]
    state, _ = world(nodes, jobs)
    # n1 keeps one GPU busy whatever happens; n2 holds the job once v2 is gone (position 1): v1 is not named.
    assert fit(state, wants(2), pool_of(state, "v1", "v2")) == FirstFit(2, (1,))
    assert fit(state, wants(2), pool_of(state, "v1")) == NEVER
    assert fit(state, wants(2), pool_of(state, "v2"), admitted=False) is None  # its quota would refuse it


def test_a_victim_across_nodes_frees_each_node_it_holds() -> None:
    nodes = [Node("n1", A100, 2), Node("n2", A100, 2), Node("n3", A100, 2)]
    jobs = [running("g", "b", gang(whole("n1", 0), whole("n2", 0))), running("v", "b", whole("n3", 0, 1))]
    state, _ = world(nodes, jobs)
    # The gang frees one GPU on each of n1 and n2: two nodes fit at once, which a node model cannot choose.
    assert fit(state, wants(2), pool_of(state, "g")) is None
    assert fit(state, wants(2), pool_of(state, "v")) == FirstFit(1, (0,))
    # n3 fits after v, but the gang before it also holds a GPU... not on n3: it is not named.
    assert fit(state, wants(2), pool_of(state, "g", "v")) is None  # the gang already fit two nodes


def test_a_victim_on_the_chosen_node_that_holds_another_node_gives_no_answer() -> None:
    nodes = [Node("n1", A100, 2), Node("n2", A100, 2)]
    jobs = [running("g", "b", gang(whole("n1", 0), whole("n2", 0))), running("v", "b", whole("n1", 1))]
    state, _ = world(nodes, jobs)
    # n1 fits (2 GPUs) once both are gone; the gang among its victims also holds n2.
    assert fit(state, wants(2), pool_of(state, "g", "v")) is None


def test_a_node_the_model_sees_fitting_before_any_removal_gives_no_answer() -> None:
    nodes = [Node("n1", A100, 2)]
    state, _ = world(nodes, [running("v", "b", whole("n1", 0))])
    assert fit(state, wants(1), pool_of(state, "v")) is None  # GPU 1 is free already


def test_shares_and_instances() -> None:
    nodes = [Node("s1", A100, 1, sharing=True), Node("m1", A100, 1, mig=(BALANCED,))]
    share = Running(Job(id="sv", team="b", request=Request(gpu_milli=800)), ((Slot("s1", 0, milli=800),),), 0.0)
    mig_1g = Running(
        Job(id="mv", team="b", request=Request(mig_profile="1g.10gb"), kind=JobKind.INFERENCE),
        ((Slot("m1", 0, mig_profile="1g.10gb", mig_start=0),),),
        0.0,
    )
    mig_3g = Running(
        Job(id="big", team="b", request=Request(mig_profile="3g.40gb"), kind=JobKind.INFERENCE),
        ((Slot("m1", 0, mig_profile="3g.40gb", mig_start=4),),),
        0.0,
    )
    others = [("x1", 1), ("x2", 2)]
    held = [
        Running(
            Job(id=i, team="b", request=Request(mig_profile=p), kind=JobKind.INFERENCE),
            ((Slot("m1", 0, mig_profile=p, mig_start=s),),),
            0.0,
        )
        for (i, s), p in zip(others, ("1g.10gb", "2g.20gb"), strict=True)
    ]
    state, _ = world(nodes, [share, mig_1g, mig_3g, *held])
    half = Job(id="p", team="a", request=Request(gpu_milli=500))
    assert fit(state, half, pool_of(state, "sv")) == FirstFit(1, (0,))
    own = Job(id="p", team="a", request=Request(mig_profile="1g.10gb"), kind=JobKind.INFERENCE)
    assert fit(state, own, pool_of(state, "big", "mv")) == FirstFit(2, (0, 1))  # a 3g is not a 1g; both on m1
    sized = Job(id="p", team="a", request=Request(memory_gib=8.0), kind=JobKind.INFERENCE)
    # Sized from memory, a larger free instance on a GPU in use will do.
    assert fit(state, sized, pool_of(state, "big", "mv")) == FirstFit(1, (0,))


# -- the search with a node model ------------------------------------------------------------------------------


def test_a_first_fit_that_does_not_hold_falls_back_to_the_full_search() -> None:
    nodes = [Node("n1", A100, 2), Node("n2", A100, 2)]
    jobs = [running("v1", "b", whole("n1", 0, 1)), running("v2", "b", whole("n2", 0, 1))]
    state, fairness = world(nodes, jobs)
    pending = wants(2)
    trial = TrialPlacement(state, state.index, fairness, pending, POLICY)  # type: ignore[arg-type]
    answers = []
    # "Remove nothing and it fits" does not hold: the trial fails and the search runs the usual way.
    for shortcuts in (NO_SHORTCUTS, Shortcuts(first_fit=lambda _: FirstFit(1, ()))):
        statement = state.begin()
        found = find_victims(state, pending, fairness, trial, POLICY, NOW, (), shortcuts)
        statement.rollback()
        fairness.changed("b")
        assert found is not None
        answers.append(([e.job for e in found[0]], found[1]))
    assert answers[0] == answers[1] == (["v1"], whole("n1", 0, 1))


# -- the quota replay -----------------------------------------------------------------------------------------


def test_the_quota_replay_gives_up_where_a_usage_admits_some_placements_only() -> None:
    nodes = [Node("n1", A100, 1, mig=(BALANCED,))]
    state, fairness = world(nodes, [], guarantee=1.0)  # 7,000 units
    pending = Job(id="p", team="a", request=Request(mig_profile="1g.10gb"), kind=JobKind.INFERENCE)
    replay = QuotaFit(state, state.index, fairness, pending, POLICY)  # type: ignore[arg-type]
    holdings = {("A100", 1000), ("A100", 3000)}
    # Everything gone: 4,000 held, both fit under 7,000. Putting back the last victim (1,000) leaves 5,000:
    # a 1g (6,000) fits, a 3g (8,000) does not — the search could go either way.
    assert replay._pruned_alike(holdings, {"A100": 4000}, [(0, {"A100": 2000}), (3, {"A100": 1000})]) is None
    # With victims of 3,000 each: back to 7,000 admits neither, so each is kept.
    kept = replay._pruned_alike(holdings, {"A100": 1000}, [(0, {"A100": 3000}), (2, {"A100": 3000})])
    assert kept == FirstFit(3, (0, 2))


@pytest.mark.parametrize("priority", [Priority.HIGH, Priority.PRODUCTION])
def test_searches_with_and_without_the_node_model_agree(priority: Priority) -> None:
    nodes = [Node(f"n{i}", A100, 4) for i in range(4)]
    jobs = [running(f"b{i}-{g}", "b", whole(f"n{i}", g)) for i in range(4) for g in range(4 if i else 3)]
    jobs += [running("a-low", "a", whole("n0", 3))]
    state, fairness = world(nodes, jobs, guarantee=2.0)
    pending = replace(wants(2), priority=priority, preemptible=priority != Priority.PRODUCTION)
    with_model, without = both_ways(state, fairness, pending)
    assert with_model == without


# -- only the cheaper placements admitted ---------------------------------------------------------------------


A100_40 = "A100-SXM4-40GB"
TWENTIES = (("1g.20gb", 0), ("1g.20gb", 2), ("1g.20gb", 4), ("1g.20gb", 6))


def mig_running(job_id: str, team: str, node: str, profile: str, start: int, **kwargs: object) -> Running:
    job = Job(id=job_id, team=team, request=Request(mig_profile=profile), kind=JobKind.INFERENCE, **kwargs)  # type: ignore[arg-type]
    return Running(job=job, slots=((Slot(node, 0, mig_profile=profile, mig_start=start),),), started_at=0.0)


def cheaper_world() -> tuple[IndexedClusterState, FairShare, Job]:
    """12 GiB is a 1g.20gb (1,000 units) on the reserved 80 GB GPUs and a 3g.20gb (3,000) on the on-demand 40 GB
    one, which alone has a free instance. Team a holds 5,000 of its 7,000: only the 1g is admitted."""
    nodes = [
        Node("r1", A100, 1, tier="reserved", mig=(TWENTIES,)),
        Node("r2", A100, 1, tier="reserved", mig=(TWENTIES,)),
        Node("a1", A100, 1, tier="reserved", mig=((("4g.40gb", 0), ("1g.10gb", 4)),)),
        Node("o1", A100_40, 1, tier="on-demand", mig=((("3g.20gb", 0), ("3g.20gb", 4)),)),
    ]
    jobs = [
        mig_running(f"b{n}{s}", "b", n, "1g.20gb", s, priority=Priority.LOW) for n in ("r1", "r2") for s in (0, 2, 4, 6)
    ]
    jobs += [
        mig_running("a-big", "a", "a1", "4g.40gb", 0),
        mig_running("a-low", "a", "a1", "1g.10gb", 4, priority=Priority.LOW),
    ]
    jobs += [mig_running("o-held", "b", "o1", "3g.20gb", 0)]
    teams = [Team("a", guaranteed=(("any", 1.0),), burst=(("any", 1.0),)), Team("b", guaranteed=(("any", 0.0),))]
    state = IndexedClusterState(Snapshot(nodes=tuple(nodes), teams=tuple(teams), running=tuple(jobs)), NOW)
    pending = Job(
        id="p", team="a", request=Request(memory_gib=12.0), kind=JobKind.INFERENCE, priority=Priority.PRODUCTION
    )
    return state, FairShare(teams, state, POLICY), pending


def candidate(state: IndexedClusterState, job_id: str) -> Candidate:
    return Candidate(state.jobs[job_id], state.placed[job_id], "production", (0, 0, 0, 0.0, 0.0, job_id))


def test_where_only_the_cheaper_placement_is_admitted_the_node_model_answers() -> None:
    state, fairness, pending = cheaper_world()
    assert state.index is not None
    replay = QuotaFit(state, state.index, fairness, pending, POLICY)
    assert replay.first_fit([candidate(state, "o-held"), candidate(state, "br10")]) == FirstFit(2, (1,))
    assert replay.first_fit([]) == NEVER
    # The own victim first: with it gone the 3g is admitted too and the trial takes it (choose), the usage alone
    # deciding — a-low's node offers nothing the job could take.
    assert replay.first_fit([candidate(state, "a-low"), candidate(state, "br10")]) == FirstFit(1, (0,))
    assert replay.first_fit([candidate(state, "a-low")]) == FirstFit(1, (0,))
    # The whole search agrees with and without the node model.
    with_model, without = both_ways(state, fairness, pending)
    assert with_model is not None and with_model == without
    assert with_model[1][0][0].node in ("r1", "r2")  # the admitted 1g, not the refused 3g


def test_the_node_model_gives_no_answer_when_two_nodes_fit_at_once() -> None:
    state, fairness, pending = cheaper_world()
    assert state.index is not None
    both = Candidate(
        state.jobs["br10"], state.placed["br10"] + state.placed["br20"], "production", (0, 0, 0, 0.0, 0.0, "x")
    )
    assert QuotaFit(state, state.index, fairness, pending, POLICY).first_fit([both]) is None
