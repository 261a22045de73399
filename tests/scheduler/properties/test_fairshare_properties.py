"""Fair-share and preemption invariants (docs/scheduling-rules.md, 2, 3 and 5) over generated clusters.

- The order is a total, deterministic order that does not depend on the order jobs are listed in.
- A team under its guarantee is never ordered after a team over it.
- Admission never lets non-preemptible work exceed its team's guarantee.
- Victims always make the placement possible and are minimal: putting back any one makes it fail; the
  grounds hold (priority within a team, reclaim of borrowed work only, production); no ping-pong; and when
  no set works the state is unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.core.decisions.preemption import find_victims
from scheduler.core.model.cluster_state import ClusterState, gpu_class_of
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Node, Preemption, Running, Snapshot, Team
from scheduler.core.model.vocabulary import EvictionReason, Priority
from scheduler.core.rules.fairshare import FairShare, job_key
from scheduler.core.rules.limits import placement_units
from tests.scheduler.core.decisions.test_preemption import A100, H100, admitted, first_fit, job, team

POLICY = Policy(min_runtime_s=300.0, ping_pong_window_s=1800.0)
NOW = 10_000.0
TEAM_NAMES = ("t0", "t1", "t2", "t3")
PRIORITIES = list(Priority)
CHECKS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

nodes_st = st.lists(st.tuples(st.sampled_from([A100, H100]), st.integers(1, 4)), min_size=1, max_size=4).map(
    lambda specs: tuple(Node(name=f"n{i}", gpu_model=m, gpu_count=g) for i, (m, g) in enumerate(specs))
)


@st.composite
def teams_st(draw: st.DrawFn) -> tuple[Team, ...]:
    teams = []
    for name in TEAM_NAMES[: draw(st.integers(2, 4))]:
        guaranteed: dict[str, float] = {}
        if draw(st.integers(0, 3)):  # most teams have an overall guarantee
            guaranteed["any"] = draw(st.integers(0, 8))
        if draw(st.booleans()):
            guaranteed[draw(st.sampled_from(["A100", "H100"]))] = draw(st.integers(0, 4))
        burst = {"any": draw(st.integers(0, 12))} if draw(st.booleans()) else {}
        teams.append(team(name, guaranteed, burst, weight=draw(st.sampled_from([0.5, 1.0, 2.0]))))
    return tuple(teams)


@st.composite
def job_st(
    draw: st.DrawFn,
    job_id: str,
    pinned: bool | None = None,
    preemptible: float = 0.5,
    priorities: tuple[Priority, ...] = tuple(Priority),
) -> Job:
    model = draw(st.sampled_from([None, "A100", "H100"])) if pinned is None else None
    if pinned:
        model = draw(st.sampled_from(["A100", "H100"]))
    return job(
        job_id,
        draw(st.sampled_from(TEAM_NAMES)),
        gpus=draw(st.integers(1, 3)),
        priority=draw(st.sampled_from(priorities)),
        preemptible=draw(st.floats(0, 1)) < preemptible,
        rank=draw(st.integers(0, 2)),
        submitted_at=float(draw(st.integers(0, 5))),
        gpu_model=model,
        replicas=draw(st.sampled_from([1, 1, 1, 2])),
    )


@dataclass
class World:
    nodes: tuple[Node, ...]
    teams: tuple[Team, ...]
    running: tuple[Running, ...]


@st.composite
def world_st(draw: st.DrawFn, busy: bool = False) -> World:
    """A cluster with running work; ``busy``: fuller, mostly preemptible and past its minimum runtime."""
    nodes = draw(nodes_st)
    teams = draw(teams_st())
    state = ClusterState(Snapshot(nodes=nodes, teams=teams))
    running = []
    for index in range(draw(st.integers(0, 20 if busy else 12))):
        candidate = draw(job_st(f"r{index}", preemptible=0.8 if busy else 0.5))
        slots = first_fit(state, candidate)()
        if slots is None:
            continue
        state.place(candidate, slots)
        latest = NOW - POLICY.min_runtime_s if busy and draw(st.integers(0, 4)) else NOW
        started = float(draw(st.integers(0, int(latest))))
        checkpoint = draw(st.one_of(st.none(), st.integers(int(started), int(NOW)).map(float)))
        running.append(Running(job=candidate, slots=slots, started_at=started, last_checkpoint_at=checkpoint))
    return World(nodes, teams, tuple(running))


def build(world: World) -> tuple[ClusterState, FairShare]:
    state = ClusterState(Snapshot(nodes=world.nodes, teams=world.teams, running=world.running))
    return state, FairShare(world.teams, state, POLICY)


def pending_st(pinned: bool | None = None) -> st.SearchStrategy[list[Job]]:
    return st.integers(0, 12).flatmap(lambda n: st.tuples(*(job_st(f"p{i}", pinned) for i in range(n))).map(list))


# -- order --------------------------------------------------------------------------------------------------


@CHECKS
@given(world=world_st(), pending=pending_st(), data=st.data())
def test_order_is_total_deterministic_and_independent_of_input_order(
    world: World, pending: list[Job], data: st.DataObject
) -> None:
    fs = build(world)[1]
    ordered = fs.order(pending, NOW)
    assert sorted(j.id for j in ordered) == sorted(j.id for j in pending)
    shuffled = data.draw(st.permutations(pending))
    assert fs.order(shuffled, NOW) == ordered
    assert build(world)[1].order(shuffled, NOW) == ordered  # a fresh engine agrees


@CHECKS
@given(world=world_st(), pending=pending_st(pinned=False))
def test_no_job_that_would_borrow_goes_before_another_teams_job_that_fits_its_guarantee(
    world: World, pending: list[Job]
) -> None:
    fs = build(world)[1]
    ordinary = [j for j in pending if j.priority != Priority.PRODUCTION]  # production precedes everything
    queues: dict[str, list[Job]] = {}
    for next_job in sorted(ordinary, key=job_key):
        queues.setdefault(next_job.team, []).append(next_job)
    for taken in fs.order(ordinary, NOW):  # nothing is placed: every team's usage stays as it is
        assert queues[taken.team][0] == taken  # within a team: the team's own order
        queues[taken.team].pop(0)
        if not fs.fits_guarantee(taken.team, taken):
            heads = [queue[0] for team, queue in queues.items() if queue and team != taken.team]
            assert not any(fs.fits_guarantee(head.team, head) for head in heads), (taken, heads)


# -- admission ----------------------------------------------------------------------------------------------


@CHECKS
@given(world=world_st(), pending=pending_st())
def test_admission_never_lets_non_preemptible_work_exceed_the_guarantee(world: World, pending: list[Job]) -> None:
    # Start from an empty cluster and run one cycle's worth of greedy admission.
    empty = World(world.nodes, world.teams, ())
    state, fs = build(empty)
    for next_job in fs.iter_pending(pending, NOW):
        slots = first_fit(state, next_job)()
        if slots is not None and fs.admit(next_job, placement_units(state, slots)).ok:
            state.place(next_job, slots)
    for spec in world.teams:
        limits = fs.guarantee(spec.name)
        firm: dict[str, int] = {}
        for job_id, slots in state.placed.items():
            placed = state.jobs[job_id]
            # Production may run above the guarantee (up to burst): the rule is for other non-preemptible work.
            if placed.team == spec.name and not placed.preemptible and placed.priority != Priority.PRODUCTION:
                for gpu_class, units in placement_units(state, slots).items():
                    firm[gpu_class] = firm.get(gpu_class, 0) + units
        assert sum(firm.values()) <= (limits.overall or 0)
        for gpu_class, units in firm.items():
            bound = limits.for_class(gpu_class)
            assert bound is None or units <= bound


# -- victims ------------------------------------------------------------------------------------------------


@settings(CHECKS, max_examples=300)
@given(world=world_st(busy=True), data=st.data())
def test_victims_make_the_placement_possible_and_are_minimal(world: World, data: st.DataObject) -> None:
    state, fs = build(world)
    # Pinned to a class, the placer's admission depends only on the team's usage: placement is monotone.
    urgent = (Priority.PRODUCTION, Priority.HIGH, Priority.HIGH, Priority.NORMAL)
    pending = data.draw(job_st("pending", pinned=True, priorities=urgent))
    classes = sorted({gpu_class_of(n.gpu_model) for n in world.nodes})
    pending = replace(pending, gpu_model=data.draw(st.sampled_from(classes)))
    history = data.draw(
        st.lists(st.sampled_from([r.job.id for r in world.running]), max_size=2) if world.running else st.just([])
    )
    preemptions = [Preemption(victim="pending", by=by, at=NOW - 10) for by in history]
    borrowed_before = {name: set(fs.borrowed_jobs(name)) for name in fs.teams_with_running()}
    placed_before = dict(state.placed)
    try_place = admitted(state, fs, pending)
    result = find_victims(state, pending, fs, try_place, POLICY, NOW, preemptions)
    if result is None:
        assert state.placed == placed_before
        return
    evictions, slots = result
    assert try_place() is not None
    assert all(state.slot_free(slot) for replica in slots for slot in replica)
    rank = {p: i for i, p in enumerate(PRIORITIES)}
    for eviction in evictions:
        victim = state.running[eviction.job]
        assert eviction.job not in state.placed and eviction.by == "pending"
        assert victim.job.priority != Priority.PRODUCTION
        assert eviction.job not in history  # no ping-pong
        if eviction.reason == EvictionReason.PRIORITY:
            assert victim.job.team == pending.team and victim.job.preemptible
            assert rank[victim.job.priority] > rank[pending.priority]
        elif eviction.reason == EvictionReason.RECLAIM:
            assert victim.job.preemptible
            assert eviction.job in borrowed_before[victim.job.team]  # never below the victim's guarantee
            if victim.job.team == pending.team:  # the team's own borrowed work yields to its firm work
                assert not pending.preemptible and pending.priority != Priority.PRODUCTION
        else:
            assert eviction.reason == EvictionReason.PRODUCTION and pending.priority == Priority.PRODUCTION
        if eviction.reason != EvictionReason.PRODUCTION:
            assert NOW - victim.started_at >= POLICY.min_runtime_s
        # Minimal: putting this one victim back makes the placement fail.
        statement = state.begin()
        state.place(victim.job, victim.slots)
        assert try_place() is None
        statement.rollback()
