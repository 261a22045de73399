"""Preemption for a job whose quota, not capacity, is what stops it (quotafit.QuotaFit._by_usage), and the
guard that the victims' nodes cannot make room for it (speedups.firstfit.room_added)."""

from __future__ import annotations

from scheduler.core.decisions.preemption import FirstFit
from scheduler.core.model.snapshot import Job, Node, Request, Running, Slot, Snapshot, Team
from scheduler.core.model.vocabulary import JobKind, Priority
from scheduler.core.placement import IndexedClusterState
from scheduler.core.rules.fairshare import FairShare
from scheduler.core.speedups.firstfit import room_added
from scheduler.core.speedups.quotafit import QuotaFit
from tests.scheduler.core.speedups.test_firstfit import (
    A100,
    A100_40,
    BALANCED,
    NOW,
    POLICY,
    both_ways,
    candidate,
    mig_running,
    pool_of,
    running,
    wants,
    whole,
)

# 12 GiB: a 1g.20gb (1,000 units) on an 80 GB A100, a 3g.20gb (3,000) on a 40 GB one.
SIZED = Job(id="p", team="a", request=Request(memory_gib=12.0), kind=JobKind.INFERENCE, priority=Priority.PRODUCTION)


def quota_world(
    guarantee: float = 2.0, nodes: tuple[Node, ...] = (), jobs: tuple[Running, ...] = ()
) -> tuple[IndexedClusterState, FairShare]:
    """Team a holds 13,000 units of a 14,000 guarantee: the free on-demand 3g.20gb (3,000) is refused and no
    1g.20gb is free anywhere. Its whole GPU on w1 (7,000) is what must go; its 1g.10gb on a1 is too small for
    the job; team b's job on the spot node is on capacity production may not use. ``nodes`` and ``jobs`` are
    added."""
    every_node = [
        Node("a1", A100, 1, tier="reserved", mig=((("4g.40gb", 0), ("1g.10gb", 4), ("1g.10gb", 5), ("1g.10gb", 6)),)),
        Node("w1", A100, 1, tier="reserved"),
        Node("o1", A100_40, 1, tier="on-demand", mig=((("3g.20gb", 0), ("3g.20gb", 4)),)),
        Node("s1", A100, 1, tier="spot"),
        *nodes,
    ]
    every_job = [
        mig_running("a-big", "a", "a1", "4g.40gb", 0, priority=Priority.NORMAL),
        mig_running("a-s1", "a", "a1", "1g.10gb", 4, priority=Priority.LOW),
        mig_running("a-s2", "a", "a1", "1g.10gb", 5, priority=Priority.NORMAL),
        running("a-whole", "a", whole("w1", 0)),
        running("b-spot", "b", whole("s1", 0)),
        mig_running("o-held", "b", "o1", "3g.20gb", 0),
        *jobs,
    ]
    # Production is bounded by the burst limit (it may run above the guarantee): the two are equal here.
    limit = (("any", guarantee),)
    teams = (Team("a", guaranteed=limit, burst=limit), Team("b", guaranteed=(("any", 0.0),)))
    snapshot = Snapshot(nodes=tuple(every_node), teams=teams, running=tuple(every_job))
    state = IndexedClusterState(snapshot, NOW)
    return state, FairShare(teams, state, POLICY)


def replay(state: IndexedClusterState, fairness: FairShare, job: Job = SIZED) -> QuotaFit:
    assert state.index is not None
    state.index.flush()
    return QuotaFit(state, state.index, fairness, job, POLICY)


def test_the_usage_alone_decides_where_the_search_succeeds_and_which_victims_stay_out() -> None:
    state, fairness = quota_world()
    pool = [candidate(state, i) for i in ("a-s1", "b-spot", "a-whole")]
    # a-s1 alone leaves 12,000 (the 3g still refused); a-whole too leaves 5,000. Put back, a-whole would leave
    # 12,000 again (kept); a-s1 only 6,000 (it goes back).
    assert replay(state, fairness)._by_usage(pool) == FirstFit(3, (0, 2))
    with_model, without = both_ways(state, fairness, SIZED)
    assert with_model is not None and with_model == without
    assert with_model[0] == ["a-whole"]
    assert with_model[1][0][0].node == "o1"


def test_no_answer_when_the_trial_succeeds_before_any_removal() -> None:
    state, fairness = quota_world(guarantee=3.0)  # 21,000: the 3g is admitted now
    assert replay(state, fairness)._by_usage([candidate(state, "a-whole")]) is None


def test_no_answer_when_the_usage_never_gets_low_enough() -> None:
    state, fairness = quota_world()
    assert replay(state, fairness)._by_usage([candidate(state, "b-spot"), candidate(state, "a-s1")]) is None


def test_no_answer_when_a_victims_node_could_make_room() -> None:
    # Team b's 1g.20gb on a reserved 80 GB GPU: evicting it frees the job's own holding, which the quota admits.
    r1 = Node("r1", A100, 1, tier="reserved", mig=((("1g.20gb", 0), ("3g.40gb", 4)),))
    held = (mig_running("b-twenty", "b", "r1", "1g.20gb", 0), mig_running("b-forty", "b", "r1", "3g.40gb", 4))
    state, fairness = quota_world(nodes=(r1,), jobs=held)
    pool = [candidate(state, i) for i in ("a-s1", "b-twenty", "a-whole")]
    assert replay(state, fairness)._by_usage(pool) is None
    with_model, without = both_ways(state, fairness, SIZED)
    assert with_model == without


# -- can the victims' nodes make room? -------------------------------------------------------------------------


Holding = tuple[str, int]
Holdings = set[Holding]


def added(
    state: IndexedClusterState,
    job: Job,
    ids: tuple[str, ...],
    allowed: Holdings,
    offered: frozenset[Holding] = frozenset(),
) -> bool:
    assert state.index is not None
    state.index.flush()
    return room_added(state, state.index, job, POLICY, pool_of(state, *ids), allowed, offered)


def test_whole_gpus_and_shares_freed_by_the_victims() -> None:
    nodes = (Node("n1", A100, 2), Node("sh", A100, 1, sharing=True))
    share = Running(Job(id="sv", team="b", request=Request(gpu_milli=800)), ((Slot("sh", 0, milli=800),),), 0.0)
    state, _ = quota_world(
        nodes=nodes, jobs=(running("v1", "b", whole("n1", 0)), running("v2", "b", whole("n1", 1)), share)
    )
    one = ("A100", 7000)
    assert added(state, wants(1), ("v1",), {one})
    assert not added(state, wants(1), ("v1",), {one}, offered=frozenset({one}))  # a whole GPU is on offer already
    assert not added(state, wants(1), ("v1",), {("A100", 1000)})  # not a holding the quota admits
    assert not added(state, wants(2), ("v1",), {("A100", 14000)})  # one GPU of the two is not enough
    half = Job(id="p", team="a", request=Request(gpu_milli=500))
    assert added(state, half, ("sv",), {("A100", 3500)})
    assert not added(state, half, ("sv",), {("A100", 3500)}, offered=frozenset({("A100", 3500)}))
    assert not added(state, half, ("v1",), {("A100", 3500)})  # n1 does not time-slice its GPUs
    assert not added(state, half, (), {("A100", 3500)})


def test_larger_instances_free_before_or_after_the_removals() -> None:
    sized = Job(id="p", team="a", request=Request(memory_gib=8.0), kind=JobKind.INFERENCE)  # a 1g.10gb
    m1 = Node("m1", A100, 1, tier="reserved", mig=(BALANCED,))
    held = [
        mig_running(i, "b", "m1", p, s)
        for i, p, s in (("m0", "1g.10gb", 0), ("m1-1", "1g.10gb", 1), ("m2", "2g.20gb", 2))
    ]
    big = mig_running("big", "b", "m1", "3g.40gb", 4)
    state, _ = quota_world(nodes=(m1,), jobs=(*held, big))
    three = ("A100", 3000)
    assert added(state, sized, ("big",), {three})  # evicting it frees a 3g.40gb, which the sized job may take
    assert not added(state, sized, ("big",), {("A100", 1000)})  # ... of a holding the quota refuses
    explicit = Job(id="p", team="a", request=Request(mig_profile="1g.10gb"), kind=JobKind.INFERENCE)
    assert not added(state, explicit, ("big",), {three})  # an explicit profile takes no larger instance
    state, _ = quota_world(nodes=(m1,), jobs=tuple(held))
    assert added(state, sized, ("m2",), {three})  # the 3g.40gb was free before: evicting m2 may change that


def test_victims_on_nodes_the_job_may_not_use_change_nothing() -> None:
    state, _ = quota_world()
    assert not added(state, SIZED, ("b-spot",), {("A100", 1000), ("A100", 3000), ("A100", 7000)})
