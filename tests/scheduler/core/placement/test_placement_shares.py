"""Fractional GPUs without MIG: milli-GPU shares, packed FGD-style."""

from __future__ import annotations

import pytest

from scheduler.core.gpus.units import UNITS_PER_GPU
from scheduler.core.model.cluster_state import ClusterState
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Running, Slot
from scheduler.core.placement import find_slots, index_of
from scheduler.core.placement.mix import DemandMix, observe
from scheduler.core.placement.shares import fragmentation
from tests.scheduler.properties.builders import A100, H100, job, node, running, state_of

POLICY = Policy()


def _share(job_id: str, node_name: str, gpu: int, milli: int) -> Running:
    return running(job(job_id, milli=milli), ((Slot(node_name, gpu, milli=milli),),))


@pytest.mark.parametrize(
    ("sizes", "free", "expected"),
    [
        ({}, 300, 0),
        ({500: 2}, 300, 600),  # both 500s could not use 300 free
        ({500: 2}, 500, 0),
        ({500: 2, 1000: 1}, 500, 500),  # a whole-GPU request cannot use it
        ({500: 2}, 0, 0),
    ],
)
def test_fragmentation(sizes: dict[int, int], free: int, expected: int) -> None:
    mix = DemandMix()
    for size, count in sizes.items():
        mix.add_share(H100, size, count)
    assert fragmentation(mix, H100, free) == expected


def _place(state: ClusterState, the_job: Job, pending: list[Job]) -> tuple[tuple[Slot, ...], ...] | None:
    index, _ = index_of(state)
    index.mix = observe(state, index, pending, POLICY)
    return find_slots(state, the_job, POLICY)


def test_a_share_goes_where_it_fills_the_gpu_exactly() -> None:
    state = state_of([node("s", gpus=3, sharing=True)], [_share("a", "s", 0, 300), _share("b", "s", 1, 600)])
    assert _place(state, job("j", milli=400), []) == ((Slot("s", 1, milli=400),),)


def test_the_leftover_should_suit_the_mix_rather_than_fit_best() -> None:
    # GPU 0 has 750 free, GPU 1 has 500 free. Best fit would put 250 on GPU 1 and strand 250 there; the mix
    # is made of 500s, so FGD puts it on GPU 0, leaving a 500 each on both GPUs.
    state = state_of([node("s", gpus=2, sharing=True)], [_share("a", "s", 0, 250), _share("b", "s", 1, 500)])
    mix = [job(f"p{i}", milli=500) for i in range(4)]
    assert _place(state, job("j", milli=250), mix) == ((Slot("s", 0, milli=250),),)


def test_equal_fragmentation_falls_back_to_best_fit() -> None:
    # Every request in the mix is 100 milli: no leftover is fragmented, so the fuller GPU wins.
    held = [_share(f"a{i}", "s", 0, 100) for i in range(3)] + [_share(f"b{i}", "s", 1, 100) for i in range(6)]
    state = state_of([node("s", gpus=2, sharing=True)], held)
    assert _place(state, job("j", milli=100), [job("p", milli=100)]) == ((Slot("s", 1, milli=100),),)


def test_an_idle_gpu_is_broken_only_when_it_costs_least() -> None:
    state = state_of([node("s", gpus=2, sharing=True)], [_share("a", "s", 0, 900)])
    assert _place(state, job("j", milli=100), []) == ((Slot("s", 0, milli=100),),)
    assert _place(state, job("k", milli=200), []) == ((Slot("s", 1, milli=200),),)


def test_shares_need_a_time_sliced_gpu_without_mig() -> None:
    state = state_of([node("plain", gpus=1), node("mig", A100, 1, mig="all-balanced", sharing=True)])
    assert find_slots(state, job("j", milli=100), POLICY) is None


def test_a_gpu_never_holds_more_than_1000_milli() -> None:
    state = state_of([node("s", gpus=1, sharing=True)])
    placed = 0
    for i in range(20):
        the_job = job(f"j{i}", milli=300)
        slots = find_slots(state, the_job, POLICY)
        if slots is None:
            break
        state.place(the_job, slots)
        placed += 1
    assert placed == 3
    assert state.gpus[("s", 0)].milli_used == 900
    assert state.team_units("t")["any"] == 3 * 300 * UNITS_PER_GPU // 1000  # counted at their share


def test_whole_gpus_and_shares_do_not_mix_on_a_gpu() -> None:
    state = state_of([node("s", gpus=2, sharing=True)], [_share("a", "s", 0, 100)])
    assert find_slots(state, job("w", gpus=1), POLICY) == ((Slot("s", 1),),)
    assert find_slots(state, job("w", gpus=2), POLICY) is None


def test_share_gangs_spread_when_one_gpu_cannot_hold_them() -> None:
    state = state_of([node("s", gpus=2, sharing=True)])
    slots = find_slots(state, job("g", milli=600, replicas=2), POLICY)
    assert slots == ((Slot("s", 0, milli=600),), (Slot("s", 1, milli=600),))
    assert find_slots(state, job("g", milli=600, replicas=3), POLICY) is None
    assert not state.placed


def test_milli_of_1000_or_more_means_whole_gpus() -> None:
    state = state_of([node("s", H100, gpus=2, sharing=True)])
    assert find_slots(state, job("j", milli=1500), POLICY) == ((Slot("s", 0), Slot("s", 1)),)


def test_shares_on_nodes_short_of_cpu_are_skipped() -> None:
    nodes = [node("a", gpus=1, sharing=True, cpu_milli=1000), node("b", gpus=1, sharing=True)]
    assert find_slots(state_of(nodes), job("j", milli=100, cpu_milli=2000), POLICY)[0][0].node == "b"  # type: ignore[index]


def test_the_scan_is_bounded_but_always_considers_idle_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    held = [_share("a", "s", 0, 700), _share("b", "s", 1, 600)]
    state = state_of([node("s", gpus=3, sharing=True)], held)
    mix = [job(f"p{i}", milli=300) for i in range(4)]
    # Free: 300, 400 and an idle GPU. A full scan finds GPU 1 (its 300 left serves the mix of 300s) ...
    assert _place(state, job("j", milli=100), mix) == ((Slot("s", 1, milli=100),),)
    # ... a scan limited to the smallest free value still looks at the idle GPU, and prefers it to GPU 0.
    monkeypatch.setattr("scheduler.core.placement.shares.SCAN_LIMIT", 1)
    assert _place(state_of([node("s", gpus=3, sharing=True)], held), job("j", milli=100), mix) == (
        (Slot("s", 2, milli=100),),
    )
