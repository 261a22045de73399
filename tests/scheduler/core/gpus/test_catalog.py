"""MIG layout validation against the placement table of ``docs/gpu-facts.md``, MIG geometry and placements (and
its next sections, Why some combinations are impossible and Valid full-GPU layouts)."""

from __future__ import annotations

import pytest

from scheduler.core.gpus.catalog import (
    GPU_MODEL_BY_NAME,
    GPU_MODELS,
    GpuModelSpec,
    LayoutError,
    compute_fraction,
    profile_spec,
    validate_layout,
)

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


# -- real memory per profile -------------------------------------------------------------------------------

_MEMORY_MIB = {
    # [V] in docs/gpu-facts.md, MIG geometry and placements, and [D] siblings: 1g+me = 1g, two-slice 1g = 2g, 4g = 3g.
    "A100-SXM4-40GB": [4864, 4864, 9856, 9856, 19968, 19968, 40192],
    "A100-PCIE-40GB": [4864, 4864, 9856, 9856, 19968, 19968, 40192],
    # [D] k memory slices × 1g; the A100-80GB 1g from the A100 class ratio 4864/5120 × 10240 = 9728.
    "A100-SXM4-80GB": [9728, 9728, 19456, 19456, 38912, 38912, 77824],
    "A100-PCIE-80GB": [9728, 9728, 19456, 19456, 38912, 38912, 77824],
    # [V] 1g/2g/3g from GFD; 7g = 8 × 9984 [D].
    "H100-SXM5-80GB": [9984, 9984, 20096, 20096, 40320, 40320, 79872],
    "H100-PCIE-80GB": [9984, 9984, 20096, 20096, 40320, 40320, 79872],
    # [V] 1g.12gb = 11008; the rest k × 11008 [D].
    "H100-NVL-94GB": [11008, 11008, 22016, 22016, 44032, 44032, 88064],
    # [D] 18 GiB × 11008/12288 = 16512 per slice.
    "H200-SXM-141GB": [16512, 16512, 33024, 33024, 66048, 66048, 132096],
}


@pytest.mark.parametrize(("model", "memory"), sorted(_MEMORY_MIB.items()))
def test_every_profile_has_its_real_memory(model: str, memory: list[int]) -> None:
    assert [p.memory_mib for p in GPU_MODEL_BY_NAME[model].profile_specs()] == memory


@pytest.mark.parametrize(
    ("model", "profile", "memory_mib"),
    [
        ("A100-SXM4-40GB", "1g.5gb", 4864),
        ("A100-SXM4-40GB", "2g.10gb", 9856),
        ("A100-SXM4-40GB", "3g.20gb", 19968),
        ("A100-SXM4-40GB", "4g.20gb", 19968),
        ("A100-SXM4-40GB", "7g.40gb", 40192),
        ("H100-SXM5-80GB", "1g.10gb", 9984),
        ("H100-SXM5-80GB", "2g.20gb", 20096),
        ("H100-SXM5-80GB", "3g.40gb", 40320),
        ("H100-NVL-94GB", "1g.12gb", 11008),
    ],
)
def test_verified_memory_is_used_as_given(model: str, profile: str, memory_mib: int) -> None:
    spec = profile_spec(model, profile)
    assert spec is not None and spec.memory_mib == memory_mib


@pytest.mark.parametrize("model", [m.name for m in GPU_MODELS])
def test_derived_memory_never_exceeds_the_name_nor_the_gpu(model: str) -> None:
    spec = GPU_MODEL_BY_NAME[model]
    for profile in spec.profile_specs():
        nominal_gib = int(profile.name.removesuffix("+me").split(".")[1].removesuffix("gb"))
        assert profile.memory_mib <= nominal_gib * 1024
        assert profile.memory_mib <= spec.memory_mib
    # More memory slices never means less memory.
    for small in spec.profile_specs():
        for large in spec.profile_specs():
            if small.memory_slices <= large.memory_slices:
                assert small.memory_mib <= large.memory_mib


@pytest.mark.parametrize(
    ("model", "profile", "fields"),
    [
        ("A100-SXM4-80GB", "1g.20gb", ("1g-2m", 1, 2, (0, 2, 4, 6), 4, False)),
        ("A100-SXM4-80GB", "1g.10gb+me", ("1g+me", 1, 1, (0, 1, 2, 3, 4, 5, 6), 1, True)),
        ("H200-SXM-141GB", "3g.71gb", ("3g", 3, 4, (0, 4), 2, False)),
        ("H100-NVL-94GB", "7g.94gb", ("7g", 7, 8, (0,), 1, False)),
    ],
)
def test_profile_specs_carry_the_geometry(model: str, profile: str, fields: tuple[object, ...]) -> None:
    spec = profile_spec(model, profile)
    assert spec is not None
    assert (
        spec.key,
        spec.compute_slices,
        spec.memory_slices,
        spec.starts,
        spec.max_count,
        spec.media_engines,
    ) == fields


@pytest.mark.parametrize(("model", "profile"), [("V100", "1g.5gb"), ("A100-SXM4-80GB", "1g.5gb")])
def test_profile_spec_of_unknown_model_or_profile_is_none(model: str, profile: str) -> None:
    assert profile_spec(model, profile) is None


def test_profiles_are_built_once_and_read_only() -> None:
    spec = GPU_MODEL_BY_NAME[A100_80]
    assert spec.profiles() is spec.profiles()
    with pytest.raises(TypeError):
        spec.profiles()["x"] = None  # type: ignore[index]


def test_a_spec_outside_the_catalog_derives_its_memory() -> None:
    custom = GpuModelSpec("A100-CUSTOM-80GB", "A100", 80 * 1024, "80gb")
    assert [p.memory_mib for p in custom.profile_specs()] == _MEMORY_MIB["A100-SXM4-80GB"]
    assert GpuModelSpec("T4", "T4", 16 * 1024, None).profiles() == {}


def test_a_gpu_without_mig_takes_only_the_empty_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(GPU_MODEL_BY_NAME, "T4-TEST", GpuModelSpec("T4-TEST", "T4", 16 * 1024, None))
    assert validate_layout("T4-TEST", []) == []
    with pytest.raises(LayoutError, match="T4-TEST is not MIG-capable; leave its layout empty"):
        validate_layout("T4-TEST", [["1g.5gb", 0]])
