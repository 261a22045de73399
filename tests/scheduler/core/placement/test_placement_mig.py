"""MIG replicas: a free instance of the profile, chosen fragmentation-aware."""

from __future__ import annotations

import pytest

from scheduler.core.model.cluster_state import ClusterState
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Slot
from scheduler.core.model.vocabulary import JobKind
from scheduler.core.placement import find_slots, index_of
from scheduler.core.placement.mig import fragmentation, take_delta
from scheduler.core.placement.mix import DemandMix, observe
from tests.scheduler.properties.builders import A100, H100, job, node, running, state_of

POLICY = Policy()


def _mix(**profiles: int) -> DemandMix:
    mix = DemandMix()
    for profile, count in profiles.items():
        mix.add_mig(A100, profile.replace("_", "."), count)
    return mix


@pytest.mark.parametrize(
    ("mix", "idle", "free", "expected"),
    [
        ({}, True, ("1g.10gb", "3g.40gb"), 0),  # an idle GPU can be reconfigured: not fragmented
        ({}, False, ("1g.10gb", "3g.40gb"), 4),  # empty mix: every free slice weighs 1
        ({"1g_10gb": 3}, False, ("1g.10gb",), 1),  # 1 × (3 + 1 − 3)
        ({"1g_10gb": 3}, False, ("3g.40gb",), 12),  # 3 × (3 + 1 − 0)
        ({"1g_10gb": 1, "3g_40gb": 1}, False, ("1g.10gb", "3g.40gb"), 2 + 6),
    ],
)
def test_fragmentation(mix: dict[str, int], idle: bool, free: tuple[str, ...], expected: int) -> None:
    assert fragmentation(_mix(**mix), A100, idle, free) == expected


def test_take_delta_prefers_partly_used_gpus() -> None:
    mix = _mix()
    partly = take_delta(mix, A100, (False, ("1g.10gb", "1g.10gb", "3g.40gb")), "1g.10gb")
    idle = take_delta(mix, A100, (True, ("1g.10gb", "1g.10gb", "3g.40gb")), "1g.10gb")
    assert partly == (-1, 4)
    assert idle == (4, 4)


def _place(state: ClusterState, the_job: Job, pending: list[Job]) -> tuple[tuple[Slot, ...], ...] | None:
    index, _ = index_of(state)
    index.mix = observe(state, index, pending, POLICY)
    return find_slots(state, the_job, POLICY)


def test_a_replica_goes_to_a_partly_used_gpu_before_an_idle_one() -> None:
    busy = running(job("r", mig="1g.10gb"), ((Slot("a", 1, "1g.10gb", 0),),))
    state = state_of([node("a", A100, 2, mig="all-balanced")], [busy])
    slots = _place(state, job("j", mig="1g.10gb"), [])
    assert slots == ((Slot("a", 1, "1g.10gb", 1),),)


@pytest.mark.parametrize(
    ("pending", "expected_gpu"),
    [
        # The mix wants 3g: breaking the balanced GPU leaves a 3g and a 2g that serve it; the all-1g GPU's
        # leftover 1g slices would mostly go unused.
        (["3g.40gb"] * 5, 1),
        # The mix wants 1g: break the all-1g GPU, whose leftover 1g slices the mix uses.
        (["1g.10gb"] * 10, 0),
    ],
)
def test_among_idle_gpus_the_leftovers_should_suit_the_mix(pending: list[str], expected_gpu: int) -> None:
    state = state_of([node("a", A100, 2, mig=["all-1g.10gb", "all-balanced"])])
    mix_jobs = [job(f"p{i}", mig=profile) for i, profile in enumerate(pending)]
    slots = _place(state, job("j", mig="1g.10gb"), mix_jobs)
    assert slots is not None and slots[0][0].gpu == expected_gpu


def test_the_lowest_free_start_of_the_profile_is_taken() -> None:
    busy = running(job("r", mig="1g.10gb"), ((Slot("a", 0, "1g.10gb", 0),),))
    state = state_of([node("a", A100, 1, mig="all-1g.10gb")], [busy])
    assert find_slots(state, job("j", mig="1g.10gb"), POLICY) == ((Slot("a", 0, "1g.10gb", 1),),)


def test_only_an_instance_of_exactly_the_profile_serves() -> None:
    state = state_of([node("a", A100, 1, mig="all-3g.40gb"), node("w", A100, 1)])
    assert find_slots(state, job("j", mig="1g.10gb"), POLICY) is None  # whole GPU "w" has MIG off
    assert find_slots(state, job("k", mig="3g.40gb"), POLICY) is not None


def test_memory_requests_are_right_sized_to_a_slice_for_inference() -> None:
    # 15 GiB: the 1-compute-slice profile with two memory slices (1g.20gb) is the smallest that holds it.
    state = state_of([node("a", A100, 1, mig="all-1g.20gb")])
    slots = find_slots(state, job("j", memory_gib=15, kind=JobKind.INFERENCE), POLICY)
    assert slots is not None and slots[0][0].mig_profile == "1g.20gb"
    assert find_slots(state, job("k", memory_gib=15, kind=JobKind.TRAINING), POLICY) is None


def test_mig_profiles_of_another_family_do_not_match() -> None:
    state = state_of([node("a", H100, 1, mig="all-balanced")])
    assert find_slots(state, job("j", mig="1g.5gb"), POLICY) is None
    assert find_slots(state, job("j", mig="1g.10gb"), POLICY) is not None


def test_policy_without_mig_serves_no_mig_request() -> None:
    state = state_of([node("a", A100, 1, mig="all-balanced")])
    assert find_slots(state, job("j", mig="1g.10gb"), Policy(mig=False)) is None


@pytest.mark.parametrize(("replicas", "fits"), [(4, True), (5, False)])
def test_mig_gangs_are_all_or_nothing(replicas: int, fits: bool) -> None:
    state = state_of([node("a", A100, 2, mig="all-3g.40gb")])
    slots = find_slots(state, job("g", mig="3g.40gb", replicas=replicas, kind=JobKind.INFERENCE), POLICY)
    assert (slots is not None) is fits
    if slots is not None:
        assert len(slots) == replicas
        assert len({(s.gpu, s.mig_start) for replica in slots for s in replica}) == replicas
    assert not state.placed and all(not gpu.instances for gpu in state.gpus.values())
    assert [name for name in state.jobs if name.startswith("g")] == []


def test_mig_instances_on_nodes_short_of_cpu_are_skipped() -> None:
    nodes = [node("a", A100, 1, mig="all-balanced", cpu_milli=1000), node("b", A100, 1, mig="all-balanced")]
    assert find_slots(state_of(nodes), job("j", mig="1g.10gb", cpu_milli=2000), POLICY)[0][0].node == "b"  # type: ignore[index]


def test_a_memory_sized_replica_takes_a_larger_instance_on_a_partly_used_gpu() -> None:
    # 16 GiB → 1g.20gb, which all-balanced does not have; GPU 0 is partly used, GPU 1 idle.
    busy = running(job("r", mig="1g.10gb"), ((Slot("a", 0, "1g.10gb", 0),),))
    state = state_of([node("a", H100, 2, mig="all-balanced")], [busy])
    slots = find_slots(state, job("j", memory_gib=16, kind=JobKind.INFERENCE), POLICY)
    assert slots == ((Slot("a", 0, "2g.20gb", 2),),)  # 2g before 3g: fewest extra compute slices


def test_no_larger_instance_on_an_idle_gpu_nor_for_an_explicit_profile() -> None:
    state = state_of([node("a", H100, 1, mig="all-balanced")])
    assert find_slots(state, job("j", memory_gib=16, kind=JobKind.INFERENCE), POLICY) is None
    busy = running(job("r", mig="1g.10gb"), ((Slot("a", 0, "1g.10gb", 0),),))
    state = state_of([node("a", H100, 1, mig="all-balanced")], [busy])
    assert find_slots(state, job("k", mig="1g.20gb"), POLICY) is None
    assert find_slots(state, job("m", memory_gib=70, kind=JobKind.INFERENCE), POLICY) is None  # nothing holds it
