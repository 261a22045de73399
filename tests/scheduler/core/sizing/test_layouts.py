"""MIG layouts against ``docs/gpu-facts.md``, Valid full-GPU layouts (the maximal layouts) and GPU Operator default
configs (the config names)."""

from __future__ import annotations

from collections import Counter

import pytest

from scheduler.core.gpus.catalog import GPU_MODEL_BY_NAME, GPU_MODELS, GpuModelSpec, LayoutError, validate_layout
from scheduler.core.sizing.layouts import (
    addable,
    compute_slices_used,
    fit,
    format_layout,
    is_full_compute,
    maximal_layouts,
    mig_spec,
    named_layout,
    named_layouts,
    parse_layout,
    place_profiles,
)

A100_40 = "A100-SXM4-40GB"
A100_80 = "A100-SXM4-80GB"
H100 = "H100-SXM5-80GB"
H200 = "H200-SXM-141GB"
MODELS = [spec.name for spec in GPU_MODELS]


def _base_profiles(model: str) -> list[str]:
    """The base profiles of §1.4: 1g (one memory slice), 2g, 3g, 4g, 7g."""
    return [p.name for p in GPU_MODEL_BY_NAME[model].profile_specs() if p.key in {"1g", "2g", "3g", "4g", "7g"}]


def _by_key(model: str, layout: tuple[tuple[str, int], ...]) -> tuple[tuple[str, int], ...]:
    """A layout's multiset written with row keys ("1g", "1g-2m", ...), so every model compares alike."""
    keys = {p.name: p.key for p in GPU_MODEL_BY_NAME[model].profile_specs()}
    return tuple(sorted(Counter(keys[name] for name, _ in layout).items()))


def _multiset(*items: tuple[str, int]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(items))


# §1.4: the 11 full-compute base layouts and the 3 six-slice ones (all with 3g at 0).
FULL_COMPUTE_BASE = {
    _multiset(("7g", 1)),
    _multiset(("4g", 1), ("3g", 1)),
    _multiset(("4g", 1), ("2g", 1), ("1g", 1)),
    _multiset(("4g", 1), ("1g", 3)),
    _multiset(("3g", 1), ("2g", 2)),
    _multiset(("3g", 1), ("2g", 1), ("1g", 2)),
    _multiset(("3g", 1), ("1g", 4)),
    _multiset(("2g", 3), ("1g", 1)),
    _multiset(("2g", 2), ("1g", 3)),
    _multiset(("2g", 1), ("1g", 5)),
    _multiset(("1g", 7)),
}
SIX_SLICE_BASE = {
    _multiset(("3g", 2)),
    _multiset(("3g", 1), ("2g", 1), ("1g", 1)),
    _multiset(("3g", 1), ("1g", 3)),
}


@pytest.mark.parametrize("model", MODELS)
def test_base_layouts_match_the_facts_sheet(model: str) -> None:
    layouts = maximal_layouts(model, profiles=_base_profiles(model))
    full = {_by_key(model, lay) for lay in layouts if is_full_compute(model, lay)}
    partial = [lay for lay in layouts if not is_full_compute(model, lay)]
    assert full == FULL_COMPUTE_BASE
    assert len(full) == 11
    assert {_by_key(model, lay) for lay in partial} == SIX_SLICE_BASE
    for layout in partial:
        assert compute_slices_used(model, layout) == 6
        three_g = next(name for name, _ in layout if GPU_MODEL_BY_NAME[model].profiles()[name].key == "3g")
        assert (three_g, 0) in layout


@pytest.mark.parametrize("model", MODELS)
def test_counting_the_two_slice_1g_gives_17_full_compute_multisets(model: str) -> None:
    full = {_by_key(model, lay) for lay in maximal_layouts(model) if is_full_compute(model, lay)}
    assert len(full) == 17
    # e.g. 1g (2 slices) at 6 takes the last memory slice instead of 1g at 6 (docs/gpu-facts.md, Valid
    # full-GPU layouts).
    assert _multiset(("4g", 1), ("2g", 1), ("1g-2m", 1)) in full


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("with_me", [False, True])
def test_every_maximal_layout_is_valid_sorted_and_admits_nothing_more(model: str, with_me: bool) -> None:
    layouts = maximal_layouts(model, with_me=with_me)
    assert len(layouts) == len(set(layouts))
    considered = [p.name for p in GPU_MODEL_BY_NAME[model].profile_specs() if with_me or not p.media_engines]
    for layout in layouts:
        assert list(layout) == validate_layout(model, layout)
        assert addable(model, layout, considered) == ()
        assert any(name.endswith("+me") for name, _ in layout) <= with_me


@pytest.mark.parametrize("model", [A100_40, H100])
def test_with_me_adds_only_layouts_that_hold_the_media_engine_instance(model: str) -> None:
    plain = set(maximal_layouts(model))
    with_me = maximal_layouts(model, with_me=True)
    assert {lay for lay in with_me if not any(n.endswith("+me") for n, _ in lay)} == plain
    assert all(sum(n.endswith("+me") for n, _ in lay) <= 1 for lay in with_me)
    assert len(with_me) > len(plain)


def test_layout_order_is_deterministic_and_most_compute_first() -> None:
    layouts = maximal_layouts(A100_80)
    assert layouts == maximal_layouts(A100_80)
    assert layouts[0] == (("7g.80gb", 0),)
    assert layouts[1] == (("4g.40gb", 0), ("3g.40gb", 4))
    used = [compute_slices_used(A100_80, lay) for lay in layouts]
    assert used == sorted(used, reverse=True)


@pytest.mark.parametrize(
    ("model", "profiles", "message"),
    [
        ("V100", None, "unknown GPU model 'V100'; known: A100-SXM4-40GB"),
        (A100_80, ["1g.5gb"], "1g.5gb: not MIG profiles of A100-SXM4-80GB"),
    ],
)
def test_maximal_layouts_refuses_unknown_models_and_profiles(
    model: str, profiles: list[str] | None, message: str
) -> None:
    with pytest.raises(LayoutError, match=message):
        maximal_layouts(model, profiles=profiles)


def test_a_gpu_model_without_mig_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(GPU_MODEL_BY_NAME, "T4-TEST", GpuModelSpec("T4-TEST", "T4", 16384, None))
    with pytest.raises(LayoutError, match="T4-TEST is not MIG-capable"):
        mig_spec("T4-TEST")
    assert fit("T4-TEST", 1024) is None


# -- GPU Operator config names ------------------------------------------------------------------------------


def _counts(layout: tuple[tuple[str, int], ...]) -> dict[str, int]:
    return dict(Counter(name for name, _ in layout))


@pytest.mark.parametrize(
    ("model", "name", "counts"),
    [
        (A100_80, "all-disabled", {}),
        (H100, "all-1g.10gb", {"1g.10gb": 7}),
        (H100, "all-1g.10gb.me", {"1g.10gb+me": 1}),
        (H100, "all-1g.20gb", {"1g.20gb": 4}),
        (H100, "all-2g.20gb", {"2g.20gb": 3}),
        (H100, "all-3g.40gb", {"3g.40gb": 2}),
        (H100, "all-4g.40gb", {"4g.40gb": 1}),
        (H100, "all-7g.80gb", {"7g.80gb": 1}),
        (H100, "all-balanced", {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}),
        (A100_80, "all-balanced", {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}),
        # On A100-40GB "1g.10gb" is the two-memory-slice 1g: the same config name gives 4 instances.
        (A100_40, "all-1g.10gb", {"1g.10gb": 4}),
        (A100_40, "all-1g.5gb", {"1g.5gb": 7}),
        (A100_40, "all-balanced", {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}),
        (H200, "all-balanced", {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}),
        (H200, "all-7g.141gb", {"7g.141gb": 1}),
    ],
)
def test_named_layouts_follow_the_gpu_operator(model: str, name: str, counts: dict[str, int]) -> None:
    layout = named_layout(model, name)
    assert _counts(layout) == counts
    assert list(layout) == validate_layout(model, layout)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("all-enabled", "all-enabled turns MIG on without instances"),
        ("all-5g.50gb", "unknown MIG config 'all-5g.50gb' for H100-SXM5-80GB; known: all-disabled"),
        ("all-1g.10gb+me", "unknown MIG config"),  # the operator writes "+" as "."
    ],
)
def test_named_layout_refuses_what_cannot_be_scheduled(name: str, message: str) -> None:
    with pytest.raises(LayoutError, match=message):
        named_layout(H100, name)


def test_named_layouts_lists_every_name() -> None:
    assert named_layouts(A100_40) == (
        "all-disabled",
        "all-enabled",
        "all-balanced",
        "all-1g.5gb",
        "all-1g.5gb.me",
        "all-1g.10gb",
        "all-2g.10gb",
        "all-3g.20gb",
        "all-4g.20gb",
        "all-7g.40gb",
    )


# -- placing a multiset -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("profiles", "expected"),
    [
        ([], ()),
        (["3g.40gb"], (("3g.40gb", 4),)),  # keeps 0-3 for a 4g; at 0 it would strand SM slice 3
        (["4g.40gb", "3g.40gb"], (("4g.40gb", 0), ("3g.40gb", 4))),
        (["3g.40gb", "3g.40gb"], (("3g.40gb", 0), ("3g.40gb", 4))),
        (
            ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"],
            (("1g.10gb", 0), ("1g.10gb", 1), ("2g.20gb", 2), ("3g.40gb", 4)),
        ),
        (["4g.40gb", "2g.20gb", "1g.20gb"], (("4g.40gb", 0), ("2g.20gb", 4), ("1g.20gb", 6))),
        (["1g.10gb"] * 7, tuple(("1g.10gb", i) for i in range(7))),
        (["7g.80gb", "1g.10gb"], None),
        (["3g.40gb", "3g.40gb", "1g.10gb"], None),
        (["4g.40gb", "4g.40gb"], None),
        (["1g.10gb+me", "1g.10gb+me"], None),
        (["2g.20gb"] * 4, None),
    ],
)
def test_place_profiles_finds_legal_starts_or_none(profiles: list[str], expected: tuple[tuple[str, int], ...]) -> None:
    layout = place_profiles(A100_80, profiles)
    assert layout == expected
    if layout is not None:
        assert list(layout) == validate_layout(A100_80, layout)
        assert sorted(name for name, _ in layout) == sorted(profiles)


def test_place_profiles_does_not_depend_on_the_order_given() -> None:
    assert place_profiles(H100, ["1g.10gb", "3g.40gb", "2g.20gb"]) == place_profiles(
        H100, ["2g.20gb", "3g.40gb", "1g.10gb"]
    )


@pytest.mark.parametrize(("model", "profiles"), [(A100_80, ["1g.5gb"]), ("V100", ["1g.5gb"])])
def test_place_profiles_refuses_unknown_names(model: str, profiles: list[str]) -> None:
    with pytest.raises(LayoutError):
        place_profiles(model, profiles)


# -- parsing ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "layout"),
    [
        ("4g.40gb@0,3g.40gb@4", (("4g.40gb", 0), ("3g.40gb", 4))),
        (" 3g.40gb @ 4 , 4g.40gb@0 ", (("3g.40gb", 4), ("4g.40gb", 0))),
        ("1g.10gb+me@6", (("1g.10gb+me", 6),)),
        ("", ()),
        ("   ", ()),
    ],
)
def test_parse_layout(text: str, layout: tuple[tuple[str, int], ...]) -> None:
    assert parse_layout(text) == layout


@pytest.mark.parametrize(
    ("text", "bad"),
    [("4g.40gb", "'4g.40gb'"), ("4g.40gb@x", "'4g.40gb@x'"), ("big@1", "'big@1'"), ("4g.40gb@0,,", "''")],
)
def test_parse_layout_names_the_malformed_item(text: str, bad: str) -> None:
    with pytest.raises(LayoutError, match=f"{bad} is not PROFILE@START"):
        parse_layout(text)


def test_format_layout_is_the_inverse_of_parse() -> None:
    text = "4g.40gb@0,2g.20gb@4,1g.20gb@6"
    assert format_layout(parse_layout(text)) == text


# -- fitting memory to a profile ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "memory_mib", "profile"),
    [
        (A100_40, 1, "1g.5gb"),
        (A100_40, 4864, "1g.5gb"),
        (A100_40, 4865, "1g.10gb"),  # the two-slice 1g: one compute slice, 9856 MiB
        (A100_40, 9856, "1g.10gb"),
        (A100_40, 9857, "3g.20gb"),
        (A100_40, 19969, "7g.40gb"),
        (A100_40, 40193, None),
        (H100, 15 * 1024, "1g.20gb"),
        (H100, 79872, "7g.80gb"),
        (H100, 79873, None),
        (A100_80, 9728, "1g.10gb"),
        ("V100", 1024, None),
    ],
)
def test_fit_takes_fewest_compute_slices_then_least_memory(model: str, memory_mib: int, profile: str | None) -> None:
    assert fit(model, memory_mib) == profile


def test_fit_never_picks_the_media_engine_profile_unless_asked() -> None:
    assert fit(H100, 9000) == "1g.10gb"
    assert fit(H100, 9000, with_me=True) == "1g.10gb"  # same size: the plain profile's name sorts first


@pytest.mark.parametrize(
    ("layout", "profiles", "expected"),
    [
        ((("7g.80gb", 0),), None, ()),
        ((("4g.40gb", 0), ("3g.40gb", 4)), None, ()),
        ((("4g.40gb", 0),), ["3g.40gb", "2g.20gb"], (("3g.40gb", 4), ("2g.20gb", 4))),
        ((("3g.40gb", 0), ("3g.40gb", 4)), ["1g.10gb"], ()),
    ],
)
def test_addable(
    layout: tuple[tuple[str, int], ...], profiles: list[str] | None, expected: tuple[tuple[str, int], ...]
) -> None:
    assert addable(A100_80, layout, profiles) == expected


def test_an_empty_gpu_can_take_every_placement() -> None:
    spec = GPU_MODEL_BY_NAME[A100_80]
    assert len(addable(A100_80, ())) == sum(len(p.starts) for p in spec.profile_specs())
