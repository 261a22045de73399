"""Reclaim and preemption (docs/scheduling-rules.md, 5): who may evict whom, and the minimal victim set.

The builders and the whole-GPU first-fit placer at the top are shared with test_fairshare.py and the
fair-share properties.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import pytest

from scheduler.core.decisions.preemption import candidates, find_victims
from scheduler.core.model.cluster_state import ClusterState, model_matches
from scheduler.core.model.plan import Evict
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Node, Preemption, Request, Running, Slot, Slots, Snapshot, Team
from scheduler.core.model.vocabulary import Priority
from scheduler.core.rules.fairshare import FairShare
from scheduler.core.rules.limits import placement_units

A100 = "A100-SXM4-80GB"
H100 = "H100-SXM5-80GB"
POLICY = Policy(min_runtime_s=300.0, ping_pong_window_s=1800.0)
NOW = 10_000.0


# -- builders -----------------------------------------------------------------------------------------------


def node(name: str, model: str = A100, gpus: int = 8, **kwargs: object) -> Node:
    return Node(name=name, gpu_model=model, gpu_count=gpus, **kwargs)  # type: ignore[arg-type]


def job(job_id: str, team: str, gpus: int = 1, priority: Priority = Priority.NORMAL, **kwargs: object) -> Job:
    return Job(id=job_id, team=team, request=Request(gpus=gpus), priority=priority, **kwargs)  # type: ignore[arg-type]


def team(
    name: str, guaranteed: dict[str, float] | None = None, burst: dict[str, float] | None = None, weight: float = 1.0
) -> Team:
    return Team(
        name=name,
        weight=weight,
        guaranteed=tuple(sorted((guaranteed or {}).items())),
        burst=tuple(sorted((burst or {}).items())),
    )


def on(node_name: str, *gpus: int) -> Slots:
    """One replica holding whole GPUs ``gpus`` of ``node_name``."""
    return (tuple(Slot(node=node_name, gpu=g) for g in gpus),)


def run(the_job: Job, slots: Slots, started_at: float = 0.0, checkpoint_at: float | None = None) -> Running:
    return Running(job=the_job, slots=slots, started_at=started_at, last_checkpoint_at=checkpoint_at)


def world(
    nodes: Sequence[Node], teams: Sequence[Team], running: Sequence[Running] = (), policy: Policy = POLICY
) -> tuple[ClusterState, FairShare]:
    state = ClusterState(Snapshot(nodes=tuple(nodes), teams=tuple(teams), running=tuple(running)))
    return state, FairShare(teams, state, policy)


def first_fit(state: ClusterState, pending: Job) -> Callable[[], Slots | None]:
    """A monotone whole-GPU placer: each replica on the first node with enough free GPUs (lowest indexes)."""

    def try_place() -> Slots | None:
        taken: set[tuple[str, int]] = set()
        replicas: list[tuple[Slot, ...]] = []
        for _ in range(pending.replicas):
            for spec in state.nodes.values():
                if not spec.schedulable or not model_matches(spec.gpu_model, pending.gpu_model):
                    continue
                free = [
                    gpu.index
                    for gpu in state.node_gpus(spec.name)
                    if gpu.idle and not gpu.mig_on and gpu.key not in taken
                ]
                if len(free) >= (pending.request.gpus or 0):
                    chosen = free[: pending.request.gpus]
                    taken.update((spec.name, g) for g in chosen)
                    replicas.append(tuple(Slot(node=spec.name, gpu=g) for g in chosen))
                    break
            else:
                return None
        return tuple(replicas)

    return try_place


def admitted(state: ClusterState, fairness: FairShare, pending: Job) -> Callable[[], Slots | None]:
    """first_fit composed with admission, as the cycle composes find_slots with FairShare.admit."""
    place = first_fit(state, pending)

    def try_place() -> Slots | None:
        slots = place()
        if slots is None or not fairness.admit(pending, placement_units(state, slots)).ok:
            return None
        return slots

    return try_place


def victims_for(
    state: ClusterState,
    fairness: FairShare,
    pending: Job,
    preemptions: Sequence[Preemption] = (),
    now: float = NOW,
    policy: Policy = POLICY,
) -> tuple[list[Evict], Slots] | None:
    return find_victims(state, pending, fairness, admitted(state, fairness, pending), policy, now, preemptions)


def evicted(result: tuple[list[Evict], Slots] | None) -> list[tuple[str, str]] | None:
    return None if result is None else [(e.job, e.reason) for e in result[0]]


def ones(team_name: str, node_name: str, count: int, first: int = 0, **kwargs: object) -> list[Running]:
    """``count`` one-GPU preemptible jobs of ``team_name`` on GPUs first.. of ``node_name``, started at 0."""
    return [
        run(job(f"{team_name}{i}", team_name, preemptible=True, **kwargs), on(node_name, first + i))
        for i in range(count)
    ]


# -- scenarios ----------------------------------------------------------------------------------------------

TWO_TEAMS = [team("a", {"any": 4}), team("b", {"any": 4})]


def _reclaim() -> tuple[ClusterState, FairShare, Job]:
    # b runs 8 one-GPU preemptible jobs on an 8-GPU node: 4 fill its guarantee, 4 are borrowed.
    state, fs = world([node("n1")], TWO_TEAMS, ones("b", "n1", 8))
    return state, fs, job("a-job", "a", gpus=4)


def test_reclaim_takes_back_borrowed_gpus_within_one_call() -> None:
    state, fs, pending = _reclaim()
    assert fs.borrowed_jobs("b") == ["b4", "b5", "b6", "b7"]
    result = victims_for(state, fs, pending)
    # Equal loss and start: ties fall to the job id.
    assert evicted(result) == [("b4", "reclaim"), ("b5", "reclaim"), ("b6", "reclaim"), ("b7", "reclaim")]
    assert result is not None and result[1] == on("n1", 4, 5, 6, 7)
    assert all(e.by == "a-job" for e in result[0])
    assert sorted(state.placed) == ["b0", "b1", "b2", "b3"]  # the victims are gone, the job is not placed


@pytest.mark.parametrize(
    ("teams", "pending", "expected"),
    [
        # No reclaim beyond a guarantee: a wants 5 GPUs but is guaranteed 4.
        (TWO_TEAMS, job("a-job", "a", gpus=5, preemptible=True), None),
        # A team with no guarantee cannot reclaim anything.
        ([team("a"), team("b", {"any": 4})], job("a-job", "a", gpus=1, preemptible=True), None),
        # The victim team is never pushed below its guarantee: b is guaranteed all 8.
        ([team("a", {"any": 4}), team("b", {"any": 8})], job("a-job", "a", gpus=4), None),
        # Reclaim for a class the team is guaranteed: H100 work cannot reclaim A100 GPUs.
        (
            [team("a", {"any": 4}), team("b", {"any": 4})],
            job("a-job", "a", gpus=1, gpu_model="H100"),
            None,
        ),
    ],
)
def test_no_reclaim_when_a_rule_forbids_it(teams: list[Team], pending: Job, expected: object) -> None:
    state, fs = world([node("n1")], teams, ones("b", "n1", 8))
    before = dict(state.placed)
    assert victims_for(state, fs, pending) == expected
    assert state.placed == before


def test_non_preemptible_work_is_never_reclaimed() -> None:
    running = [run(job(f"b{i}", "b"), on("n1", i)) for i in range(8)]  # over guarantee after a quota cut
    state, fs = world([node("n1")], TWO_TEAMS, running)
    assert fs.borrowed_jobs("b") == ["b4", "b5", "b6", "b7"]
    assert victims_for(state, fs, job("a-job", "a", gpus=1)) is None


def test_reclaim_without_fairness_is_off() -> None:
    policy = Policy(fairness=False)
    state, fs = world([node("n1")], TWO_TEAMS, ones("b", "n1", 8), policy=policy)
    assert victims_for(state, fs, job("a-job", "a", gpus=1), policy=policy) is None


@pytest.mark.parametrize(
    ("pending_priority", "victim_priority", "preemptible", "expected"),
    [
        (Priority.HIGH, Priority.NORMAL, True, [("a0", "priority")]),
        (Priority.NORMAL, Priority.LOW, True, [("a0", "priority")]),
        (Priority.NORMAL, Priority.NORMAL, True, None),  # equal priority never preempts
        (Priority.LOW, Priority.NORMAL, True, None),
        (Priority.HIGH, Priority.LOW, False, None),  # non-preemptible work is safe from its own team
    ],
)
def test_priority_preemption_within_a_team(
    pending_priority: Priority, victim_priority: Priority, preemptible: bool, expected: object
) -> None:
    running = [run(job("a0", "a", gpus=8, priority=victim_priority, preemptible=preemptible), on("n1", *range(8)))]
    state, fs = world([node("n1")], [team("a", {"any": 8})], running)
    assert evicted(victims_for(state, fs, job("a-hi", "a", gpus=8, priority=pending_priority))) == expected


def test_priority_preemption_never_crosses_teams() -> None:
    # b is within its guarantee, a is over its own: a's high-priority job may not touch b's low work.
    running = [run(job("b0", "b", gpus=8, priority=Priority.LOW, preemptible=True), on("n1", *range(8)))]
    state, fs = world([node("n1")], [team("a"), team("b", {"any": 8})], running)
    assert victims_for(state, fs, job("a-hi", "a", gpus=1, priority=Priority.HIGH, preemptible=True)) is None


def test_a_teams_preemptible_work_yields_to_its_non_preemptible_work() -> None:
    # a fills a 4-GPU node with low preemptible work; its non-preemptible high job, within the guarantee
    # (only non-preemptible work counts against it), takes the node's GPUs by priority.
    running = [run(job("a-low", "a", gpus=4, priority=Priority.LOW, preemptible=True), on("n1", 0, 1, 2, 3))]
    state, fs = world([node("n1", gpus=4)], [team("a", {"any": 4})], running)
    result = victims_for(state, fs, job("a-hi", "a", gpus=4, priority=Priority.HIGH))
    assert evicted(result) == [("a-low", "priority")]


@pytest.mark.parametrize(
    ("running", "expected"),
    [
        # Preemptible work goes before non-preemptible work, even of lower priority.
        (
            [
                run(job("b-np", "b", gpus=4, priority=Priority.LOW), on("n1", 0, 1, 2, 3)),
                run(job("b-p", "b", gpus=4, priority=Priority.HIGH, preemptible=True), on("n1", 4, 5, 6, 7)),
            ],
            [("b-p", "production")],
        ),
        # Non-preemptible lower work goes when nothing else frees enough room.
        (
            [run(job("b-np", "b", gpus=8, priority=Priority.HIGH), on("n1", *range(8)))],
            [("b-np", "production")],
        ),
        # Production is never preempted, not even by production.
        (
            [run(job("b-prod", "b", gpus=8, priority=Priority.PRODUCTION), on("n1", *range(8)))],
            None,
        ),
        # Production ignores the minimum runtime.
        (
            [run(job("b-new", "b", gpus=8, preemptible=True), on("n1", *range(8)), started_at=NOW - 1)],
            [("b-new", "production")],
        ),
    ],
)
def test_production_preempts_lower_work_anywhere(running: list[Running], expected: object) -> None:
    teams = [team("a", {"any": 8}), team("b", {"any": 8})]
    state, fs = world([node("n1")], teams, running)
    pending = job("a-prod", "a", gpus=4, priority=Priority.PRODUCTION, kind="inference")
    assert evicted(victims_for(state, fs, pending)) == expected


def test_production_over_its_guarantee_takes_borrowed_work_as_production() -> None:
    # a is under its guarantee (1 < 2), but the 4-GPU production job takes it above: not a reclaim.
    running = [run(job("a0", "a", preemptible=False), on("n1", 0)), *ones("b", "n1", 7, first=1)]
    state, fs = world([node("n1")], [team("a", {"any": 2}, {"any": 8}), team("b", {"any": 2})], running)
    pending = job("a-prod", "a", gpus=4, priority=Priority.PRODUCTION, preemptible=True)
    assert fs.borrowed_jobs("b") == ["b2", "b3", "b4", "b5", "b6"]
    result = victims_for(state, fs, pending)
    assert evicted(result) == [("b2", "production"), ("b3", "production"), ("b4", "production"), ("b5", "production")]


def test_production_keeps_priority_victims_of_its_own_team_as_priority() -> None:
    running = [
        run(job("a-low", "a", priority=Priority.LOW, preemptible=True), on("n1", 0)),
        *ones("b", "n1", 3, first=1),
    ]
    state, fs = world([node("n1", gpus=4)], [team("a", {"any": 2}), team("b")], running)
    pending = job("a-prod", "a", gpus=4, priority=Priority.PRODUCTION, preemptible=True)
    assert evicted(victims_for(state, fs, pending)) == [
        ("b0", "production"),
        ("b1", "production"),
        ("b2", "production"),
        ("a-low", "priority"),
    ]


def test_a_reclaim_that_would_overshoot_the_guarantee_falls_back_to_priority() -> None:
    # a (guaranteed 4) holds 2 low GPUs; its 4-GPU high job: evicting b's borrowed work would put a at 6.
    running = [
        run(job("a-low", "a", gpus=2, priority=Priority.LOW, preemptible=True), on("n1", 0, 1)),
        *ones("b", "n1", 4, first=2),
    ]
    state, fs = world([node("n1")], [team("a", {"any": 4}), team("b", {"any": 2})], running)
    pending = job("a-hi", "a", gpus=4, priority=Priority.HIGH, preemptible=True)
    assert fs.under_guarantee("a")
    assert evicted(victims_for(state, fs, pending)) == [("a-low", "priority")]


@pytest.mark.parametrize(
    ("running", "expected"),
    [
        # Least work lost since the last checkpoint goes first.
        (
            [
                run(job("b0", "b", preemptible=True), on("n1", 0), started_at=0, checkpoint_at=NOW - 60),
                run(job("b1", "b", preemptible=True), on("n1", 1), started_at=0, checkpoint_at=NOW - 3600),
                run(job("b2", "b", preemptible=True), on("n1", 2), started_at=0),
            ],
            ["b0"],
        ),
        # Work lost counts GPU-equivalents: 2 GPUs × 10 min lose more than 1 GPU × 15 min.
        (
            [
                run(job("b0", "b", gpus=2, preemptible=True), on("n1", 0, 1), started_at=NOW - 600),
                run(job("b1", "b", preemptible=True), on("n1", 2), started_at=NOW - 900),
            ],
            ["b1"],
        ),
        # Equal loss: the most recently started goes first.
        (
            [
                run(job("b0", "b", preemptible=True), on("n1", 0), started_at=100, checkpoint_at=NOW - 60),
                run(job("b1", "b", preemptible=True), on("n1", 1), started_at=200, checkpoint_at=NOW - 60),
            ],
            ["b1"],
        ),
        # Lower priority first, whatever the loss.
        (
            [
                run(job("b0", "b", priority=Priority.HIGH, preemptible=True), on("n1", 0), started_at=NOW - 600),
                run(job("b1", "b", priority=Priority.LOW, preemptible=True), on("n1", 1), started_at=0),
            ],
            ["b1"],
        ),
    ],
)
def test_victim_choice_order(running: list[Running], expected: list[str]) -> None:
    # Node n1 is full of b's work (b has no guarantee: all of it is borrowed); a needs one GPU.
    busy = sum(len(r.slots[0]) for r in running)
    state, fs = world([node("n1", gpus=busy)], [team("a", {"any": 1}), team("b")], running)
    result = victims_for(state, fs, job("a-job", "a"))
    assert result is not None and [e.job for e in result[0]] == expected


def test_borrowed_work_goes_before_guaranteed_work_of_the_same_team() -> None:
    # a holds 2 low jobs, one within its guarantee, one borrowed; its high job needs one GPU.
    running = [
        run(job("a-old", "a", priority=Priority.LOW, preemptible=True), on("n1", 0), started_at=0),
        run(job("a-new", "a", priority=Priority.LOW, preemptible=True), on("n1", 1), started_at=100),
    ]
    state, fs = world([node("n1", gpus=2)], [team("a", {"any": 1}, {"any": 3})], running)
    assert fs.borrowed_jobs("a") == ["a-new"]
    result = victims_for(state, fs, job("a-hi", "a", priority=Priority.HIGH, preemptible=True))
    assert evicted(result) == [("a-new", "priority")]


def test_minimum_runtime_protects_fresh_preemptible_work() -> None:
    running = [
        run(job("b0", "b", preemptible=True), on("n1", 0), started_at=NOW - 299),
        run(job("b1", "b", preemptible=True), on("n1", 1), started_at=NOW - 300),
    ]
    state, fs = world([node("n1", gpus=2)], [team("a", {"any": 2}), team("b")], running)
    assert evicted(victims_for(state, fs, job("a-job", "a"))) == [("b1", "reclaim")]
    assert victims_for(state, fs, job("a-two", "a", gpus=2)) is None


def test_pruning_keeps_only_the_victims_the_placement_needs() -> None:
    # Preference order puts the 1-GPU job on n1 first, but only n2's 4-GPU job frees a whole node.
    running = [
        run(job("b-small", "b", preemptible=True), on("n1", 0), started_at=NOW - 400),
        run(job("b-big", "b", gpus=4, preemptible=True), on("n2", 0, 1, 2, 3), started_at=NOW - 3000),
        run(job("c0", "c", gpus=3), on("n1", 1, 2, 3)),
    ]
    teams = [team("a", {"any": 4}), team("b"), team("c", {"any": 3})]
    state, fs = world([node("n1", gpus=4), node("n2", gpus=4)], teams, running)
    pool = candidates(state, job("a-job", "a", gpus=4), fs, POLICY, NOW, (), True)
    assert [c.job.id for c in pool] == ["b-small", "b-big"]
    result = victims_for(state, fs, job("a-job", "a", gpus=4))
    assert evicted(result) == [("b-big", "reclaim")]
    assert result is not None and result[1] == on("n2", 0, 1, 2, 3)
    assert "b-small" in state.placed


def test_a_gang_victim_leaves_with_all_its_replicas() -> None:
    gang = job("b-gang", "b", gpus=4, replicas=2, preemptible=True)
    running = [run(gang, on("n1", 0, 1, 2, 3) + on("n2", 0, 1, 2, 3))]
    state, fs = world([node("n1", gpus=4), node("n2", gpus=4)], [team("a", {"any": 4}), team("b")], running)
    result = victims_for(state, fs, job("a-job", "a", gpus=4))
    assert evicted(result) == [("b-gang", "reclaim")]
    assert all(gpu.idle for gpu in state.gpus.values())


@pytest.mark.parametrize(
    ("nodes", "pending"),
    [
        # Victims on GPUs the job's model constraint excludes cannot help.
        ([node("n1", model=H100, gpus=2)], job("a-job", "a", gpu_model="A100")),
        # Nor can victims on a node that takes no new work.
        ([node("n1", gpus=2, schedulable=False)], job("a-job", "a")),
        ([node("n1", gpus=2, reconfiguring_until=NOW + 1)], job("a-job", "a")),
    ],
)
def test_victims_that_cannot_help_are_not_candidates(nodes: list[Node], pending: Job) -> None:
    state, fs = world(nodes, [team("a", {"any": 2}), team("b")], ones("b", "n1", 2))
    assert candidates(state, pending, fs, POLICY, NOW, (), True) == []
    assert victims_for(state, fs, pending) is None


def test_nothing_is_evicted_when_even_every_candidate_does_not_make_room() -> None:
    running = [*ones("b", "n1", 2), run(job("c0", "c", gpus=6), on("n1", *range(2, 8)))]
    state, fs = world([node("n1")], [team("a", {"any": 4}), team("b"), team("c", {"any": 6})], running)
    before = dict(state.placed)
    usage = {t: state.team_units(t) for t in "abc"}
    assert victims_for(state, fs, job("a-job", "a", gpus=4)) is None
    assert state.placed == before
    assert {t: state.team_units(t) for t in "abc"} == usage


def test_no_ping_pong_a_victim_cannot_preempt_its_preemptor_back() -> None:
    # y (team a, under its guarantee) evicted x (team b, borrowing) at NOW - 60 ...
    state, fs = world([node("n1", gpus=1)], [team("a", {"any": 1}), team("b")], ones("b", "n1", 1))
    x = state.running["b0"].job
    result = victims_for(state, fs, job("y", "a"), now=NOW - 60)
    assert evicted(result) == [("b0", "reclaim")]
    history = [Preemption(victim="b0", by="y", at=NOW - 60)]
    # ... and now y runs while x waits: x may preempt y on no ground, and the history forbids it even if
    # a ground existed (here: x is production, which would otherwise take anything lower).
    y = job("y", "a", preemptible=True)
    state, fs = world([node("n1", gpus=1)], [team("a", {"any": 1}), team("b", {"any": 1})], [run(y, on("n1", 0))])
    prod_x = Job(id=x.id, team="b", request=x.request, priority=Priority.PRODUCTION)
    assert victims_for(state, fs, prod_x, history) is None
    # Outside the window the same preemption is allowed.
    assert evicted(victims_for(state, fs, prod_x, history, now=NOW - 60 + 1800)) == [("y", "production")]


def test_success_removes_victims_inside_the_callers_statement() -> None:
    state, fs, pending = _reclaim()
    statement = state.begin()
    result = victims_for(state, fs, pending)
    assert result is not None
    state.place(pending, result[1])
    statement.rollback()
    assert sorted(state.placed) == [f"b{i}" for i in range(8)]


def test_zero_victims_when_the_job_already_fits() -> None:
    state, fs = world([node("n1")], TWO_TEAMS, ones("b", "n1", 6))
    result = victims_for(state, fs, job("a-job", "a"))
    assert result == ([], on("n1", 6))


def test_jobs_bound_in_this_cycle_are_not_candidates() -> None:
    state, fs = world([node("n1", gpus=1)], [team("a", {"any": 1}), team("b")])
    state.place(job("b-new", "b", preemptible=True), on("n1", 0))
    assert victims_for(state, fs, job("a-job", "a")) is None


def test_many_candidates_need_few_placement_calls() -> None:
    running = [run(job(f"b{i:03}", "b", preemptible=True), on(f"n{i:03}", 0)) for i in range(256)]
    nodes = [node(f"n{i:03}", gpus=1) for i in range(256)]
    state, fs = world(nodes, [team("a", {"any": 8}), team("b")], running)
    pending = job("a-job", "a", gpus=1, replicas=3)
    inner = admitted(state, fs, pending)
    calls = 0

    def counting() -> Slots | None:
        nonlocal calls
        calls += 1
        return inner()

    result = find_victims(state, pending, fs, counting, POLICY, NOW, ())
    assert result is not None and len(result[0]) == 3
    assert calls <= 8 + 3 + 3  # doubling + bisection + pruning, not one call per candidate


# -- candidates by holding ------------------------------------------------------------------------------------

MIXED = node("n1", gpus=2, mig=((("3g.40gb", 0), ("4g.40gb", 4)), ()))
MIG_VICTIM = run(
    Job(id="b-mig", team="b", request=Request(mig_profile="3g.40gb"), priority=Priority.LOW, kind="inference"),
    ((Slot("n1", 0, "3g.40gb", 0),),),
)
WHOLE_VICTIM = run(job("b-whole", "b", priority=Priority.LOW), on("n1", 1))
MIG_JOB = Job(id="p", team="a", request=Request(mig_profile="3g.40gb"), priority=Priority.PRODUCTION, kind="inference")


@pytest.mark.parametrize(
    ("nodes", "pending", "expected"),
    [
        # Layouts are fixed within a cycle: a whole-GPU demand gains nothing from a MIG instance, and back.
        ([MIXED], job("p", "a", priority=Priority.PRODUCTION), ["b-whole"]),
        ([MIXED], MIG_JOB, ["b-mig"]),
        # A job that needs the node's host CPU gains from any victim there.
        ([replace(MIXED, cpu_milli=64_000)], replace(MIG_JOB, cpu_milli=1_000), ["b-whole", "b-mig"]),
        (
            [replace(MIXED, memory_mib=1 << 20)],
            job("p", "a", priority=Priority.PRODUCTION, memory_mib=1),
            ["b-whole", "b-mig"],
        ),
        # Host figures on one side only do not bind.
        ([replace(MIXED, cpu_milli=64_000)], MIG_JOB, ["b-mig"]),
    ],
)
def test_other_teams_victims_must_free_the_grain_the_job_takes(
    nodes: list[Node], pending: Job, expected: list[str]
) -> None:
    state, fs = world(nodes, [team("a"), team("b")], [WHOLE_VICTIM, MIG_VICTIM])
    found = candidates(state, pending, fs, POLICY, NOW, (), False)
    assert sorted(c.job.id for c in found) == sorted(expected)


def test_own_team_victims_of_any_grain_stay_candidates_they_free_quota() -> None:
    own = [replace(r, job=replace(r.job, team="a", preemptible=True)) for r in (WHOLE_VICTIM, MIG_VICTIM)]
    state, fs = world([MIXED], [team("a", {"any": 2})], own)
    found = candidates(state, job("p", "a", priority=Priority.HIGH), fs, POLICY, NOW, (), False)
    assert sorted(c.job.id for c in found) == ["b-mig", "b-whole"]


def test_no_candidates_without_a_ground() -> None:
    # Only higher-priority work in the team and no reclaim: nobody may be evicted, whatever runs elsewhere.
    running = [run(job("a-high", "a", priority=Priority.HIGH, preemptible=True), on("n1", 0)), *ones("b", "n1", 2, 1)]
    state, fs = world([node("n1", gpus=4)], TWO_TEAMS, running)
    assert candidates(state, job("a-job", "a"), fs, POLICY, NOW, (), False) == []


def test_a_gpu_model_that_cannot_serve_the_demand_frees_nothing_for_it() -> None:
    # 3g.40gb is not a profile of the 40 GB A100: its instances are no use to the job.
    small = node("n1", model="A100-SXM4-40GB", gpus=1, mig=((("3g.20gb", 0), ("4g.20gb", 4)),))
    victim = replace(MIG_VICTIM, job=replace(MIG_VICTIM.job, request=Request(mig_profile="3g.20gb")))
    victim = replace(victim, slots=((Slot("n1", 0, "3g.20gb", 0),),))
    state, fs = world([small], [team("a"), team("b")], [victim])
    assert candidates(state, MIG_JOB, fs, POLICY, NOW, (), False) == []
