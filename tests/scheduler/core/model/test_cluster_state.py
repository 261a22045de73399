"""ClusterState questions and guards: free instances, holders, slot units, free slots, reconfigurations."""

from __future__ import annotations

import pytest

from scheduler.core.gpus.catalog import GPU_MODEL_BY_NAME, validate_layout
from scheduler.core.model.cluster_state import ClusterState, gpu_class_of, model_matches, slot_units
from scheduler.core.model.snapshot import Node, Slot
from scheduler.core.model.tables import Tables
from scheduler.core.speedups.memo import Memo
from tests.scheduler.properties.builders import A100, H100, job, node, running, snapshot, whole

MIG_SLOT = Slot("m", 0, "3g.40gb", 4)
LAYOUT = (("4g.40gb", 0), ("3g.40gb", 4))


def _state(tables: Tables | None = None) -> ClusterState:
    """Node "w": 2 whole GPUs (GPU 0 held whole by "w0"); node "m": 1 GPU cut 4g.40gb@0 + 3g.40gb@4 with the
    4g held by "m4"; node "s": 1 time-sliced GPU with a 300-milli share held by "s3"."""
    nodes = [
        node("w", A100, 2),
        Node("m", A100, 1, mig=(LAYOUT,)),
        node("s", H100, 1, sharing=True),
    ]
    held = [
        running(job("w0", gpus=1), (whole("w", 0),)),
        running(job("m4", mig="4g.40gb"), ((Slot("m", 0, "4g.40gb", 0),),)),
        running(job("s3", milli=300), ((Slot("s", 0, milli=300),),)),
    ]
    world = snapshot(nodes, running_jobs=held)
    return ClusterState(world) if tables is None else ClusterState(world, tables)


def test_the_mig_layout_of_the_tests_is_legal() -> None:
    assert validate_layout(A100, LAYOUT) == list(LAYOUT)
    assert _state().gpus[("m", 0)].layout == LAYOUT


@pytest.mark.parametrize(
    ("gpu", "profile", "expected"),
    [
        (("m", 0), "3g.40gb", [4]),
        (("m", 0), "4g.40gb", []),  # the only 4g is held
        (("m", 0), "1g.10gb", []),  # not in the layout
        (("w", 1), "3g.40gb", []),  # MIG off
    ],
)
def test_free_instances_are_the_layouts_unheld_starts_of_a_profile(
    gpu: tuple[str, int], profile: str, expected: list[int]
) -> None:
    assert _state().gpus[gpu].free_instances(profile) == expected


@pytest.mark.parametrize(
    ("gpu", "expected"),
    [(("w", 0), {"w0"}), (("w", 1), set()), (("m", 0), {"m4"}), (("s", 0), {"s3"})],
)
def test_holders_name_every_job_on_a_gpu_whole_instance_or_share(gpu: tuple[str, int], expected: set[str]) -> None:
    assert _state().gpus[gpu].holders() == expected


@pytest.mark.parametrize(
    ("slot", "model", "units"),
    [
        (Slot("n", 0), A100, 7000),
        (Slot("n", 0, milli=250), A100, 1750),
        (Slot("n", 0, milli=1500), A100, 7000),  # a share never counts above a whole GPU
        (Slot("n", 0, "3g.40gb", 4), A100, 3000),
        (Slot("n", 0), "Tesla-T4", 7000),  # a GPU outside the catalog counts whole GPUs as usual
    ],
)
def test_slot_units(slot: Slot, model: str, units: int) -> None:
    assert slot_units(slot, GPU_MODEL_BY_NAME.get(model)) == units


def test_a_mig_slot_on_a_gpu_outside_the_catalog_has_no_units() -> None:
    with pytest.raises(ValueError, match=r"MIG profile 1g\.10gb on a GPU outside the catalog"):
        slot_units(Slot("n", 0, "1g.10gb", 0), None)


@pytest.mark.parametrize(
    ("model", "constraint", "gpu_class", "matches"),
    [
        (A100, None, "A100", True),
        (A100, "A100", "A100", True),
        (A100, A100, "A100", True),
        (A100, "H100", "A100", False),
        ("Tesla-T4", "Tesla-T4", "Tesla-T4", True),  # outside the catalog the model is its own class
    ],
)
def test_gpu_class_and_model_constraint(model: str, constraint: str | None, gpu_class: str, matches: bool) -> None:
    assert gpu_class_of(model) == gpu_class
    assert model_matches(model, constraint) is matches


@pytest.mark.parametrize(
    ("slot", "free"),
    [
        (Slot("nowhere", 0), False),  # unknown node
        (Slot("w", 7), False),  # no such GPU on the node
        (Slot("w", 0), False),  # held whole
        (Slot("w", 1), True),
        (Slot("w", 1, milli=500), False),  # "w" does not time-slice its GPUs
        (MIG_SLOT, True),
        (Slot("m", 0, "4g.40gb", 0), False),  # held
        (Slot("m", 0, "3g.40gb", 0), False),  # not in the layout at that start
        (Slot("m", 0), False),  # a MIG GPU is never taken whole
        (Slot("s", 0, milli=700), True),
        (Slot("s", 0, milli=701), False),  # 300 + 701 > 1000
        (Slot("s", 0), False),  # shared: not whole
    ],
)
def test_slot_free(slot: Slot, free: bool) -> None:
    assert _state().slot_free(slot) is free


def test_a_reconfiguration_on_an_idle_gpu_rolls_back_with_its_statement() -> None:
    state = _state()
    statement = state.begin()
    state.set_layout("w", 1, (("7g.80gb", 0),))
    assert state.gpus[("w", 1)].layout == (("7g.80gb", 0),)
    assert state.slot_free(Slot("w", 1, "7g.80gb", 0)) and not state.slot_free(Slot("w", 1))
    statement.rollback()
    assert state.gpus[("w", 1)].layout == ()
    assert state.slot_free(Slot("w", 1))


def test_a_committed_reconfiguration_outside_any_statement_stays() -> None:
    state = _state()
    state.set_layout("w", 1, (("7g.80gb", 0),))
    assert state.gpus[("w", 1)].layout == (("7g.80gb", 0),)


@pytest.mark.parametrize(("name", "gpu"), [("w", 0), ("m", 0), ("s", 0)])
def test_a_busy_gpu_refuses_a_reconfiguration(name: str, gpu: int) -> None:
    state = _state()
    before = state.gpus[(name, gpu)].layout
    with pytest.raises(ValueError, match=f"{name}/{gpu} is busy"):
        state.set_layout(name, gpu, (("7g.80gb", 0),))
    assert state.gpus[(name, gpu)].layout == before


def test_placing_on_a_taken_slot_raises_and_changes_nothing() -> None:
    state = _state()
    with pytest.raises(ValueError, match="is not free for job x"):
        state.place(job("x", gpus=1), ((Slot("w", 0),),))
    assert state.gpus[("w", 0)].whole == "w0" and "x" not in state.placed


def test_slot_ops_are_remembered_only_in_the_tables_the_cycle_hands_in() -> None:
    remembering, plain = _state(Memo()), _state()  # the cycle's memo with the speed-ups on; built alone, forgetful
    for state in (remembering, plain):
        slots = state.placed["m4"]
        first = state.slot_ops("m4", slots)
        assert [(gpu.key, start, units) for gpu, start, _, _, units in first] == [(("m", 0), 0, 4000)]
        assert (state.slot_ops("m4", slots) is first) is (state is remembering)
        again = state.slot_ops("m4", tuple(list(slots)))  # an equal placement, but not the one remembered
        assert again == first and again is not first
    state = _state(Memo())
    state.remove("m4")
    state.place(state.jobs["m4"], ((Slot("m", 0, "3g.40gb", 4),),))  # other slots: the old answer is not given
    assert [start for _, start, _, _, _ in state.slot_ops("m4", state.placed["m4"])] == [4]


def test_a_teams_usage_stamp_is_its_usage_and_the_same_tuple_until_the_usage_changes() -> None:
    state = _state(Memo())
    team = job("w0", gpus=1).team
    stamp = state.usage_stamp(team)
    assert stamp == tuple(state.usage[team].items()) and stamp
    assert state.usage_stamp(team) is stamp
    assert state.usage_stamp("a team with nothing") == ()
    statement = state.begin()
    state.remove("w0")
    assert state.usage_stamp(team) == tuple(state.usage[team].items()) != stamp
    statement.rollback()
    assert state.usage_stamp(team) == stamp
