"""GPU models and their MIG geometry, from ``docs/gpu-facts.md``, MIG geometry and placements.

A MIG-capable GPU has 8 memory slices and 7 SM (compute) slices. A GPU instance takes an aligned run of
memory slices from a fixed placement table; the table's rows are the same on every A100/H100/H200 part,
only the names (the memory in each profile's name) differ by memory size. This module also holds the
real per-profile memory (:class:`ProfileSpec`); layout enumeration lives in :mod:`scheduler.core.sizing.layouts`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import cache
from types import MappingProxyType
from typing import final

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

# Profile names by memory size, in ROWS order (docs/gpu-facts.md, MIG geometry and placements).
_FAMILY_NAMES: dict[str, tuple[str, ...]] = {
    "40gb": ("1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"),
    "80gb": ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    "94gb": ("1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"),
    "141gb": ("1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"),
}


@dataclass(frozen=True, slots=True)
class ProfileSpec:
    """One MIG profile of one GPU model: its NVIDIA name, the geometry of its row, and its real memory."""

    name: str  # NVIDIA's own, e.g. "3g.40gb", "1g.10gb+me"
    key: str  # the ProfileRow key: "1g", "1g+me", "1g-2m", "2g", "3g", "4g", "7g"
    compute_slices: int
    memory_slices: int
    starts: tuple[int, ...]
    max_count: int
    memory_mib: int  # what the instance really offers (GFD `nvidia.com/mig-<profile>.memory`), never the name

    @property
    def media_engines(self) -> bool:
        """True for the ``+me`` variant that owns the GPU's single set of media engines."""
        return self.key == "1g+me"


@final
@dataclass(frozen=True, slots=True)
class GpuModelSpec:
    name: str
    gpu_class: str
    memory_mib: int
    mig_family: str | None  # key into the profile names; None = not MIG-capable
    mig_memory_mib: tuple[int, ...] = ()  # real memory per profile, in ROWS order (see _mig_memory_mib)

    def __eq__(self, other: object) -> bool:
        if type(other) is not GpuModelSpec:  # final: the generated method's check, other.__class__ is self.__class__
            return NotImplemented
        return (self.name, self.gpu_class, self.memory_mib, self.mig_family, self.mig_memory_mib) == (
            other.name,
            other.gpu_class,
            other.memory_mib,
            other.mig_family,
            other.mig_memory_mib,
        )

    def __hash__(self) -> int:
        return hash((self.name, self.gpu_class, self.memory_mib, self.mig_family, self.mig_memory_mib))

    @property
    def mig_capable(self) -> bool:
        return self.mig_family is not None

    def profiles(self) -> Mapping[str, ProfileSpec]:
        """MIG profile name → :class:`ProfileSpec` (a superset of :class:`ProfileRow`), in ROWS order; empty
        for GPUs without MIG. The mapping is shared and read-only: it is built once per model (a static fact,
        cached for the process, whatever the cycle's speed-ups)."""
        known = _PROFILES_BY_NAME.get(self.name)  # a name lookup: hashing the whole spec costs more
        if known is None or known[0] is not self:
            known = _PROFILES_BY_NAME[self.name] = (self, _profiles_of(self))
        return known[1]

    def profile_specs(self) -> tuple[ProfileSpec, ...]:
        """The profiles in ROWS order (smallest geometry first), for listing."""
        return tuple(_profiles_of(self).values())


_PROFILES_BY_NAME: dict[str, tuple[GpuModelSpec, Mapping[str, ProfileSpec]]] = {}


@cache
def _profiles_of(spec: GpuModelSpec) -> Mapping[str, ProfileSpec]:
    if spec.mig_family is None:
        return MappingProxyType({})
    names = _FAMILY_NAMES[spec.mig_family]
    memory = spec.mig_memory_mib or _mig_memory_mib(spec.gpu_class, spec.mig_family, {})
    return MappingProxyType(
        {
            name: ProfileSpec(
                name, row.key, row.compute_slices, row.memory_slices, row.starts, row.max_count, memory_mib
            )
            for name, row, memory_mib in zip(names, ROWS, memory, strict=True)
        }
    )


# Real instance memory in MiB that ``docs/gpu-facts.md`` (MIG geometry and placements) marks [V], by row key.
_A100_40GB_MIB = {"1g": 4864, "2g": 9856, "3g": 19968, "4g": 19968, "7g": 40192}
_H100_80GB_MIB = {"1g": 9984, "2g": 20096, "3g": 40320}  # GFD nvidia.com/mig-*.memory
_H100_94GB_MIB = {"1g": 11008}  # NVIDIA/dcgm-exporter#397
_VERIFIED_BY_CLASS: dict[str, tuple[tuple[str, dict[str, int]], ...]] = {
    "A100": (("40gb", _A100_40GB_MIB),),
    "H100": (("80gb", _H100_80GB_MIB), ("94gb", _H100_94GB_MIB)),
}


def _nominal_1g_mib(family: str) -> int:
    """The memory the 1-slice 1g profile's name promises ("1g.10gb" → 10 × 1024 MiB)."""
    return int(_FAMILY_NAMES[family][0].split(".")[1].removesuffix("gb")) * 1024


def _lowest_1g_ratio(gpu_class: str) -> Fraction:
    """Lowest [V] real/nominal ratio of a 1-slice 1g profile within ``gpu_class``, or over every class when
    the class has no [V] value (H200: 11008 / 12288 from the H100 NVL)."""
    pairs = _VERIFIED_BY_CLASS.get(gpu_class) or tuple(p for ps in _VERIFIED_BY_CLASS.values() for p in ps)
    return min(Fraction(verified["1g"], _nominal_1g_mib(family)) for family, verified in pairs)


def _mig_memory_mib(gpu_class: str, family: str, verified: dict[str, int]) -> tuple[int, ...]:
    """Real memory of every profile of a model, in ROWS order.

    [V] values are used as given. Everything else is [D], derived so that it can only understate (an
    overstated slice makes a job run out of memory):

    1. A profile that occupies the same memory slices as a [V] sibling has its memory: the +me 1g = the 1g,
       the two-memory-slice 1g = the 2g, the 4g = the 3g.
    2. One memory slice, ``s1``, is the 1g's real memory: [V] where known, else the 1g's nominal size ×
       1024 × the lowest [V] real/nominal 1g ratio in the GPU's class, or over all classes when the class has
       none (A100-80GB: 10240 × 4864/5120 = 9728; H200: 18432 × 11008/12288 = 16512).
    3. A profile of ``k`` memory slices without a value from 1 or 2 gets ``k × s1``: every [V] value is at
       least that (A100-40GB 2g 9856 ≥ 2 × 4864, 7g 40192 ≥ 8 × 4864; H100 3g 40320 ≥ 4 × 9984), because
       the per-instance overhead is paid once, not per slice.
    """
    sibling = {"1g+me": "1g", "1g-2m": "2g", "4g": "3g"}
    s1 = verified.get("1g") or int(_nominal_1g_mib(family) * _lowest_1g_ratio(gpu_class))
    values = []
    for row in ROWS:
        known = verified.get(row.key) or verified.get(sibling.get(row.key, ""))
        values.append(known if known else row.memory_slices * s1)
    return tuple(values)


def _spec(name: str, gpu_class: str, memory_mib: int, family: str, verified: dict[str, int]) -> GpuModelSpec:
    return GpuModelSpec(name, gpu_class, memory_mib, family, _mig_memory_mib(gpu_class, family, verified))


# memory_mib is the whole GPU as GPU Feature Discovery reports it (`nvidia.com/gpu.memory`) where the facts
# sheet gives the value (H100 80GB: 81559); otherwise the nominal size × 1024.
GPU_MODELS: tuple[GpuModelSpec, ...] = (
    _spec("A100-SXM4-40GB", "A100", 40 * 1024, "40gb", _A100_40GB_MIB),
    _spec("A100-SXM4-80GB", "A100", 80 * 1024, "80gb", {}),
    _spec("A100-PCIE-40GB", "A100", 40 * 1024, "40gb", _A100_40GB_MIB),
    _spec("A100-PCIE-80GB", "A100", 80 * 1024, "80gb", {}),
    _spec("H100-SXM5-80GB", "H100", 81559, "80gb", _H100_80GB_MIB),
    _spec("H100-PCIE-80GB", "H100", 81559, "80gb", _H100_80GB_MIB),
    _spec("H100-NVL-94GB", "H100", 94 * 1024, "94gb", _H100_94GB_MIB),
    _spec("H200-SXM-141GB", "H200", 141 * 1024, "141gb", {}),
)
GPU_MODEL_BY_NAME = {spec.name: spec for spec in GPU_MODELS}
GPU_CLASSES: tuple[str, ...] = tuple(dict.fromkeys(spec.gpu_class for spec in GPU_MODELS))


def profile_spec(model: str, profile: str) -> ProfileSpec | None:
    """The profile ``profile`` of catalog model ``model``, or None when either is unknown."""
    spec = GPU_MODEL_BY_NAME.get(model)
    return spec.profiles().get(profile) if spec else None


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
    # The +me profile's max_count of 1 is also the rule "one set of media engines per GPU" (docs/gpu-facts.md,
    # MIG geometry and placements).
    counts: dict[str, int] = {}
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
