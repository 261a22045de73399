"""GPU models and their MIG geometry, from ``shared/facts/gpu-facts.md`` §1.

A MIG-capable GPU has 8 memory slices and 7 SM (compute) slices. A GPU instance takes an aligned run of
memory slices from a fixed placement table; the table's rows are the same on every A100/H100/H200 part,
only the names (the memory in each profile's name) differ by memory size. Issue 3 extends this module with
real per-profile memory and layout enumeration; this part holds what the inventory needs to validate a
GPU's layout.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

MEMORY_SLICES = 8
COMPUTE_SLICES = 7


@dataclass(frozen=True, slots=True)
class ProfileRow:
    """One row of the placement table: geometry shared by every MIG GPU."""

    key: str  # "1g", "1g+me", "1g-2m" (the 1g profile with two memory slices), "2g", "3g", "4g", "7g"
    compute_slices: int
    memory_slices: int
    starts: tuple[int, ...]
    max_count: int


ROWS: tuple[ProfileRow, ...] = (
    ProfileRow("1g", 1, 1, (0, 1, 2, 3, 4, 5, 6), 7),
    ProfileRow("1g+me", 1, 1, (0, 1, 2, 3, 4, 5, 6), 1),
    ProfileRow("1g-2m", 1, 2, (0, 2, 4, 6), 4),
    ProfileRow("2g", 2, 2, (0, 2, 4), 3),
    ProfileRow("3g", 3, 4, (0, 4), 2),
    ProfileRow("4g", 4, 4, (0,), 1),
    ProfileRow("7g", 7, 8, (0,), 1),
)
_ROW_BY_KEY = {row.key: row for row in ROWS}

# Profile names by memory size, in ROWS order (facts §1.2).
_FAMILY_NAMES: dict[str, tuple[str, ...]] = {
    "40gb": ("1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"),
    "80gb": ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    "94gb": ("1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"),
    "141gb": ("1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"),
}


@dataclass(frozen=True, slots=True)
class GpuModelSpec:
    name: str
    gpu_class: str
    memory_mib: int
    mig_family: str | None  # key into the profile names; None = not MIG-capable

    @property
    def mig_capable(self) -> bool:
        return self.mig_family is not None

    def profiles(self) -> dict[str, ProfileRow]:
        """MIG profile name → geometry row; empty for GPUs without MIG."""
        if self.mig_family is None:
            return {}
        return dict(zip(_FAMILY_NAMES[self.mig_family], ROWS, strict=True))


# memory_mib is the whole GPU as GPU Feature Discovery reports it (`nvidia.com/gpu.memory`) where the facts
# sheet gives the value (H100 80GB: 81559); otherwise the nominal size × 1024.
GPU_MODELS: tuple[GpuModelSpec, ...] = (
    GpuModelSpec("A100-SXM4-40GB", "A100", 40 * 1024, "40gb"),
    GpuModelSpec("A100-SXM4-80GB", "A100", 80 * 1024, "80gb"),
    GpuModelSpec("A100-PCIE-40GB", "A100", 40 * 1024, "40gb"),
    GpuModelSpec("A100-PCIE-80GB", "A100", 80 * 1024, "80gb"),
    GpuModelSpec("H100-SXM5-80GB", "H100", 81559, "80gb"),
    GpuModelSpec("H100-PCIE-80GB", "H100", 81559, "80gb"),
    GpuModelSpec("H100-NVL-94GB", "H100", 94 * 1024, "94gb"),
    GpuModelSpec("H200-SXM-141GB", "H200", 141 * 1024, "141gb"),
)
GPU_MODEL_BY_NAME = {spec.name: spec for spec in GPU_MODELS}
GPU_CLASSES: tuple[str, ...] = tuple(dict.fromkeys(spec.gpu_class for spec in GPU_MODELS))


class LayoutError(ValueError):
    """A MIG layout that cannot exist on the GPU; the message says why."""


def validate_layout(model: str, layout: Sequence[Sequence[object]]) -> list[tuple[str, int]]:
    """Check a layout of ``[profile, start]`` pairs on ``model``; return it normalised, sorted by start.

    Raises :class:`LayoutError` naming the first problem: an unknown model or profile, a start the
    placement table does not allow, overlapping memory slices, or more instances than the profile's maximum.
    """
    spec = GPU_MODEL_BY_NAME.get(model)
    if spec is None:
        raise LayoutError(f"unknown GPU model {model!r}; known: {', '.join(GPU_MODEL_BY_NAME)}")
    pairs = list(_pairs(layout))
    if not pairs:
        return []
    profiles = spec.profiles()
    if not profiles:
        raise LayoutError(f"{model} is not MIG-capable; leave its layout empty")
    used = [False] * MEMORY_SLICES
    counts: dict[str, int] = {}
    media_engines = 0
    for name, start in sorted(pairs, key=lambda pair: pair[1]):
        row = profiles.get(name)
        if row is None:
            raise LayoutError(f"{name!r} is not a MIG profile of {model}; use one of: {', '.join(profiles)}")
        if start not in row.starts:
            allowed = ", ".join(str(s) for s in row.starts)
            raise LayoutError(f"{name} cannot start at memory slice {start}; allowed starts: {allowed}")
        for index in range(start, start + row.memory_slices):
            if used[index]:
                raise LayoutError(f"{name}@{start} overlaps another instance at memory slice {index}")
            used[index] = True
        counts[name] = counts.get(name, 0) + 1
        if counts[name] > row.max_count:
            raise LayoutError(f"at most {row.max_count} × {name} fit on one {model}")
        media_engines += row.key == "1g+me"
    if media_engines > 1:
        raise LayoutError("at most one +me instance per GPU: the GPU has a single set of media engines")
    return sorted(pairs, key=lambda pair: pair[1])


def _pairs(layout: Iterable[Sequence[object]]) -> Iterable[tuple[str, int]]:
    for item in layout:
        if (
            not isinstance(item, list | tuple)
            or len(item) != 2
            or not isinstance(item[0], str)
            or isinstance(item[1], bool)
            or not isinstance(item[1], int)
        ):
            raise LayoutError(f'{item!r} is not a [profile, start] pair such as ["3g.40gb", 4]')
        yield item[0], item[1]


def compute_fraction(model: str, profile: str) -> float:
    """The share of a GPU that a MIG instance counts as: its compute slices / 7."""
    row = GPU_MODEL_BY_NAME[model].profiles()[profile]
    return row.compute_slices / COMPUTE_SLICES
