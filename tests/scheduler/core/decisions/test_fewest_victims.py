"""The fewest victims (docs/scheduling-rules.md, 5): on small random clusters the victim set preemption finds is as
small as an exhaustive search over every subset of the candidates can find, for one replica and for gangs across
nodes alike."""

from __future__ import annotations

from collections.abc import Callable
from itertools import combinations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.core.decisions.preemption import Candidate, _Rooms, candidates, find_victims, rank
from scheduler.core.model.cluster_state import ClusterState
from scheduler.core.model.snapshot import Job, Request, Running, Slots
from scheduler.core.model.vocabulary import EvictionReason, Priority
from scheduler.core.rules.fairshare import FairShare
from tests.scheduler.core.decisions.test_preemption import (
    NOW,
    POLICY,
    evicted,
    first_fit,
    job,
    node,
    on,
    run,
    team,
    victims_for,
    world,
)

GPUS = 3
LOWER = [Priority.LOW, Priority.NORMAL, Priority.HIGH]


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[str], list[Running]]:
    """Two or three 3-GPU nodes, each packed with running jobs of 1–3 GPUs of any priority below production."""
    names = [f"n{i}" for i in range(draw(st.integers(2, 3)))]
    running: list[Running] = []
    for name in names:
        gpu = 0
        while gpu < GPUS:
            size = draw(st.integers(1, 3))
            if draw(st.integers(0, 5)) and gpu + size <= GPUS:  # else this GPU stays idle (one time in six)
                the_job = job(
                    f"j{len(running)}",
                    draw(st.sampled_from(["a", "b"])),
                    gpus=size,
                    priority=draw(st.sampled_from(LOWER)),
                    preemptible=draw(st.booleans()),
                )
                started = float(draw(st.integers(0, 3)) * 1000)
                running.append(run(the_job, on(name, *range(gpu, gpu + size)), started_at=started))
                gpu += size
            else:
                gpu += 1
    return names, running


def _exhaustive(state: ClusterState, pool: list[Candidate], try_place: Callable[[], Slots | None]) -> int | None:
    """The size of the smallest subset of ``pool`` that makes room, by trying them all."""
    best: int | None = None
    for size in range(len(pool) + 1):
        for subset in combinations(pool, size):
            statement = state.begin()
            try:
                for candidate in subset:
                    state.remove(candidate.job.id)
                fits = try_place() is not None
            finally:
                statement.rollback()
            if fits:
                value = len(subset)
                best = value if best is None or value < best else best
    return best


CHECKS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _search(cluster: tuple[list[str], list[Running]], gpus: int, replicas: int) -> tuple[int | None, int | None]:
    """(the size of the victim set preemption finds, the exhaustive search's), each None for no set; (0, 0)
    when the job fits as things are (no search)."""
    names, running = cluster
    state, fairness = world([node(name, gpus=GPUS) for name in names], [team("a"), team("b")], running)
    request = job("p", "a", gpus=gpus).request
    pending = Job(id="p", team="a", request=request, priority=Priority.PRODUCTION, replicas=replicas)
    place = first_fit(state, pending)
    if place() is not None:
        return 0, 0
    pool = candidates(state, pending, fairness, POLICY, NOW, (), False)
    expected = _exhaustive(state, pool, place)
    found = find_victims(state, pending, fairness, place, POLICY, NOW, ())
    return (None if found is None else len(found[0])), expected


@CHECKS
@given(cluster=clusters(), gpus=st.integers(1, GPUS))
def test_the_victim_set_is_the_fewest_an_exhaustive_search_finds(
    cluster: tuple[list[str], list[Running]], gpus: int
) -> None:
    found, expected = _search(cluster, gpus, 1)
    assert found == expected


@CHECKS
@given(cluster=clusters(), gpus=st.integers(1, GPUS))
def test_a_gang_across_nodes_finds_room_whenever_some_set_makes_it(
    cluster: tuple[list[str], list[Running]], gpus: int
) -> None:
    """Two replicas on different nodes: a set whenever one exists, and the fewest when the pool is small enough
    to try every smaller set (``EXHAUSTIVE_TRIALS``)."""
    found, expected = _search(cluster, gpus, 2)
    assert (found is None) == (expected is None)
    if found is not None and expected is not None:
        assert found >= expected


# -- the searches, one by one ---------------------------------------------------------------------------------


def _eight_eight_two(team_name: str) -> tuple[ClusterState, FairShare]:
    """18 one-GPU jobs of ``team_name``: 8 on n1, 8 on n2, 2 on n3 (six idle GPUs), 8-GPU nodes."""
    running = [
        run(job(f"{name}-{i}", team_name, preemptible=True, priority=Priority.LOW), on(name, i))
        for name, count in (("n1", 8), ("n2", 8), ("n3", 2))
        for i in range(count)
    ]
    return world([node("n1"), node("n2"), node("n3")], [team("a"), team("b")], running)


def test_production_evicts_the_two_on_the_node_with_room_not_a_full_node() -> None:
    state, fairness = _eight_eight_two("b")
    pending = job("p", "a", gpus=8, priority=Priority.PRODUCTION)
    result = victims_for(state, fairness, pending)
    assert evicted(result) == [("n3-0", "production"), ("n3-1", "production")]
    assert result is not None and result[1] == on("n3", *range(8))


def test_a_high_priority_job_evicts_the_two_of_its_team_alike() -> None:
    state, fairness = _eight_eight_two("a")
    result = victims_for(state, fairness, job("h", "a", gpus=8, priority=Priority.HIGH, preemptible=True))
    assert evicted(result) == [("n3-0", "priority"), ("n3-1", "priority")]


def test_one_larger_victim_before_two_preferred_ones() -> None:
    # n1: a 2-GPU job (more work lost) and two 1-GPU jobs; the prefix search takes the two, the smaller sets one.
    running = [
        run(job("big", "b", gpus=2, preemptible=True), on("n1", 0, 1), started_at=0.0),
        run(job("one", "b", preemptible=True), on("n1", 2), started_at=5000.0),
        run(job("two", "b", preemptible=True), on("n1", 3), started_at=5000.0),
        run(job("far", "b", gpus=2, preemptible=True), on("n2", 0, 1), started_at=1000.0),
    ]
    state, fairness = world([node("n1", gpus=4), node("n2", gpus=2)], [team("a"), team("b")], running)
    result = victims_for(state, fairness, job("p", "a", gpus=2, priority=Priority.PRODUCTION))
    assert evicted(result) == [("far", "production")]  # of the two that work alone, the less work lost


def test_among_equally_few_the_least_preferred_victim_decides() -> None:
    low, normal, high = (
        Candidate(job(n, "b", priority=p), on("n1", 0), EvictionReason.PRODUCTION, key)
        for n, p, key in (
            ("l", Priority.LOW, (0, 0, -3, 0.0, 0.0, "l")),
            ("n", Priority.NORMAL, (0, 0, -2, 0.0, 0.0, "n")),
            ("h", Priority.HIGH, (0, 0, -1, 0.0, 0.0, "h")),
        )
    )
    assert rank([normal, normal]) < rank([low, high])  # the set whose worst victim is better wins
    assert rank([high]) < rank([low, low])  # fewer first


def test_a_domain_that_could_not_host_the_job_is_not_searched() -> None:
    # n2's only candidate shares the node with production: emptied, it still cannot hold a 4-GPU replica.
    running = [
        *[run(job(f"x{i}", "b", preemptible=True), on("n1", i), started_at=9000.0) for i in range(4)],
        run(job("prod", "b", gpus=3, priority=Priority.PRODUCTION), on("n2", 0, 1, 2)),
        run(job("y", "b", preemptible=True), on("n2", 3), started_at=9500.0),
    ]
    state, fairness = world([node("n1", gpus=4), node("n2", gpus=4)], [team("a"), team("b")], running)
    pending = job("p", "a", gpus=4, priority=Priority.PRODUCTION)
    calls = 0
    inner = first_fit(state, pending)

    def counting() -> Slots | None:
        nonlocal calls
        calls += 1
        return inner()

    result = find_victims(state, pending, fairness, counting, POLICY, NOW, ())
    assert evicted(result) == [(f"x{i}", "production") for i in range(4)]
    assert (
        _Rooms(state, pending).could_make_room(
            [c for c in candidates(state, pending, fairness, POLICY, NOW, (), False) if c.job.id == "y"]
        )
        is False
    )


def test_a_gang_counts_the_idle_gpus_elsewhere() -> None:
    # Two 4-GPU replicas: n0 is idle and hosts one; n2's two jobs make room for the other, n1's four are not needed.
    def cluster(idle: bool) -> tuple[ClusterState, FairShare]:
        running = [
            *[run(job(f"a{i}", "b", preemptible=True), on("n1", i), started_at=9000.0) for i in range(4)],
            *[run(job(f"c{i}", "b", preemptible=True), on("n2", i), started_at=1000.0) for i in range(2)],
            *([] if idle else [run(job("z", "b", gpus=4, priority=Priority.PRODUCTION), on("n0", 0, 1, 2, 3))]),
        ]
        return world([node(f"n{i}", gpus=4) for i in range(3)], [team("a"), team("b")], running)

    pending = Job(id="p", team="a", request=job("p", "a", gpus=4).request, priority=Priority.PRODUCTION, replicas=2)
    state, fairness = cluster(idle=True)
    assert evicted(victims_for(state, fairness, pending)) == [("c0", "production"), ("c1", "production")]
    state, fairness = cluster(idle=False)  # production holds n0: both n1 and n2 must be emptied
    result = victims_for(state, fairness, pending)
    assert result is not None and len(result[0]) == 6


def test_no_domain_is_skipped_where_the_gpus_cannot_tell() -> None:
    """Host CPU or memory, or a demand other than whole GPUs: evicting anything on a node may make room."""
    state, _ = world([node("n1", gpus=1)], [team("a"), team("b")])
    for pending in (
        job("p", "a", gpus=2, cpu_milli=1000),
        Job(id="p", team="a", request=Request(mig_profile="1g.10gb"), priority=Priority.PRODUCTION),
    ):
        assert _Rooms(state, pending).could_make_room([]) is True
