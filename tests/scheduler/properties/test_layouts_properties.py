"""Hypothesis invariants of MIG layouts: enumerated layouts are legal and maximal, placements are legal, and
the enumeration is complete (every legal layout grows into a listed maximal one)."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.gpus.catalog import GPU_MODEL_BY_NAME, GPU_MODELS, LayoutError, validate_layout
from scheduler.core.sizing.layouts import addable, fit, format_layout, maximal_layouts, parse_layout, place_profiles

MODELS = st.sampled_from([spec.name for spec in GPU_MODELS])


def _placements(model: str) -> list[tuple[str, int]]:
    return [(p.name, start) for p in GPU_MODEL_BY_NAME[model].profile_specs() for start in p.starts]


def _is_valid(model: str, layout: list[tuple[str, int]]) -> bool:
    try:
        validate_layout(model, layout)
    except LayoutError:
        return False
    return True


@settings(max_examples=200, deadline=None)
@given(model=MODELS, with_me=st.booleans(), data=st.data())
def test_every_enumerated_layout_validates_and_admits_no_further_instance(
    model: str, with_me: bool, data: st.DataObject
) -> None:
    layouts = maximal_layouts(model, with_me=with_me)
    layout = data.draw(st.sampled_from(layouts))
    assert list(layout) == validate_layout(model, layout)
    for name, start in _placements(model):
        if with_me or not name.endswith("+me"):
            assert not _is_valid(model, [*layout, (name, start)]), f"{name}@{start} still fits in {layout}"


@settings(max_examples=300, deadline=None)
@given(model=MODELS, data=st.data())
def test_every_legal_layout_grows_into_a_listed_maximal_layout(model: str, data: st.DataObject) -> None:
    # Build a random legal layout by offering random placements and keeping those that stay legal.
    offered = data.draw(st.lists(st.sampled_from(_placements(model)), max_size=12))
    layout: list[tuple[str, int]] = []
    for pair in offered:
        if _is_valid(model, [*layout, pair]):
            layout.append(pair)
    # Then fill it up with whatever still fits, in a drawn order: it must end as a listed maximal layout.
    while room := addable(model, tuple(layout)):
        layout.append(data.draw(st.sampled_from(room)))
        assert _is_valid(model, layout)
    assert tuple(validate_layout(model, layout)) in set(maximal_layouts(model, with_me=True))


@settings(max_examples=300, deadline=None)
@given(model=MODELS, data=st.data())
def test_place_profiles_output_validates_and_is_complete(model: str, data: st.DataObject) -> None:
    names = [p.name for p in GPU_MODEL_BY_NAME[model].profile_specs()]
    profiles = data.draw(st.lists(st.sampled_from(names), max_size=8))
    layout = place_profiles(model, profiles)
    wanted = Counter(profiles)
    feasible = any(
        not wanted - Counter(name for name, _ in maximal) for maximal in maximal_layouts(model, with_me=True)
    )
    assert (layout is not None) == feasible
    if layout is not None:
        assert list(layout) == validate_layout(model, layout)
        assert Counter(name for name, _ in layout) == wanted


@settings(max_examples=100, deadline=None)
@given(model=MODELS, data=st.data())
def test_format_and_parse_round_trip(model: str, data: st.DataObject) -> None:
    layout = data.draw(st.sampled_from(maximal_layouts(model, with_me=True)))
    assert parse_layout(format_layout(layout)) == layout


@settings(max_examples=300, deadline=None)
@given(model=MODELS, memory_mib=st.integers(min_value=1, max_value=150_000))
def test_fit_holds_the_memory_with_the_fewest_compute_slices(model: str, memory_mib: int) -> None:
    chosen = fit(model, memory_mib)
    profiles = [p for p in GPU_MODEL_BY_NAME[model].profile_specs() if not p.media_engines]
    holding = [p for p in profiles if p.memory_mib >= memory_mib]
    if chosen is None:
        assert holding == []
        return
    spec = GPU_MODEL_BY_NAME[model].profiles()[chosen]
    assert spec.memory_mib >= memory_mib
    assert spec.compute_slices == min(p.compute_slices for p in holding)


@pytest.mark.parametrize("model", [spec.name for spec in GPU_MODELS])
def test_enumeration_is_the_same_in_every_call(model: str) -> None:
    assert maximal_layouts(model) == maximal_layouts(model)
