"""MIG layout validation against the placement table of the facts sheet (§1.2–1.4)."""

from __future__ import annotations

import pytest

from scheduler.core.catalog import GPU_MODEL_BY_NAME, GPU_MODELS, LayoutError, compute_fraction, validate_layout

A100_80 = "A100-SXM4-80GB"


@pytest.mark.parametrize(
    "layout",
    [
        [["7g.80gb", 0]],
        [["4g.40gb", 0], ["3g.40gb", 4]],
        [["4g.40gb", 0], ["2g.20gb", 4], ["1g.10gb", 6]],
        [["2g.20gb", 0], ["2g.20gb", 2], ["3g.40gb", 4]],
        [["1g.10gb", 0], ["1g.10gb", 1], ["1g.10gb", 2], ["1g.10gb", 3], ["3g.40gb", 4]],
        [["1g.10gb", i] for i in range(7)],
        [["3g.40gb", 0], ["3g.40gb", 4]],  # uses only 6 of 7 SM slices, but legal
        [["4g.40gb", 0], ["2g.20gb", 4], ["1g.20gb", 6]],  # the 2-slice 1g takes the last memory slice
        [["1g.10gb+me", 0], ["1g.10gb", 1]],
        [],
    ],
)
def test_layouts_from_the_facts_sheet_are_valid(layout: list[list[object]]) -> None:
    assert validate_layout(A100_80, layout) == sorted(((p, s) for p, s in layout), key=lambda x: x[1])


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        ([["3g.40gb", 2]], "cannot start at memory slice 2; allowed starts: 0, 4"),
        ([["4g.40gb", 4]], "cannot start at memory slice 4; allowed starts: 0"),
        ([["1g.10gb", 7]], "cannot start at memory slice 7"),
        ([["4g.40gb", 0], ["3g.40gb", 0]], "overlaps another instance at memory slice 0"),
        ([["7g.80gb", 0], ["1g.10gb", 6]], "overlaps"),
        ([["1g.10gb+me", 0], ["1g.10gb+me", 1]], "at most 1 × 1g.10gb+me"),
        ([["1g.5gb", 0]], "'1g.5gb' is not a MIG profile of A100-SXM4-80GB"),
        ([["3g.40gb"]], "is not a [profile, start] pair"),
        ([["3g.40gb", "4"]], "is not a [profile, start] pair"),
        ([["3g.40gb", True]], "is not a [profile, start] pair"),
    ],
)
def test_impossible_layouts_are_refused_with_the_reason(layout: list[list[object]], message: str) -> None:
    with pytest.raises(LayoutError) as caught:
        validate_layout(A100_80, layout)
    assert message in str(caught.value)


def test_unknown_model_is_named() -> None:
    with pytest.raises(LayoutError, match="unknown GPU model 'V100'"):
        validate_layout("V100", [])


def test_profile_names_follow_memory_size() -> None:
    assert "1g.5gb" in GPU_MODEL_BY_NAME["A100-PCIE-40GB"].profiles()
    assert "3g.47gb" in GPU_MODEL_BY_NAME["H100-NVL-94GB"].profiles()
    assert "7g.141gb" in GPU_MODEL_BY_NAME["H200-SXM-141GB"].profiles()


def test_catalog_covers_every_model_of_the_scenario_contract() -> None:
    assert {m.name for m in GPU_MODELS} >= {
        "A100-SXM4-40GB",
        "A100-SXM4-80GB",
        "A100-PCIE-40GB",
        "A100-PCIE-80GB",
        "H100-SXM5-80GB",
        "H100-PCIE-80GB",
        "H100-NVL-94GB",
        "H200-SXM-141GB",
    }


def test_a_mig_slice_counts_its_compute_slices_over_seven() -> None:
    assert compute_fraction(A100_80, "3g.40gb") == pytest.approx(3 / 7)
    assert compute_fraction(A100_80, "1g.20gb") == pytest.approx(1 / 7)
    assert compute_fraction(A100_80, "7g.80gb") == 1.0
