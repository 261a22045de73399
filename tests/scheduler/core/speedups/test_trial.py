"""The cycle's trial placement and its exact shortcuts (scheduler/core/speedups/trial.py, speedups/unseen.py)."""

from __future__ import annotations

from dataclasses import replace

from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Node, Request, Running, Slot, Snapshot, Team
from scheduler.core.model.vocabulary import Priority
from scheduler.core.placement import IndexedClusterState
from scheduler.core.placement.holdings import possible_units
from scheduler.core.rules.fairshare import FairShare
from scheduler.core.speedups.trial import TrialPlacement
from scheduler.core.speedups.unseen import unseen_by

A100 = "A100-SXM4-80GB"
H100 = "H100-SXM5-80GB"
POLICY = Policy()
NOW = 1_000.0
BALANCED = (("1g.10gb", 0), ("1g.10gb", 1), ("2g.20gb", 2), ("3g.40gb", 4))


def gpus_job(job_id: str, team: str, gpus: int = 1, **kwargs: object) -> Job:
    return Job(id=job_id, team=team, request=Request(gpus=gpus), **kwargs)  # type: ignore[arg-type]


def mig_job(job_id: str, team: str, profile: str, **kwargs: object) -> Job:
    return Job(id=job_id, team=team, request=Request(mig_profile=profile), kind="inference", **kwargs)  # type: ignore[arg-type]


def whole(node: str, *gpus: int) -> tuple[tuple[Slot, ...], ...]:
    return (tuple(Slot(node, g) for g in gpus),)


def instance(node: str, gpu: int, profile: str, start: int) -> tuple[tuple[Slot, ...], ...]:
    return ((Slot(node, gpu, mig_profile=profile, mig_start=start),),)


def world(
    nodes: list[Node], running: list[Running], teams: list[Team] | None = None
) -> tuple[IndexedClusterState, FairShare]:
    teams = teams or [Team("a", guaranteed=(("any", 8.0),)), Team("b", guaranteed=(("any", 8.0),))]
    state = IndexedClusterState(Snapshot(nodes=tuple(nodes), teams=tuple(teams), running=tuple(running)), NOW)
    return state, FairShare(teams, state, POLICY)


def trial_for(state: IndexedClusterState, fairness: FairShare, job: Job) -> TrialPlacement:
    assert state.index is not None
    return TrialPlacement(state, state.index, fairness, job, POLICY)


# -- unseen ---------------------------------------------------------------------------------------------------


def test_unseen_reads_only_the_grain_and_the_groups_the_job_may_use() -> None:
    nodes = [
        Node("m1", A100, 2, mig=(BALANCED, BALANCED)),
        Node("w1", A100, 2),
        Node("h1", H100, 2),
        Node("s1", A100, 2, sharing=True),
        Node("down", A100, 2, schedulable=False),
    ]
    state, _ = world(nodes, [])
    assert state.index is not None
    gone_1g = state.gpus[("m1", 0)]
    gone_1g.instances.update({0: "x", 1: "x"})  # GPU 0 has no free 1g instance left; GPU 1 has both
    whole_a100 = unseen_by(state, state.index, gpus_job("p", "a", gpu_model="A100"), POLICY)
    assert not whole_a100("v", whole("w1", 0))  # a whole GPU it could take
    assert not whole_a100("v", ((Slot("s1", 0, milli=500),),))  # a share frees a whole GPU too
    assert whole_a100("v", whole("h1", 0))  # another class: not one of its groups
    assert whole_a100("v", whole("down", 0))  # not ready
    assert whole_a100("v", instance("m1", 1, "1g.10gb", 0))  # a MIG slot frees no whole GPU

    mig_1g = unseen_by(state, state.index, mig_job("p", "a", "1g.10gb"), POLICY)
    assert mig_1g("v", whole("w1", 0))
    assert mig_1g("v", instance("m1", 0, "3g.40gb", 4))  # GPU 0 has no free 1g: its 1g list is unchanged
    assert not mig_1g("v", instance("m1", 1, "3g.40gb", 4))  # GPU 1 has free 1g instances: its signature moves
    assert not mig_1g("x", instance("m1", 0, "1g.10gb", 0))  # the holder's own 1g instance counts as free

    share = unseen_by(state, state.index, Job(id="p", team="a", request=Request(gpu_milli=300)), POLICY)
    assert not share("v", ((Slot("s1", 1, milli=300),),))
    assert share("v", whole("w1", 1))  # a node that does not time-slice has no shares to read

    memory = Job(id="p", team="a", request=Request(memory_gib=8.0), kind="inference")
    assert not unseen_by(state, state.index, memory, POLICY)("v", instance("m1", 0, "3g.40gb", 4))  # larger ones too


def test_unseen_counts_host_resources_on_nodes_that_state_them() -> None:
    nodes = [Node("c1", A100, 2, mig=(BALANCED, ()), cpu_milli=8_000), Node("c2", A100, 2, memory_mib=1 << 20)]
    state, _ = world(nodes, [])
    assert state.index is not None
    needs_cpu = mig_job("p", "a", "2g.20gb", cpu_milli=1_000)
    needs_memory = replace(needs_cpu, cpu_milli=0, memory_mib=1_024)
    assert not unseen_by(state, state.index, needs_cpu, POLICY)("v", whole("c1", 1))
    assert unseen_by(state, state.index, needs_cpu, POLICY)("v", whole("c2", 1))  # c2 states no CPU
    assert not unseen_by(state, state.index, needs_memory, POLICY)("v", whole("c2", 1))


# -- keeps and fails_for_less ----------------------------------------------------------------------------------


def test_keeps_promises_only_what_a_trial_confirms() -> None:
    # Team a holds GPUs 0-5 of n1, b holds n2 0-3; the pending job of a wants one whole GPU.
    running = [Running(gpus_job(f"a{i}", "a"), whole("n1", i), started_at=0.0) for i in range(6)]
    running += [Running(gpus_job(f"b{i}", "b"), whole("n2", i), started_at=0.0) for i in range(4)]
    state, fairness = world([Node("n1", A100, 8), Node("n2", A100, 8), Node("h1", H100, 8)], running)
    pending = gpus_job("p", "a", gpu_model="A100")
    trial = trial_for(state, fairness, pending)
    slots = trial()
    assert slots == whole("n1", 6)
    b0 = state.running["b0"].job
    # Another team's victim on a node the job reads, away from the slots: the slots stay free and every
    # holding (one A100 GPU) is admitted.
    state.remove("b0")
    state.place(b0, whole("n2", 0))
    assert trial.keeps(b0, whole("n2", 0), slots) and trial() is not None
    # Another class entirely: unseen.
    h = gpus_job("h", "b")
    state.place(h, whole("h1", 0))
    assert trial.keeps(h, whole("h1", 0), slots)
    # A victim put back on the very slots the job had: not kept by the free-slots rule.
    squatter = gpus_job("sq", "b")
    state.place(squatter, slots)
    assert not trial.keeps(squatter, slots, slots)
    state.remove("sq")
    # The job's own team over its guarantee: admission would refuse, so no promise.
    extra = [gpus_job(f"ax{i}", "a") for i in range(2)]
    for i, job in enumerate(extra):
        state.place(job, whole("n2", 6 + i))
    assert not trial.keeps(extra[-1], whole("n2", 7), slots)
    assert trial() is None and trial.fails_for_less()  # every holding refused: no fewer evictions help


def test_fails_for_less_knows_when_nothing_fits() -> None:
    running = [Running(gpus_job("b0", "b", gpus=8), whole("n1", *range(8)), started_at=0.0)]
    state, fairness = world([Node("n1", A100, 8)], running)
    trial = trial_for(state, fairness, gpus_job("p", "a"))
    assert trial() is None and trial.fails_for_less()


def test_gangs_and_host_needs_get_no_simple_shortcuts() -> None:
    state, fairness = world([Node("n1", A100, 8)], [])
    gang = trial_for(state, fairness, gpus_job("g", "a", gpus=2, replicas=2))
    assert gang.shortcuts().fails_for_less is None
    slots = gang()
    assert slots is not None
    mine = gpus_job("a-mine", "a")
    state.place(mine, whole("n1", 7))
    assert gang.keeps(mine, whole("n1", 7), slots) and gang() is not None  # counted: 7 free GPUs hold it (gangfit)
    more = gpus_job("a-more", "a", gpus=5)
    state.place(more, whole("n1", 2, 3, 4, 5, 6))
    assert not gang.keeps(more, whole("n1", 2, 3, 4, 5, 6), slots)  # own team, seen, and too few GPUs: no promise
    assert gang() is None
    host = trial_for(state, fairness, gpus_job("c", "a", cpu_milli=100))
    assert host.shortcuts().fails_for_less is None


def test_possible_units_cover_every_grain_and_larger_instances() -> None:
    nodes = [Node("m1", A100, 1, mig=(BALANCED,)), Node("s1", H100, 1, sharing=True)]
    state, _ = world(nodes, [])
    assert state.index is not None
    assert possible_units(state.index, mig_job("p", "a", "2g.20gb"), POLICY) == (("A100", 2000), ("H100", 2000))
    memory = Job(id="p", team="a", request=Request(memory_gib=8.0), kind="inference", gpu_model="A100")
    units = possible_units(state.index, memory, POLICY)
    assert ("A100", 1000) in units and ("A100", 7000) in units  # every profile of the model
    shares = possible_units(state.index, Job(id="p", team="a", request=Request(gpu_milli=250)), POLICY)
    assert shares == (("A100", 1750), ("H100", 1750))
    assert possible_units(state.index, gpus_job("p", "a", gpus=2, priority=Priority.HIGH), POLICY) == (
        ("A100", 14000),
        ("H100", 14000),
    )
